//! The `continue` token of a page: where the page stopped (a [`Position`] in its sort, not an
//! offset, so it stays valid while applications come and go), the query it belongs to, and when
//! it expires, sealed ([`crate::seal`]) under a key derived from the server key, so that every
//! replica with the same key opens it and nobody can read or alter it.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use super::index::Position;
use crate::seal::SealKey;

/// The sealing purpose of continue tokens.
pub const PURPOSE: &str = "tiphys/application-list-continue/v1";
/// How long a continue token is good for.
pub const LIFETIME_S: i64 = 15 * 60;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Sealed {
    /// The query's digest ([`digest`]).
    q: String,
    /// Expiry, Unix seconds.
    exp: i64,
    at: Position,
}

/// Why a continue token is refused. Each reads as what the caller should do: list again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CursorError {
    #[error("the continue token is not one this server issued (altered or truncated): list again without it")]
    Unreadable,
    #[error(
        "the continue token belongs to another query (its filters, search or sort differ): list again without it"
    )]
    OtherQuery,
    #[error("the continue token expired: list again without it")]
    Expired,
}

/// The token for a page of the query with digest `query` that stopped at `at`.
pub fn issue(key: &SealKey, query: &str, at: Position, now_s: i64) -> String {
    let sealed = Sealed {
        q: query.to_owned(),
        exp: now_s + LIFETIME_S,
        at,
    };
    // A struct of strings and an integer always serializes.
    let plain = serde_json::to_vec(&sealed).unwrap_or_default();
    URL_SAFE_NO_PAD.encode(key.seal(&plain, PURPOSE.as_bytes()))
}

/// Where the page of `token` stopped, if the token is good for the query with digest `query`.
pub fn open(key: &SealKey, token: &str, query: &str, now_s: i64) -> Result<Position, CursorError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(token.trim())
        .map_err(|_| CursorError::Unreadable)?;
    let plain = key
        .open(&bytes, PURPOSE.as_bytes())
        .map_err(|_| CursorError::Unreadable)?;
    let sealed: Sealed = serde_json::from_slice(&plain).map_err(|_| CursorError::Unreadable)?;
    if sealed.q != query {
        return Err(CursorError::OtherQuery);
    }
    if now_s >= sealed.exp {
        return Err(CursorError::Expired);
    }
    Ok(sealed.at)
}

/// A digest of what a query selects and how it sorts: the parts given, each named, in a fixed
/// order (limit and facets are not among them: a page may be of any size).
pub fn digest(parts: &[(&str, String)]) -> String {
    use sha2::Digest as _;
    let mut hash = sha2::Sha256::new();
    for (name, value) in parts {
        hash.update(name.as_bytes());
        hash.update([0]);
        hash.update(value.as_bytes());
        hash.update([0]);
    }
    URL_SAFE_NO_PAD.encode(&hash.finalize()[..16])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at() -> Position {
        Position {
            primary: String::new(),
            name: "guestbook".into(),
            namespace: "argocd".into(),
        }
    }

    #[test]
    fn a_token_opens_for_its_query_until_it_expires() {
        let key = SealKey::derive(b"server key", PURPOSE, 1);
        let q = digest(&[("sort", "name".into())]);
        let token = issue(&key, &q, at(), 1000);
        assert_eq!(open(&key, &token, &q, 1000), Ok(at()));
        assert_eq!(
            open(&key, &token, &q, 1000 + LIFETIME_S),
            Err(CursorError::Expired)
        );
        let other = digest(&[("sort", "created".into())]);
        assert_eq!(open(&key, &token, &other, 1000), Err(CursorError::OtherQuery));
    }

    #[test]
    fn an_altered_token_or_another_servers_key_is_unreadable() {
        let key = SealKey::derive(b"server key", PURPOSE, 1);
        let q = digest(&[]);
        let token = issue(&key, &q, at(), 0);
        let mut bytes = URL_SAFE_NO_PAD.decode(&token).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let altered = URL_SAFE_NO_PAD.encode(&bytes);
        assert_eq!(open(&key, &altered, &q, 0), Err(CursorError::Unreadable));
        assert_eq!(open(&key, "not base64 !", &q, 0), Err(CursorError::Unreadable));
        let other = SealKey::derive(b"another key", PURPOSE, 1);
        assert_eq!(open(&other, &token, &q, 0), Err(CursorError::Unreadable));
    }

    #[test]
    fn digests_separate_their_parts() {
        assert_ne!(digest(&[("a", "bc".into())]), digest(&[("ab", "c".into())]));
    }
}
