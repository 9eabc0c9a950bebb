//! SSH known-host keys for repository hosts: the lines of `argocd-ssh-known-hosts-cm`'s
//! `ssh_known_hosts` (OpenSSH's known_hosts format), read with the `ssh-key` crate.
//!
//! A host is written `host` or `[host]:port`; a hashed name (`|1|salt|hash`, what
//! `ssh-keyscan -H` prints) is kept as it is: it matches its host when the host is asked for,
//! but no glob in a list filter can see through it.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use ssh_key::known_hosts::HostPatterns;
use ssh_key::{HashAlg, PublicKey};

/// One key of one host, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostKey {
    /// `host`, `[host]:port` or a hashed name.
    pub host: String,
    /// The key type, e.g. `ssh-ed25519`.
    pub sub_type: String,
    /// The base64 key blob.
    pub data: String,
}

impl HostKey {
    /// Checks the entry: a valid host, a key type the blob agrees with, a blob that decodes.
    pub fn parsed(host: &str, sub_type: &str, data: &str) -> Result<(Self, PublicKey), String> {
        check_host(host)?;
        let data = data.trim();
        if sub_type.is_empty() {
            return Err(format!("{host}: the SSH key type is missing"));
        }
        let algorithm = ssh_key::Algorithm::new(sub_type)
            .map_err(|_| format!("{host}: unknown SSH key type {sub_type:?}"))?;
        let blob = data.split_whitespace().next().unwrap_or_default();
        let bytes = STANDARD
            .decode(blob)
            .map_err(|_| format!("{host}: the key data is not base64"))?;
        let key =
            PublicKey::from_bytes(&bytes).map_err(|e| format!("{host}: not a valid SSH public key ({e})"))?;
        if key.algorithm() != algorithm {
            return Err(format!(
                "{host}: the key data is a {} key, not {sub_type}",
                key.algorithm().as_str()
            ));
        }
        let entry = Self {
            host: host.to_owned(),
            sub_type: sub_type.to_owned(),
            // Only the blob: a comment after it is not part of the key.
            data: data.split_whitespace().next().unwrap_or_default().to_owned(),
        };
        Ok((entry, key))
    }

    /// The key's SHA256 fingerprint as upstream shows it (`SHA256:` and unpadded base64).
    pub fn fingerprint(key: &PublicKey) -> String {
        key.fingerprint(HashAlg::Sha256).to_string()
    }

    /// Whether this entry is for `host` on `port`: the name itself, `[host]:port` off port 22,
    /// or a hashed name of either.
    pub fn is_for(&self, host: &str, port: u16) -> bool {
        let name = if port == 22 {
            host.to_owned()
        } else {
            format!("[{host}]:{port}")
        };
        if self.host.starts_with("|1|") {
            return hashed_matches(&self.host, &name);
        }
        self.host == name
    }

    /// The key, for a caller that connects.
    pub fn public_key(&self) -> Option<PublicKey> {
        PublicKey::from_openssh(&format!("{} {}", self.sub_type, self.data)).ok()
    }

    /// The known_hosts line.
    pub fn line(&self) -> String {
        format!("{} {} {}", self.host, self.sub_type, self.data)
    }
}

/// Every entry of a known_hosts text; comment and blank lines are skipped, and a line naming
/// several hosts gives one entry each. A bad line is refused with its line number.
pub fn parse_known_hosts(text: &str) -> Result<Vec<HostKey>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let n = n + 1;
        if line.starts_with('@') {
            return Err(format!(
                "line {n}: markers (@cert-authority, @revoked) are not supported"
            ));
        }
        let mut parts = line.split_whitespace();
        let (Some(hosts), Some(sub_type), Some(data)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!("line {n}: expected \"host key-type base64-key\""));
        };
        for host in hosts.split(',') {
            let (entry, _) = HostKey::parsed(host, sub_type, data).map_err(|e| format!("line {n}: {e}"))?;
            out.push(entry);
        }
    }
    Ok(out)
}

