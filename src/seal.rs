//! Sealing: small values encrypted and authenticated (AEAD) under a key derived from a
//! master secret for one purpose, so that what the server hands out (a cookie) or keeps
//! (a secret at rest) can be neither read nor altered, and a value sealed for one purpose
//! never opens for another.
//!
//! - **Key**: HKDF-SHA256 of the master secret (salt [`SALT`], info = the purpose label) to a
//!   32-byte XChaCha20-Poly1305 key. The master (e.g. the token-signing key) is never used as
//!   a cipher key itself, and each purpose gets an unrelated key.
//! - **Format**: `[VERSION] [key id] [24-byte random nonce] [ciphertext ‖ 16-byte tag]`,
//!   [`OVERHEAD`] bytes more than the plaintext. XChaCha's 192-bit nonces are drawn at random:
//!   no counter has to be shared between processes or survive a restart.
//! - **Bound to**: the version, the key id, the purpose label and a caller-chosen context are
//!   the associated data, so changing any of them (or a single bit) fails [`SealKey::open`].
//! - **Key id**: one byte the caller assigns (a key generation), stored in clear so that a
//!   reader holding several keys picks the right one ([`key_id`]) and a key can be rotated:
//!   unseal with the old id, seal again with the new.
//!
//! The module knows nothing of who uses it (a leaf, below the store): callers encode the bytes
//! as they need (base64url for a cookie).

use chacha20poly1305::XChaCha20Poly1305;
use chacha20poly1305::aead::{Aead as _, KeyInit as _, Payload};
use hkdf::Hkdf;
use rand::RngExt as _;

/// The format version, the first byte of every sealed value.
pub const VERSION: u8 = 1;
/// The HKDF salt: fixed and public, it only separates tiphys's derivations from others'.
pub const SALT: &[u8] = b"tiphys seal v1";
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;
/// Bytes a sealed value has beyond its plaintext.
pub const OVERHEAD: usize = 2 + NONCE_LEN + TAG_LEN;

/// Why a value does not open. Callers treat every kind alike (refuse, keep nothing); the
/// kinds are for logs and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("not a sealed value (too short or unknown format version)")]
    Malformed,
    #[error("sealed under key id {found}, not {expected}")]
    OtherKey { found: u8, expected: u8 },
    #[error(
        "the sealed value does not authenticate (altered, or sealed under another key, purpose or context)"
    )]
    Forged,
}

/// A key for one purpose, derived from a master secret.
pub struct SealKey {
    id: u8,
    purpose: &'static str,
    cipher: XChaCha20Poly1305,
}

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealKey")
            .field("id", &self.id)
            .field("purpose", &self.purpose)
            .finish_non_exhaustive()
    }
}

impl SealKey {
    /// The key for `purpose` (a fixed label naming what is sealed, with a version, e.g.
    /// `"tiphys/oidc-login-state/v1"`) derived from `master`, known by key id `id`.
    pub fn derive(master: &[u8], purpose: &'static str, id: u8) -> Self {
        let mut key = [0u8; 32];
        // 32 bytes is far below HKDF-SHA256's limit of 255 × 32: this cannot fail.
        let _ = Hkdf::<sha2_hkdf::Sha256>::new(Some(SALT), master).expand(purpose.as_bytes(), &mut key);
        let cipher = XChaCha20Poly1305::new(&key.into());
        Self { id, purpose, cipher }
    }

    pub fn id(&self) -> u8 {
        self.id
    }

    pub fn purpose(&self) -> &'static str {
        self.purpose
    }

    /// `plaintext` sealed, bound to `context` (which the reader must present again; may be
    /// empty).
    pub fn seal(&self, plaintext: &[u8], context: &[u8]) -> Vec<u8> {
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill(&mut nonce[..]);
        let aad = self.aad(context);
        // Encryption fails only for inputs of gigabytes; an empty result then fails to open.
        let sealed = self
            .cipher
            .encrypt(
                &nonce.into(),
                Payload {
                    msg: plaintext,
                    aad: &aad,
                },
            )
            .unwrap_or_default();
        let mut out = Vec::with_capacity(OVERHEAD + plaintext.len());
        out.push(VERSION);
        out.push(self.id);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        out
    }

    /// The plaintext of a value [`seal`](Self::seal)ed by this key with this `context`.
    pub fn open(&self, sealed: &[u8], context: &[u8]) -> Result<Vec<u8>, SealError> {
        if sealed.len() < OVERHEAD || sealed[0] != VERSION {
            return Err(SealError::Malformed);
        }
        if sealed[1] != self.id {
            return Err(SealError::OtherKey {
                found: sealed[1],
                expected: self.id,
            });
        }
        let (nonce, body) = sealed[2..].split_at(NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().map_err(|_| SealError::Malformed)?;
        let aad = self.aad(context);
        self.cipher
            .decrypt(&nonce.into(), Payload { msg: body, aad: &aad })
            .map_err(|_| SealError::Forged)
    }

    /// Version, key id, purpose and context, each length-prefixed so no two differ only in
    /// where one ends.
    fn aad(&self, context: &[u8]) -> Vec<u8> {
        let mut aad = Vec::with_capacity(2 + 8 + self.purpose.len() + context.len());
        aad.push(VERSION);
        aad.push(self.id);
        for part in [self.purpose.as_bytes(), context] {
            aad.extend_from_slice(&(part.len() as u32).to_be_bytes());
            aad.extend_from_slice(part);
        }
        aad
    }
}

