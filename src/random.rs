//! Secrets from the operating system's CSPRNG.

use rand::RngExt as _;

const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-";

/// A random string of `len` characters from `[0-9A-Za-z-]` (6 bits each).
pub fn token(len: usize) -> String {
    let mut rng = rand::rng();
    (0..len)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
}

/// `n` random bytes.
pub fn bytes(n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    rand::rng().fill(&mut out[..]);
    out
}