/// A host as known_hosts names it: a DNS name or IP address, optionally `[name]:port`, or a
/// hashed name.
pub fn check_host(host: &str) -> Result<(), String> {
    if host.starts_with("|1|") {
        return match host.parse::<HostPatterns>() {
            Ok(HostPatterns::HashedName { .. }) => Ok(()),
            _ => Err(format!("{host:?} is not a valid hashed host name (|1|salt|hash)")),
        };
    }
    let name = match host.strip_prefix('[') {
        Some(rest) => {
            let (name, port) = rest
                .split_once("]:")
                .ok_or_else(|| format!("{host:?}: expected [host]:port"))?;
            port.parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("{host:?}: invalid port {port:?}"))?;
            name
        }
        None => host,
    };
    if is_host_name(name) || name.parse::<std::net::IpAddr>().is_ok() {
        Ok(())
    } else {
        Err(format!("invalid host name {host:?}"))
    }
}

/// A DNS name (labels of letters, digits and inner hyphens), as upstream's check.
pub fn is_host_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// OpenSSH's hashed names: HMAC-SHA1 of the name, keyed with the salt.
fn hashed_matches(hashed: &str, name: &str) -> bool {
    let Ok(HostPatterns::HashedName { salt, hash }) = hashed.parse::<HostPatterns>() else {
        return false;
    };
    let Ok(mut mac) = Hmac::<sha1::Sha1>::new_from_slice(&salt) else {
        return false;
    };
    mac.update(name.as_bytes());
    mac.verify_slice(&hash).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    // github.com's published Ed25519 host key.
    const ED25519: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl";

    #[test]
    fn entries_are_checked_and_fingerprinted() {
        let (entry, key) = HostKey::parsed("github.com", "ssh-ed25519", ED25519).unwrap();
        assert_eq!(
            HostKey::fingerprint(&key),
            "SHA256:+DiY3wvvV6TuJJhbpZisF/zLDA0zPMSvHdkr4UvCOqU"
        );
        assert!(entry.is_for("github.com", 22));
        assert!(!entry.is_for("github.com", 2222));
        let (ported, _) = HostKey::parsed("[git.example]:2222", "ssh-ed25519", ED25519).unwrap();
        assert!(ported.is_for("git.example", 2222));
    }

    #[test]
    fn bad_entries_are_refused_with_the_reason() {
        for (host, kind, data, reason) in [
            ("github.com", "ssh-rsa", ED25519, "not ssh-rsa"),
            ("github.com", "ssh-foo", ED25519, "unknown SSH key type"),
            ("github.com", "ssh-ed25519", "AAAA!!", "not base64"),
            ("github.com", "ssh-ed25519", "AAAA", "not a valid"),
            ("bad host", "ssh-ed25519", ED25519, "invalid host name"),
            ("[h]:0", "ssh-ed25519", ED25519, "invalid port"),
            ("|1|x|y", "ssh-ed25519", ED25519, "hashed"),
        ] {
            let err = HostKey::parsed(host, kind, data).unwrap_err();
            assert!(err.contains(reason), "{host} {kind}: {err}");
        }
    }

    #[test]
    fn hashed_names_match_their_host() {
        // `ssh-keygen -H` of "github.com" with this salt.
        let salt = [7u8; 20];
        let mut mac = Hmac::<sha1::Sha1>::new_from_slice(&salt).unwrap();
        mac.update(b"github.com");
        let hash = mac.finalize().into_bytes();
        let name = format!("|1|{}|{}", STANDARD.encode(salt), STANDARD.encode(hash));
        let (entry, _) = HostKey::parsed(&name, "ssh-ed25519", ED25519).unwrap();
        assert!(entry.is_for("github.com", 22));
        assert!(!entry.is_for("gitlab.com", 22));
    }

    #[test]
    fn known_hosts_text_is_read_line_by_line() {
        let text = format!("# comment\n\ngithub.com,gh.example ssh-ed25519 {ED25519} a comment\n");
        let entries = parse_known_hosts(&text).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[1].host, "gh.example");
        assert_eq!(entries[0].data, ED25519);
        let err = parse_known_hosts("github.com ssh-ed25519\n").unwrap_err();
        assert!(err.starts_with("line 1:"), "{err}");
    }
}