/// The key id a sealed value names, to pick among several keys (rotation); `None` when it is
/// not a sealed value of this format.
pub fn key_id(sealed: &[u8]) -> Option<u8> {
    (sealed.len() >= OVERHEAD && sealed[0] == VERSION).then(|| sealed[1])
}

#[cfg(test)]
mod tests {
    use super::*;

    const PURPOSE: &str = "tiphys/test/v1";

    #[test]
    fn a_sealed_value_opens_with_its_key_purpose_and_context_only() {
        let key = SealKey::derive(b"master secret", PURPOSE, 7);
        let sealed = key.seal(b"hello", b"ctx");
        assert_eq!(sealed.len(), 5 + OVERHEAD);
        assert_eq!(key_id(&sealed), Some(7));
        assert_eq!(key.open(&sealed, b"ctx").unwrap(), b"hello");
        // The same derivation in another process opens it.
        let again = SealKey::derive(b"master secret", PURPOSE, 7);
        assert_eq!(again.open(&sealed, b"ctx").unwrap(), b"hello");

        assert_eq!(key.open(&sealed, b"other").unwrap_err(), SealError::Forged);
        assert_eq!(key.open(&sealed, b"").unwrap_err(), SealError::Forged);
        let other_purpose = SealKey::derive(b"master secret", "tiphys/other/v1", 7);
        assert_eq!(
            other_purpose.open(&sealed, b"ctx").unwrap_err(),
            SealError::Forged
        );
        let other_master = SealKey::derive(b"another secret", PURPOSE, 7);
        assert_eq!(other_master.open(&sealed, b"ctx").unwrap_err(), SealError::Forged);
        let other_id = SealKey::derive(b"master secret", PURPOSE, 8);
        assert_eq!(
            other_id.open(&sealed, b"ctx").unwrap_err(),
            SealError::OtherKey {
                found: 7,
                expected: 8
            }
        );
    }

    #[test]
    fn any_altered_byte_is_refused() {
        let key = SealKey::derive(b"k", PURPOSE, 1);
        let sealed = key.seal(b"some plaintext", b"");
        for i in 0..sealed.len() {
            let mut bad = sealed.clone();
            bad[i] ^= 0x01;
            assert!(key.open(&bad, b"").is_err(), "byte {i}");
        }
        // Relabelling the key id does not help either: the id is authenticated.
        let mut relabelled = sealed.clone();
        relabelled[1] = 2;
        let key2 = SealKey::derive(b"k", PURPOSE, 2);
        assert_eq!(key2.open(&relabelled, b"").unwrap_err(), SealError::Forged);
        for short in [&sealed[..0], &sealed[..OVERHEAD - 1]] {
            assert_eq!(key.open(short, b"").unwrap_err(), SealError::Malformed);
            assert_eq!(key_id(short), None);
        }
        let mut truncated = sealed.clone();
        truncated.pop();
        assert_eq!(key.open(&truncated, b"").unwrap_err(), SealError::Forged);
        let mut version = sealed;
        version[0] = 2;
        assert_eq!(key.open(&version, b"").unwrap_err(), SealError::Malformed);
    }

    #[test]
    fn nonces_are_fresh_and_the_key_is_not_the_master() {
        let key = SealKey::derive(b"k", PURPOSE, 1);
        let (a, b) = (key.seal(b"same", b""), key.seal(b"same", b""));
        assert_ne!(a, b, "a random nonce per value");
        assert_ne!(a[2..2 + NONCE_LEN], b[2..2 + NONCE_LEN]);
        // A cipher keyed with the master (padded to 32 bytes) does not open it.
        let mut raw = [0u8; 32];
        raw[0] = b'k';
        let direct = XChaCha20Poly1305::new(&raw.into());
        let nonce: [u8; NONCE_LEN] = a[2..2 + NONCE_LEN].try_into().unwrap();
        assert!(direct.decrypt(&nonce.into(), &a[2 + NONCE_LEN..]).is_err());
        assert!(format!("{key:?}").contains("purpose"));
        assert_eq!(key.seal(b"", b"").len(), OVERHEAD);
    }
}
