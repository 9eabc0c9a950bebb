//! What both kinds of JWT (local tokens, `auth::jwt`; provider ID tokens, `oidc::verify`)
//! need besides `jsonwebtoken`.

use std::str::FromStr as _;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::Algorithm;
use serde::Deserialize;

/// The `alg` a header names when `jsonwebtoken` cannot read the header
/// because it does not know that algorithm (`none`, `hs256`, …): only to say
/// so. `None` when the algorithm is a known one (the header is wrong elsewhere)
/// or the header is no JSON object with a text `alg`.
pub fn named_algorithm(token: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Alg {
        alg: String,
    }
    let header = URL_SAFE_NO_PAD.decode(token.split('.').next()?).ok()?;
    let alg = serde_json::from_slice::<Alg>(&header).ok()?.alg;
    Algorithm::from_str(&alg).is_err().then_some(alg)
}
