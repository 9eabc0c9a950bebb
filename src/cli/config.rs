//! The client config file: contexts, servers and tokens, shaped like Argo
//! CD's (`~/.config/argocd/config`) so either CLI can read the other's.
//!
//! Keys this version does not know (`refresh-token`, `certificate-authority-data`,
//! `prompts-enabled`, …) are kept as they are when the file is rewritten.
//! The file holds tokens: it is written atomically with mode 0600, and a file
//! that does not parse is an error, never silently replaced.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow};
use serde::{Deserialize, Deserializer, Serialize};
use serde_yaml_ng::Value;

/// Keys a [`User`] may carry that are credentials, removed on logout.
const TOKEN_KEYS: [&str; 1] = ["refresh-token"];

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct LocalConfig {
    #[serde(default, deserialize_with = "nullable")]
    pub contexts: Vec<ContextRef>,
    #[serde(default, deserialize_with = "nullable")]
    pub current_context: String,
    #[serde(default, deserialize_with = "nullable")]
    pub servers: Vec<Server>,
    #[serde(default, deserialize_with = "nullable")]
    pub users: Vec<User>,
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ContextRef {
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    #[serde(default, deserialize_with = "nullable")]
    pub server: String,
    #[serde(default, deserialize_with = "nullable")]
    pub user: String,
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// A server and how to reach it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Server {
    #[serde(default, deserialize_with = "nullable")]
    pub server: String,
    #[serde(default, deserialize_with = "nullable", skip_serializing_if = "is_false")]
    pub grpc_web: bool,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub grpc_web_root_path: String,
    #[serde(default, deserialize_with = "nullable", skip_serializing_if = "is_false")]
    pub plain_text: bool,
    #[serde(default, deserialize_with = "nullable", skip_serializing_if = "is_false")]
    pub insecure: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_crt: Option<PathBuf>,
    #[serde(default, deserialize_with = "nullable", skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<String>,
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct User {
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    #[serde(
        default,
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub auth_token: String,
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// A context with its server and user entries, as found.
#[derive(Clone, Debug)]
pub struct Resolved<'a> {
    pub context: &'a ContextRef,
    pub server: Option<&'a Server>,
    pub user: Option<&'a User>,
}

impl Resolved<'_> {
    pub fn token(&self) -> Option<&str> {
        self.user.map(|u| u.auth_token.as_str()).filter(|t| !t.is_empty())
    }
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// Go writes an empty list or string as `null`: read that as the default.
fn nullable<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// `--config`, else `<config dir>/tiphys/config`.
pub fn path(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    match given {
        Some(path) => Ok(path.to_path_buf()),
        None => dirs::config_dir()
            .map(|dir| dir.join("tiphys").join("config"))
            .ok_or_else(|| anyhow!("no per-user config directory on this system: pass --config PATH")),
    }
}

/// Compares server addresses as people type them: `https://host:443/`, `host:443` and `host`
/// are one server (the one the CLI connects to for each, [`super::conn::server_address`]).
pub fn same_server(a: &str, b: &str) -> bool {
    match (super::conn::server_address(a), super::conn::server_address(b)) {
        (Some(a), Some(b)) => a == b,
        _ => a.trim().eq_ignore_ascii_case(b.trim()),
    }
}

impl LocalConfig {
    /// Reads the file; a missing (or empty) file is an empty config.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(err) => {
                return Err(err).with_context(|| format!("cannot read client config {}", path.display()));
            }
        };
        Self::parse(&text).map_err(|reason| {
            anyhow!(
                "client config {} is not valid: {reason} (fix or remove the file; it was left unchanged)",
                path.display()
            )
        })
    }

    fn parse(text: &str) -> Result<Self, String> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        serde_yaml_ng::from_str(text).map_err(|e| e.to_string())
    }

    /// Writes the file atomically with mode 0600 (its directory 0700 when created here).
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        let text = serde_yaml_ng::to_string(self).context("cannot encode the client config")?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
            && !dir.exists()
        {
            use std::os::unix::fs::DirBuilderExt as _;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        crate::fsutil::write_private(path, text.as_bytes())
            .with_context(|| format!("cannot write client config {}", path.display()))
    }

    pub fn context(&self, name: &str) -> Option<&ContextRef> {
        self.contexts.iter().find(|c| c.name == name)
    }

    pub fn server(&self, server: &str) -> Option<&Server> {
        self.servers.iter().find(|s| s.server == server)
    }

    pub fn user(&self, name: &str) -> Option<&User> {
        self.users.iter().find(|u| u.name == name)
    }

    /// A context with its server and user; an error names what is missing.
    pub fn resolve(&self, name: &str) -> anyhow::Result<Resolved<'_>> {
        let context = self.context(name).ok_or_else(|| {
            anyhow!(
                "context '{name}' does not exist (`tiphys context` lists them; `tiphys login` creates one)"
            )
        })?;
        Ok(Resolved {
            context,
            server: self.server(&context.server),
            user: self.user(&context.user),
        })
    }

    /// The current context, if one is set.
    pub fn current(&self) -> anyhow::Result<Option<Resolved<'_>>> {
        if self.current_context.is_empty() {
            return Ok(None);
        }
        self.resolve(&self.current_context).map(Some).map_err(|_| {
            anyhow!(
                "the current context '{}' does not exist in the client config: pick one with `tiphys context NAME`",
                self.current_context
            )
        })
    }

    /// The context to use for an explicitly given server: the current one
    /// when it points there, else the first that does.
    pub fn for_server(&self, server: &str) -> Option<Resolved<'_>> {
        let current = self.context(&self.current_context);
        current
            .filter(|c| same_server(&c.server, server))
            .or_else(|| self.contexts.iter().find(|c| same_server(&c.server, server)))
            .and_then(|c| self.resolve(&c.name).ok())
    }

    pub fn upsert_server(&mut self, server: Server) {
        match self.servers.iter_mut().find(|s| s.server == server.server) {
            Some(existing) => {
                let other = std::mem::take(&mut existing.other);
                *existing = Server { other, ..server };
            }
            None => self.servers.push(server),
        }
    }

    /// Sets a user's token (creating the user), dropping any other credential it had.
    pub fn set_token(&mut self, name: &str, token: &str) {
        let user = match self.users.iter_mut().position(|u| u.name == name) {
            Some(i) => &mut self.users[i],
            None => {
                self.users.push(User {
                    name: name.to_owned(),
                    ..User::default()
                });
                let last = self.users.len() - 1;
                &mut self.users[last]
            }
        };
        user.auth_token = token.to_owned();
        for key in TOKEN_KEYS {
            user.other.remove(key);
        }
    }

    /// Removes a user's credentials; returns whether there were any.
    pub fn remove_token(&mut self, name: &str) -> bool {
        let Some(user) = self.users.iter_mut().find(|u| u.name == name) else {
            return false;
        };
        let had = !user.auth_token.is_empty() || TOKEN_KEYS.iter().any(|k| user.other.contains_key(*k));
        user.auth_token.clear();
        for key in TOKEN_KEYS {
            user.other.remove(key);
        }
        had
    }

    pub fn upsert_context(&mut self, context: ContextRef) {
        match self.contexts.iter_mut().find(|c| c.name == context.name) {
            Some(existing) => {
                let other = std::mem::take(&mut existing.other);
                *existing = ContextRef { other, ..context };
            }
            None => self.contexts.push(context),
        }
    }

    /// Removes a context, and its user and server entries when no other
    /// context uses them. Returns whether it existed.
    pub fn remove_context(&mut self, name: &str) -> bool {
        let Some(i) = self.contexts.iter().position(|c| c.name == name) else {
            return false;
        };
        let removed = self.contexts.remove(i);
        if !self.contexts.iter().any(|c| c.user == removed.user) {
            self.users.retain(|u| u.name != removed.user);
        }
        if !self.contexts.iter().any(|c| c.server == removed.server) {
            self.servers.retain(|s| s.server != removed.server);
        }
        if self.current_context == name {
            self.current_context.clear();
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    const ARGOCD: &str = "\
contexts:
- name: cd.example.com
  server: cd.example.com
  user: cd.example.com
current-context: cd.example.com
prompts-enabled: false
servers:
- grpc-web-root-path: \"\"
  insecure: true
  server: cd.example.com
  certificate-authority-data: abc
users:
- auth-token: tok
  name: cd.example.com
  refresh-token: refresh
";

    #[test]
    fn reads_argo_cd_config_and_keeps_unknown_keys() {
        let mut cfg = LocalConfig::parse(ARGOCD).unwrap();
        let current = cfg.current().unwrap().unwrap();
        assert_eq!(current.context.server, "cd.example.com");
        assert!(current.server.unwrap().insecure);
        assert_eq!(current.token(), Some("tok"));
        cfg.current_context = "other".to_owned();
        let text = serde_yaml_ng::to_string(&cfg).unwrap();
        for kept in [
            "prompts-enabled: false",
            "certificate-authority-data: abc",
            "refresh-token: refresh",
        ] {
            assert!(text.contains(kept), "{kept} lost:\n{text}");
        }
        let again = LocalConfig::parse(&text).unwrap();
        assert_eq!(again, cfg);
    }

    #[test]
    fn nulls_and_empty_files_are_empty() {
        assert_eq!(LocalConfig::parse("").unwrap(), LocalConfig::default());
        let cfg = LocalConfig::parse("contexts: null\ncurrent-context: \"\"\nservers: null\nusers: null\n")
            .unwrap();
        assert!(cfg.contexts.is_empty() && cfg.current().unwrap().is_none());
    }

    #[test]
    fn malformed_file_names_the_file_and_reason_and_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        std::fs::write(&path, "contexts: [\n").unwrap();
        let err = format!("{:#}", LocalConfig::load(&path).unwrap_err());
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert!(err.contains("line"), "{err}");
        std::fs::write(&path, "contexts: 5\n").unwrap();
        let err = format!("{:#}", LocalConfig::load(&path).unwrap_err());
        assert!(err.contains("invalid type"), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "contexts: 5\n");
    }

    #[test]
    fn missing_file_is_empty_and_save_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/config");
        let mut cfg = LocalConfig::load(&path).unwrap();
        assert_eq!(cfg, LocalConfig::default());
        cfg.upsert_server(Server {
            server: "h:1".to_owned(),
            grpc_web: true,
            ..Server::default()
        });
        cfg.set_token("h:1", "t");
        cfg.upsert_context(ContextRef {
            name: "h:1".to_owned(),
            server: "h:1".to_owned(),
            user: "h:1".to_owned(),
            other: BTreeMap::new(),
        });
        cfg.current_context = "h:1".to_owned();
        cfg.save(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dir_mode = std::fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(dir_mode, 0o700);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("grpc-web: true") && text.contains("auth-token: t"),
            "{text}"
        );
        assert!(text.contains("current-context: h:1"), "{text}");
        assert_eq!(LocalConfig::load(&path).unwrap(), cfg);
    }

    #[test]
    fn tokens_contexts_and_servers() {
        let mut cfg = LocalConfig::parse(ARGOCD).unwrap();
        cfg.set_token("cd.example.com", "new");
        let user = cfg.user("cd.example.com").unwrap();
        assert_eq!(user.auth_token, "new");
        assert!(!user.other.contains_key("refresh-token"));
        assert!(cfg.remove_token("cd.example.com"));
        assert!(!cfg.remove_token("cd.example.com"));
        assert!(cfg.current().unwrap().unwrap().token().is_none());

        cfg.upsert_context(ContextRef {
            name: "second".to_owned(),
            server: "cd.example.com".to_owned(),
            user: "second".to_owned(),
            other: BTreeMap::new(),
        });
        assert_eq!(
            cfg.for_server("https://CD.example.com/").unwrap().context.name,
            "cd.example.com"
        );
        cfg.current_context = "second".to_owned();
        assert_eq!(cfg.for_server("cd.example.com").unwrap().context.name, "second");
        assert!(cfg.for_server("elsewhere:443").is_none());

        // The server stays while another context uses it.
        assert!(cfg.remove_context("second"));
        assert!(cfg.current_context.is_empty());
        assert!(cfg.server("cd.example.com").is_some());
        assert!(cfg.remove_context("cd.example.com"));
        assert!(cfg.servers.is_empty() && cfg.users.is_empty() && cfg.contexts.is_empty());
        assert!(!cfg.remove_context("cd.example.com"));
    }

    #[test]
    fn upsert_server_keeps_unknown_keys() {
        let mut cfg = LocalConfig::parse(ARGOCD).unwrap();
        cfg.upsert_server(Server {
            server: "cd.example.com".to_owned(),
            plain_text: true,
            ..Server::default()
        });
        let server = cfg.server("cd.example.com").unwrap();
        assert!(server.plain_text && !server.insecure);
        assert!(server.other.contains_key("certificate-authority-data"));
    }

    #[test]
    fn dangling_current_context_is_an_error() {
        let cfg = LocalConfig::parse("current-context: gone\n").unwrap();
        let err = cfg.current().unwrap_err().to_string();
        assert!(err.contains("'gone'"), "{err}");
    }

    #[test]
    fn server_names_compare_loosely() {
        assert!(same_server("https://a:443/", "a:443"));
        assert!(same_server("A", "a:443"));
        assert!(same_server("[2001:DB8::1]:8080", "http://[2001:db8::1]:8080/"));
        assert!(!same_server("a:443", "a:444"));
        assert!(!same_server("a:443", "a.example:443"));
        assert!(!same_server("a:443/x", "a:443"));
    }
}
