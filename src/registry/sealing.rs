//! Credentials at rest: the records of clusters, repositories and credential templates (bearer
//! tokens, passwords, private keys) are sealed ([`crate::seal`]) before they reach the store, so
//! whoever can read etcd or the redb file reads no credential. Memory holds them in clear, as it
//! must to use them.
//!
//! The keys form a ring: the first seals, every one opens. They come from `--secrets-key-file`
//! (one key per line, the first in force, older ones after it while a rotation runs) and, always
//! last, the server key the process started with (`server.secretkey`, else the generated one),
//! which seals when no file is given. Each sealed record names its key by a one-byte id (a
//! fingerprint of the key), so a reader picks the right key and an operator can tell which key a
//! store still needs (`tiphys admin rotate-secrets-key` re-seals everything under the first).
//!
//! A sealed record is bound to its store key and revision: it cannot be moved to another object
//! or replayed as an older version of its own without failing to open.

use std::path::Path;

use sha2::Digest as _;

use crate::seal::{self, SealError, SealKey};

/// The purpose label of the derived keys (a new label is a new set of keys).
const PURPOSE: &str = "tiphys/credentials-at-rest/v1";
/// The shortest key a key file may hold: 32 bytes, as `openssl rand -base64 32` prints 44.
pub const MIN_KEY_LEN: usize = 32;

/// The keys that seal and open credentials at rest.
#[derive(Debug)]
pub struct SecretsKeys {
    /// The first seals; all open.
    ring: Vec<SealKey>,
    /// What the ring was derived from, in its order (to derive a changed ring).
    masters: Vec<Vec<u8>>,
    /// How many of the ring's keys came from `--secrets-key-file`.
    from_file: usize,
}

impl SecretsKeys {
    /// The ring of `--secrets-key-file`'s keys (when given) followed by the server key's.
    pub fn new(file_keys: Vec<Vec<u8>>, server_key: &[u8]) -> Self {
        Self::of(file_keys, Some(server_key))
    }

    /// [`Self::new`] where the server key may be unknown (a tool reading a store no server
    /// has started on); `None` when that leaves no key at all.
    pub fn of(file_keys: Vec<Vec<u8>>, server_key: Option<&[u8]>) -> Self {
        let from_file = file_keys.len();
        let mut masters = file_keys;
        masters.extend(server_key.map(<[u8]>::to_vec));
        Self::derived(masters, from_file)
    }

    fn derived(masters: Vec<Vec<u8>>, from_file: usize) -> Self {
        Self {
            ring: masters.iter().map(|m| derive(m)).collect(),
            masters,
            from_file,
        }
    }

    /// The ring once the server key became `server_key` (`server.secretkey` edited while the
    /// server runs): without a key file the new server key seals and the ones before still
    /// open, so what they sealed stays readable until re-sealed; with a key file it only
    /// opens. `None` when the ring already has it.
    pub fn with_server_key(&self, server_key: &[u8]) -> Option<Self> {
        if self.masters.iter().any(|m| m == server_key) {
            return None;
        }
        let mut masters = self.masters.clone();
        if self.from_file == 0 {
            masters.insert(0, server_key.to_vec());
        } else {
            masters.push(server_key.to_vec());
        }
        Some(Self::derived(masters, self.from_file))
    }

