//! Reading armored OpenPGP public keys with rPGP (the `pgp` crate), into what Argo CD reports
//! of a key: its ID, fingerprint, owner, algorithm and size, and the key re-armored on its own.
//! Upstream imports keys into a throwaway gpg keyring for this; tiphys runs no gpg.

use pgp::composed::{ArmorOptions, PublicOrSecret, SignedPublicKey};
use pgp::ser::Serialize;
use pgp::types::{EcdsaPublicParams, KeyDetails, PublicParams};

/// The trust of a key no one has signed for this server: what gpg reports for a key just
/// imported into an empty keyring, as upstream's answers show.
pub const TRUST_UNKNOWN: &str = "unknown";

/// One public key as the API reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedKey {
    /// The last 16 hex digits of the fingerprint, upper case (gpg's long key ID).
    pub key_id: String,
    pub fingerprint: String,
    /// The first user ID.
    pub owner: String,
    /// Algorithm and size as gpg prints them: `rsa4096`, `ed25519`, `nistp256`.
    pub sub_type: String,
    /// This key alone, armored.
    pub armored: String,
}

impl ParsedKey {
    /// The stored `GnuPGPublicKey` object of this key (what the registry holds under its ID).
    pub fn object(&self) -> serde_json::Value {
        serde_json::json!({
            "keyID": self.key_id,
            "fingerprint": self.fingerprint,
            "owner": self.owner,
            "trust": TRUST_UNKNOWN,
            "subType": self.sub_type,
            "keyData": self.armored,
        })
    }
}

/// Every public key in `text` (one armor block may hold several). Refused, with the reason:
/// text that is not an armored key block, a secret key, a key whose self-signatures do not
/// verify, and a block with no key.
pub fn parse_public_keys(text: &str) -> Result<Vec<ParsedKey>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("no key data".to_owned());
    }
    if !text.starts_with("-----BEGIN PGP") {
        return Err(
            "not an ASCII-armored OpenPGP key (expected -----BEGIN PGP PUBLIC KEY BLOCK-----)".to_owned(),
        );
    }
    let (keys, _headers) = PublicOrSecret::from_armor_many(text.as_bytes())
        .map_err(|e| format!("not a readable OpenPGP key block: {e}"))?;
    let mut out = Vec::new();
    for key in keys {
        let key = key.map_err(|e| format!("not a readable OpenPGP key: {e}"))?;
        let key = match key {
            PublicOrSecret::Public(key) => key,
            PublicOrSecret::Secret(_) => {
                return Err(
                    "this is a private key: give the public key only (gpg --armor --export KEY_ID)"
                        .to_owned(),
                );
            }
        };
        out.push(describe(&key)?);
    }
    if out.is_empty() {
        return Err("the key block holds no public key".to_owned());
    }
    Ok(out)
}

fn describe(key: &SignedPublicKey) -> Result<ParsedKey, String> {
    key.verify_bindings()
        .map_err(|e| format!("the key's self-signatures do not verify: {e}"))?;
    let fingerprint = format!("{:X}", key.fingerprint());
    let key_id = hex_upper(key.legacy_key_id().as_ref());
    let owner = key
        .details
        .users
        .first()
        .map(|u| String::from_utf8_lossy(u.id.id()).into_owned())
        .unwrap_or_default();
    let armored = key
        .to_armored_string(ArmorOptions::default())
        .map_err(|e| format!("cannot re-armor the key: {e}"))?;
    Ok(ParsedKey {
        key_id,
        fingerprint,
        owner,
        sub_type: sub_type(key.public_params()),
        armored,
    })
}

/// gpg's name for a key's algorithm and size.
fn sub_type(params: &PublicParams) -> String {
    match params {
        PublicParams::RSA(_) => format!("rsa{}", first_mpi_bits(params)),
        PublicParams::DSA(_) => format!("dsa{}", first_mpi_bits(params)),
        PublicParams::Elgamal(_) => format!("elg{}", first_mpi_bits(params)),
        PublicParams::ECDSA(EcdsaPublicParams::P256 { .. }) => "nistp256".to_owned(),
        PublicParams::ECDSA(EcdsaPublicParams::P384 { .. }) => "nistp384".to_owned(),
        PublicParams::ECDSA(EcdsaPublicParams::P521 { .. }) => "nistp521".to_owned(),
        PublicParams::ECDSA(EcdsaPublicParams::Secp256k1 { .. }) => "secp256k1".to_owned(),
        PublicParams::ECDSA(_) => "ecdsa".to_owned(),
        PublicParams::EdDSALegacy(_) | PublicParams::Ed25519(_) => "ed25519".to_owned(),
        PublicParams::Ed448(_) => "ed448".to_owned(),
        PublicParams::ECDH(_) | PublicParams::X25519(_) => "cv25519".to_owned(),
        PublicParams::X448(_) => "cv448".to_owned(),
        _ => "unknown".to_owned(),
    }
}

/// The bit length of the first MPI of the encoded parameters (RSA's n, DSA's and Elgamal's p):
/// an MPI starts with its length in bits, two bytes big-endian.
fn first_mpi_bits(params: &PublicParams) -> u16 {
    params
        .to_bytes()
        .ok()
        .and_then(|b| Some(u16::from_be_bytes([*b.first()?, *b.get(1)?])))
        .unwrap_or(0)
}

fn hex_upper(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02X}")).collect()
}

/// gpg's key ID of a key ID or a fingerprint given by a caller: 16 hex digits, or the last 16
/// of a 40-digit fingerprint, upper case; `None` when `s` is neither.
pub fn key_id_of(s: &str) -> Option<String> {
    let s = s.trim();
    if !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    match s.len() {
        16 => Some(s.to_ascii_uppercase()),
        40 => Some(s[24..].to_ascii_uppercase()),
        _ => None,
    }
}