    /// The keys of a `--secrets-key-file`: one per line (surrounding blanks trimmed), the first
    /// in force; empty lines and `#` comments are skipped. Every error names the file and line.
    pub fn read_file(path: &Path) -> Result<Vec<Vec<u8>>, String> {
        let name = path.display();
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read --secrets-key-file {name}: {e}"))?;
        let mut keys: Vec<Vec<u8>> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = format!("--secrets-key-file {name} line {}", n + 1);
            if line.len() < MIN_KEY_LEN {
                return Err(format!(
                    "{at}: a key must be at least {MIN_KEY_LEN} characters (it has {}); make one with `openssl rand -base64 32`",
                    line.len()
                ));
            }
            if keys.iter().any(|k| k == line.as_bytes()) {
                return Err(format!("{at}: this key is already listed above"));
            }
            keys.push(line.as_bytes().to_vec());
        }
        if keys.is_empty() {
            return Err(format!(
                "--secrets-key-file {name} holds no key (one per line; # starts a comment)"
            ));
        }
        Ok(keys)
    }

    /// The id of the key that seals, as [`Self::describe`] and the logs print it.
    pub fn sealing_id(&self) -> u8 {
        self.ring.first().map_or(0, SealKey::id)
    }

    /// The ids of every key held, the sealing one first.
    pub fn ids(&self) -> Vec<u8> {
        self.ring.iter().map(SealKey::id).collect()
    }

    /// `plaintext` sealed for the record at `store_key`, revision `rv` (0 for values without
    /// one). With no key at all (see [`Self::of`]) the result opens nowhere.
    pub fn seal(&self, store_key: &str, rv: u64, plaintext: &[u8]) -> Vec<u8> {
        match self.ring.first() {
            Some(key) => key.seal(plaintext, &context(store_key, rv)),
            None => Vec::new(),
        }
    }

    /// The plaintext of a record sealed by [`Self::seal`]; else why not, for an operator.
    pub fn open(&self, store_key: &str, rv: u64, sealed: &[u8]) -> Result<Vec<u8>, String> {
        let Some(id) = seal::key_id(sealed) else {
            return Err(SealError::Malformed.to_string());
        };
        let context = context(store_key, rv);
        let mut candidates = self.ring.iter().filter(|k| k.id() == id).peekable();
        if candidates.peek().is_none() {
            return Err(format!(
                "its credentials are sealed under secrets key {id:02x}, which this process does not hold \
                 (it holds {}): give the key that sealed them in --secrets-key-file, or start with the \
                 server key (server.secretkey) in force when they were written",
                self.describe()
            ));
        }
        // Ids are one byte: two keys of a ring may share one, so try each.
        let mut last = SealError::Forged;
        for key in candidates {
            match key.open(sealed, &context) {
                Ok(plain) => return Ok(plain),
                Err(e) => last = e,
            }
        }
        Err(format!(
            "its sealed credentials do not open under secrets key {id:02x}: {last}"
        ))
    }

    /// The ids held, for messages: `3f (sealing), a1`.
    pub fn describe(&self) -> String {
        self.ids()
            .iter()
            .enumerate()
            .map(|(i, id)| {
                if i == 0 {
                    format!("{id:02x} (sealing)")
                } else {
                    format!("{id:02x}")
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn derive(master: &[u8]) -> SealKey {
    // The id is a fingerprint of the master, not of the derived key; one byte of a hash tells
    // nothing useful about either.
    let id = sha2::Sha256::new()
        .chain_update(b"tiphys secrets key id\0")
        .chain_update(master)
        .finalize()[0];
    SealKey::derive(master, PURPOSE, id)
}

/// What a sealed record is bound to: its store key and revision.
fn context(store_key: &str, rv: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(store_key.len() + 8);
    out.extend_from_slice(&rv.to_le_bytes());
    out.extend_from_slice(store_key.as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &[u8] = b"0123456789abcdef0123456789abcdef-a";
    const B: &[u8] = b"0123456789abcdef0123456789abcdef-b";

    #[test]
    fn the_first_key_seals_and_every_key_opens() {
        let old = SecretsKeys::new(vec![A.to_vec()], b"server");
        let sealed = old.seal("/k", 7, b"token");
        assert_eq!(seal::key_id(&sealed), Some(old.sealing_id()));
        // Mid-rotation: B seals, A still opens.
        let rotating = SecretsKeys::new(vec![B.to_vec(), A.to_vec()], b"server");
        assert_eq!(rotating.open("/k", 7, &sealed).unwrap(), b"token");
        assert_ne!(rotating.sealing_id(), old.sealing_id());
        // The server key always opens what it sealed before a key file was given.
        let by_server = SecretsKeys::new(Vec::new(), b"server").seal("/k", 7, b"token");
        assert_eq!(rotating.open("/k", 7, &by_server).unwrap(), b"token");
    }

    #[test]
    fn a_changed_server_key_seals_without_a_key_file_and_only_opens_with_one() {
        let before = SecretsKeys::new(Vec::new(), b"server one");
        let sealed = before.seal("/k", 1, b"token");
        let after = before.with_server_key(b"server two").unwrap();
        assert_ne!(after.sealing_id(), before.sealing_id());
        assert_eq!(after.open("/k", 1, &sealed).unwrap(), b"token");
        assert!(after.with_server_key(b"server one").is_none());

        let filed = SecretsKeys::new(vec![A.to_vec()], b"server one");
        let changed = filed.with_server_key(b"server two").unwrap();
        assert_eq!(changed.sealing_id(), filed.sealing_id());
        assert_eq!(changed.ids().len(), 3);
    }

    #[test]
    fn a_record_opens_only_at_its_key_and_revision_and_names_a_missing_key() {
        let keys = SecretsKeys::new(vec![A.to_vec()], b"server");
        let sealed = keys.seal("/clusters/a", 3, b"token");
        assert!(
            keys.open("/clusters/b", 3, &sealed)
                .unwrap_err()
                .contains("do not open")
        );
        assert!(keys.open("/clusters/a", 4, &sealed).is_err());
        let other = SecretsKeys::new(vec![B.to_vec()], b"other server");
        let err = other.open("/clusters/a", 3, &sealed).unwrap_err();
        assert!(
            err.contains(&format!(
                "{:02x}, which this process does not hold",
                keys.sealing_id()
            )),
            "{err}"
        );
        assert!(
            keys.open("/k", 1, b"plain")
                .unwrap_err()
                .contains("not a sealed value")
        );
    }

    #[test]
    fn key_files_are_checked_line_by_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys");
        let read = |text: &str| {
            std::fs::write(&path, text).unwrap();
            SecretsKeys::read_file(&path)
        };
        let keys = read("# rotated 2026-11\n\n  0123456789abcdef0123456789abcdef-b  \n0123456789abcdef0123456789abcdef-a\n").unwrap();
        assert_eq!(keys, vec![B.to_vec(), A.to_vec()]);
        let err = read("short\n").unwrap_err();
        assert!(
            err.contains("line 1: a key must be at least 32 characters (it has 5)"),
            "{err}"
        );
        let err =
            read("0123456789abcdef0123456789abcdef-a\n0123456789abcdef0123456789abcdef-a\n").unwrap_err();
        assert!(err.contains("line 2: this key is already listed above"), "{err}");
        assert!(read("# nothing\n\n").unwrap_err().contains("holds no key"));
        let missing = SecretsKeys::read_file(&dir.path().join("absent")).unwrap_err();
        assert!(missing.starts_with("cannot read --secrets-key-file"), "{missing}");
    }
}
