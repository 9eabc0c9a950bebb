//! Reading `argocd-cm`, `argocd-rbac-cm` and `argocd-secret` from the config
//! dir, each as a manifest file (`NAME.yaml`/`NAME.yml`) or as a mounted
//! volume (`NAME/`, one file per key). Reading the bytes ([`read_input`]) is
//! separate from interpreting them ([`parse_input`]) so the watcher can tell
//! "nothing changed" by comparing bytes.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};

use base64::Engine;
use serde_yaml_ng::Value;

pub const ARGOCD_CM: &str = "argocd-cm";
pub const ARGOCD_RBAC_CM: &str = "argocd-rbac-cm";
pub const ARGOCD_SECRET: &str = "argocd-secret";

/// Kubernetes caps an object at 1 MiB; anything larger is not a ConfigMap or
/// Secret someone meant to point us at, and we read these files twice a second.
const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// A configuration problem, located as precisely as we can (`file:line[:col]`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{location}: {reason}")]
pub struct ConfigError {
    pub location: String,
    pub reason: String,
    /// The object whose content is wrong, when known (for per-object metrics).
    pub object: Option<&'static str>,
}

impl ConfigError {
    pub fn new(location: impl fmt::Display, reason: impl Into<String>) -> Self {
        Self {
            location: location.to_string(),
            reason: reason.into(),
            object: None,
        }
    }

    /// The same error, attributed to `object`.
    #[must_use]
    pub fn in_object(mut self, object: &'static str) -> Self {
        self.object = Some(object);
        self
    }
}

/// One object's key/value data and where each key came from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawObject {
    pub name: &'static str,
    /// The manifest file or the volume directory; None when the object is absent.
    pub origin: Option<PathBuf>,
    pub data: BTreeMap<String, String>,
    /// 1-based line of each key in a manifest (none for the volume form).
    pub lines: BTreeMap<String, u32>,
    /// The keys whose manifest value is a literal block scalar (`key: |`): line N of the value
    /// is N lines below the key.
    pub literal: std::collections::BTreeSet<String>,
}

/// Where a key is defined, for error messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    pub path: Option<PathBuf>,
    pub line: Option<u32>,
    /// Shown when there is no file (the object is absent, so defaults apply).
    pub object: &'static str,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.path, self.line) {
            (Some(path), Some(line)) => write!(f, "{}:{line}", path.display()),
            (Some(path), None) => write!(f, "{}", path.display()),
            (None, _) => f.write_str(self.object),
        }
    }
}

impl RawObject {
    pub fn empty(name: &'static str) -> Self {
        Self {
            name,
            ..Self::default()
        }
    }

    /// `file:line` for a manifest, `DIR/NAME/KEY` for a volume.
    pub fn locate(&self, key: &str) -> Location {
        let path = self.origin.as_ref().map(|origin| {
            // Only manifests carry a .yaml/.yml extension; a volume dir is named
            // exactly after the object (see `read_input`).
            if is_manifest_path(origin) {
                origin.clone()
            } else {
                origin.join(key)
            }
        });
        let line = self.lines.get(key).copied();
        Location {
            path,
            line,
            object: self.name,
        }
    }
}

impl RawObject {
    /// Where line `line` (1-based) of key `key`'s value is: in a manifest, that many lines below
    /// the key when the value is a literal block (as policies are written), else the key's line;
    /// in a volume, that line of the key's file.
    pub fn locate_line(&self, key: &str, line: usize) -> Location {
        let mut at = self.locate(key);
        let line = u32::try_from(line).unwrap_or(u32::MAX);
        at.line = match (&at.path, at.line) {
            (Some(path), Some(key_line)) if is_manifest_path(path) && self.literal.contains(key) => {
                Some(key_line.saturating_add(line))
            }
            (Some(path), _) if !is_manifest_path(path) => Some(line),
            (_, known) => known,
        };
        at
    }
}

/// Whether a `key: value` line starts a literal block scalar (`|`, `|-`, `|+`).
fn is_literal_block(line: &str) -> bool {
    let line = line.trim_end();
    [": |", ": |-", ": |+"].iter().any(|end| line.ends_with(end))
}

fn is_manifest_path(path: &Path) -> bool {
    matches!(path.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
}

/// The bytes behind one object, before interpretation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    Absent,
    Manifest {
        path: PathBuf,
        bytes: Vec<u8>,
    },
    /// Entries sorted by name; hidden entries, subdirectories and dangling symlinks left out.
    Volume {
        path: PathBuf,
        files: Vec<(String, Vec<u8>)>,
    },
}

/// Reads whichever form of object `name` exists in `dir`.
pub fn read_input(dir: &Path, name: &str) -> Result<Input, ConfigError> {
    let candidates = [
        dir.join(format!("{name}.yaml")),
        dir.join(format!("{name}.yml")),
        dir.join(name),
    ];
    let mut found = Vec::new();
    for path in candidates {
        match std::fs::metadata(&path) {
            Ok(meta) => found.push((path, meta.is_dir())),
            Err(err) if err.kind() == ErrorKind::NotFound => {}
            Err(err) => return Err(ConfigError::new(path.display(), err.to_string())),
        }
    }
    match found.as_slice() {
        [] => Ok(Input::Absent),
        [(path, false)] if is_manifest_path(path) => Ok(Input::Manifest {
            bytes: read_capped(path)?,
            path: path.clone(),
        }),
        [(path, true)] if !is_manifest_path(path) => read_volume(path),
        [(path, true)] => Err(ConfigError::new(
            path.display(),
            "is a directory, expected a YAML manifest",
        )),
        [(path, false)] => Err(ConfigError::new(
            path.display(),
            format!("is a file; expected a directory with one file per key, or {name}.yaml"),
        )),
        [(first, _), (second, _), ..] => Err(ConfigError::new(
            first.display(),
            format!(
                "{name} is defined twice, here and in {}; keep one",
                second.display()
            ),
        )),
    }
}

/// As Kubernetes mounts a ConfigMap or Secret: `KEY -> ..data/KEY` symlinks,
/// `..data` itself a symlink swapped atomically on update.
fn read_volume(dir: &Path) -> Result<Input, ConfigError> {
    let io_err = |path: &Path, err: std::io::Error| ConfigError::new(path.display(), err.to_string());
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| io_err(dir, e))? {
        let entry = entry.map_err(|e| io_err(dir, e))?;
        let path = entry.path();
        let Some(key) = entry.file_name().to_str().map(str::to_owned) else {
            return Err(ConfigError::new(
                path.display(),
                "file name is not valid UTF-8, so it cannot be a key",
            ));
        };
        if key.starts_with('.') {
            continue;
        }
        match std::fs::metadata(&path) {
            Ok(meta) if meta.is_dir() => continue,
            Ok(_) => {}
            // A key symlink dangles for a moment while Kubernetes swaps `..data`.
            Err(err) if err.kind() == ErrorKind::NotFound => continue,
            Err(err) => return Err(io_err(&path, err)),
        }
        files.push((key, read_capped(&path)?));
    }
    files.sort();
    Ok(Input::Volume {
        path: dir.to_path_buf(),
        files,
    })
}

fn read_capped(path: &Path) -> Result<Vec<u8>, ConfigError> {
    let err = |e: std::io::Error| ConfigError::new(path.display(), e.to_string());
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(err)?
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(err)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(ConfigError::new(
            path.display(),
            "larger than 1 MiB, the most a Kubernetes object may hold",
        ));
    }
    Ok(bytes)
}

/// Reads and parses object `name` (`argocd-secret` is a Secret, the others ConfigMaps).
pub fn read_object(dir: &Path, name: &'static str) -> Result<RawObject, ConfigError> {
    parse_input(name, &read_input(dir, name)?)
}

pub fn parse_input(name: &'static str, input: &Input) -> Result<RawObject, ConfigError> {
    match input {
        Input::Absent => Ok(RawObject::empty(name)),
        Input::Volume { path, files } => {
            let mut data = BTreeMap::new();
            for (key, bytes) in files {
                let value = String::from_utf8(bytes.clone()).map_err(|_| {
                    ConfigError::new(path.join(key).display(), "value is not valid UTF-8 text")
                })?;
                data.insert(key.clone(), value);
            }
            Ok(RawObject {
                name,
                origin: Some(path.clone()),
                data,
                ..RawObject::empty(name)
            })
        }
        Input::Manifest { path, bytes } => parse_manifest(name, path, bytes),
    }
}

fn parse_manifest(name: &'static str, path: &Path, bytes: &[u8]) -> Result<RawObject, ConfigError> {
    let is_secret = name == ARGOCD_SECRET;
    let want_kind = if is_secret { "Secret" } else { "ConfigMap" };
    let text =
        std::str::from_utf8(bytes).map_err(|_| ConfigError::new(path.display(), "not valid UTF-8 text"))?;
    let doc: Value = serde_yaml_ng::from_str(text).map_err(|err| yaml_error(path, &err))?;
    let top_lines = key_lines(text, None);
    let at = |lines: &BTreeMap<String, u32>, key: &str| match lines.get(key) {
        Some(line) => format!("{}:{line}", path.display()),
        None => path.display().to_string(),
    };
    let Value::Mapping(top) = doc else {
        return Err(ConfigError::new(
            path.display(),
            format!("expected a {want_kind} manifest (a YAML mapping)"),
        ));
    };
    match top.get("kind") {
        Some(Value::String(kind)) if kind == want_kind => {}
        Some(Value::String(kind)) => {
            return Err(ConfigError::new(
                at(&top_lines, "kind"),
                format!("kind is {kind}, but {name} must be a {want_kind}"),
            ));
        }
        _ => {
            return Err(ConfigError::new(
                path.display(),
                format!("missing `kind: {want_kind}`"),
            ));
        }
    }
    if let Some(Value::String(actual)) = top.get("metadata").and_then(|m| m.get("name"))
        && actual != name
    {
        return Err(ConfigError::new(
            at(&key_lines(text, Some("metadata")), "name"),
            format!("metadata.name is {actual:?}, but this file must hold {name}; is it the right file?"),
        ));
    }
    if !is_secret && top.contains_key("stringData") {
        return Err(ConfigError::new(
            at(&top_lines, "stringData"),
            "stringData is a Secret field; a ConfigMap keeps plain strings in data",
        ));
    }

    let mut obj = RawObject {
        name,
        origin: Some(path.to_path_buf()),
        ..RawObject::default()
    };
    // stringData is applied last: it wins over data, as the API server merges them.
    let sections: &[&str] = if is_secret {
        &["data", "stringData"]
    } else {
        &["data"]
    };
    for &section in sections {
        let lines = key_lines(text, Some(section));
        let entries = match top.get(section) {
            None | Some(Value::Null) => continue,
            Some(Value::Mapping(m)) => m,
            Some(_) => {
                return Err(ConfigError::new(
                    at(&top_lines, section),
                    format!("{section} must be a mapping"),
                ));
            }
        };
        for (key, value) in entries {
            let Value::String(key) = key else {
                return Err(ConfigError::new(
                    at(&top_lines, section),
                    format!("{section}: keys must be strings"),
                ));
            };
            let here = at(&lines, key);
            let Value::String(value) = value else {
                let fix = if value.is_null() {
                    "write \"\" for an empty value"
                } else {
                    "quote the value"
                };
                let got = type_name(value);
                return Err(ConfigError::new(
                    here,
                    format!("{section}.{key}: expected a string, got {got}; {fix}"),
                ));
            };
            let value = if is_secret && section == "data" {
                decode_base64(value).map_err(|why| ConfigError::new(&here, format!("data.{key}: {why}")))?
            } else {
                value.clone()
            };
            obj.data.insert(key.clone(), value);
            if let Some(&line) = lines.get(key) {
                obj.lines.insert(key.clone(), line);
                let text_line = text.lines().nth(line as usize - 1).unwrap_or_default();
                if is_literal_block(text_line) {
                    obj.literal.insert(key.clone());
                }
            }
        }
    }
    Ok(obj)
}

fn decode_base64(value: &str) -> Result<String, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(value)
        .map_err(|e| format!("not valid base64 ({e}); put plain text under stringData instead"))?;
    String::from_utf8(bytes).map_err(|_| "decodes to bytes that are not UTF-8 text".to_owned())
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

fn yaml_error(path: &Path, err: &serde_yaml_ng::Error) -> ConfigError {
    let location = match err.location() {
        Some(loc) => format!("{}:{}:{}", path.display(), loc.line(), loc.column()),
        None => path.display().to_string(),
    };
    ConfigError::new(location, format!("invalid YAML: {err}"))
}

/// The 1-based line of each key directly under top-level `section` (or of each
/// top-level key with None). A line scan, not a YAML parser: it recognises
/// block-style keys (plain or quoted) at the section's first indentation, which
/// is how manifests are written; keys it cannot place simply get no line.
fn key_lines(text: &str, section: Option<&str>) -> BTreeMap<String, u32> {
    let mut lines = BTreeMap::new();
    let mut inside = section.is_none();
    let mut child_indent = if section.is_none() { Some(0) } else { None };
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start_matches(' ');
        if trimmed.trim().is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let indent = line.len() - trimmed.len();
        if indent == 0 && section.is_some() {
            inside = section.is_some_and(|s| line_key(trimmed) == Some(s));
            child_indent = None;
            continue;
        }
        if !inside {
            continue;
        }
        let expected = *child_indent.get_or_insert(indent);
        if indent == expected
            && let Some(key) = line_key(trimmed)
        {
            lines.entry(key.to_owned()).or_insert(index as u32 + 1);
        }
    }
    lines
}

/// The key a `key: value` line defines, if it looks like one.
fn line_key(line: &str) -> Option<&str> {
    let line = line.trim_end();
    if let Some(quote) = line.chars().next().filter(|c| *c == '"' || *c == '\'') {
        let inner = &line[1..];
        let end = inner.find(quote)?;
        return inner[end + 1..]
            .trim_start()
            .starts_with(':')
            .then(|| &inner[..end]);
    }
    if line.starts_with(['-', '?', '{', '[', '#', '&', '*', '!', '|', '>']) {
        return None;
    }
    // A plain key ends at the first `:` followed by a blank or the line's end.
    let colon = line
        .char_indices()
        .find(|&(i, c)| c == ':' && line[i + 1..].chars().next().is_none_or(|n| n == ' ' || n == '\t'))?;
    let key = line[..colon.0].trim_end();
    (!key.is_empty()).then_some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, rel: &str, text: &str) -> PathBuf {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, text).unwrap();
        path
    }

    fn err_of(dir: &Path, name: &'static str) -> ConfigError {
        read_object(dir, name).unwrap_err()
    }

    #[test]
    fn configmap_manifest_with_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "argocd-cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-cm\n  labels:\n    a: b\ndata:\n  url: https://cd.example.com\n  \"accounts.alice\": apiKey, login\n  policy: |\n    url: not-a-key\n  'users.anonymous.enabled': \"false\"\n",
        );
        let obj = read_object(dir.path(), ARGOCD_CM).unwrap();
        assert_eq!(obj.origin.as_deref(), Some(path.as_path()));
        assert_eq!(obj.data["url"], "https://cd.example.com");
        assert_eq!(obj.data["accounts.alice"], "apiKey, login");
        assert_eq!(obj.data["policy"], "url: not-a-key\n");
        assert_eq!(obj.lines["url"], 8);
        assert_eq!(obj.lines["accounts.alice"], 9);
        assert_eq!(obj.lines["users.anonymous.enabled"], 12);
        assert_eq!(obj.locate("url").to_string(), format!("{}:8", path.display()));
    }

    #[test]
    fn yml_extension_and_absent() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "argocd-rbac-cm.yml",
            "kind: ConfigMap\ndata:\n  policy.default: role:readonly\n",
        );
        assert_eq!(
            read_object(dir.path(), ARGOCD_RBAC_CM).unwrap().data["policy.default"],
            "role:readonly"
        );
        let absent = read_object(dir.path(), ARGOCD_CM).unwrap();
        assert_eq!(absent, RawObject::empty(ARGOCD_CM));
        assert_eq!(absent.locate("url").to_string(), "argocd-cm");
    }

    #[test]
    fn secret_base64_and_string_data_precedence() {
        let dir = tempfile::tempdir().unwrap();
        // c2VjcmV0 = "secret", b2xk = "old"
        write(
            dir.path(),
            "argocd-secret.yaml",
            "kind: Secret\nmetadata:\n  name: argocd-secret\ndata:\n  server.secretkey: c2VjcmV0\n  admin.password: b2xk\nstringData:\n  admin.password: new\n",
        );
        let obj = read_object(dir.path(), ARGOCD_SECRET).unwrap();
        assert_eq!(obj.data["server.secretkey"], "secret");
        assert_eq!(obj.data["admin.password"], "new");
        assert_eq!(obj.lines["admin.password"], 8);
        assert_eq!(obj.lines["server.secretkey"], 5);
    }

    #[test]
    fn secret_bad_base64() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "argocd-secret.yaml",
            "kind: Secret\ndata:\n  server.secretkey: not base64!\n",
        );
        let err = err_of(dir.path(), ARGOCD_SECRET);
        assert!(err.location.ends_with("argocd-secret.yaml:3"), "{err}");
        assert!(
            err.reason.contains("data.server.secretkey: not valid base64"),
            "{err}"
        );
    }

    #[test]
    fn wrong_kind_and_name() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "argocd-secret.yaml",
            "apiVersion: v1\nkind: ConfigMap\n",
        );
        let err = err_of(dir.path(), ARGOCD_SECRET);
        assert!(err.location.ends_with("argocd-secret.yaml:2"), "{err}");
        assert!(err.reason.contains("must be a Secret"), "{err}");

        write(
            dir.path(),
            "argocd-cm.yaml",
            "kind: ConfigMap\nmetadata:\n  namespace: argocd\n  name: argocd-rbac-cm\n",
        );
        let err = err_of(dir.path(), ARGOCD_CM);
        assert!(err.location.ends_with("argocd-cm.yaml:4"), "{err}");
        assert!(err.reason.contains("\"argocd-rbac-cm\""), "{err}");

        write(dir.path(), "argocd-rbac-cm.yaml", "data: {}\n");
        assert!(
            err_of(dir.path(), ARGOCD_RBAC_CM)
                .reason
                .contains("missing `kind: ConfigMap`")
        );
    }

    #[test]
    fn non_string_value() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "argocd-cm.yaml",
            "kind: ConfigMap\ndata:\n  url: https://x\n  admin.enabled: true\n",
        );
        let err = err_of(dir.path(), ARGOCD_CM);
        assert!(err.location.ends_with("argocd-cm.yaml:4"), "{err}");
        assert_eq!(
            err.reason,
            "data.admin.enabled: expected a string, got a boolean; quote the value"
        );
    }

    #[test]
    fn string_data_in_configmap_rejected() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "argocd-cm.yaml",
            "kind: ConfigMap\nstringData:\n  a: b\n",
        );
        assert!(
            err_of(dir.path(), ARGOCD_CM)
                .reason
                .contains("stringData is a Secret field")
        );
    }

    #[test]
    fn yaml_syntax_error_has_line() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "argocd-cm.yaml",
            "kind: ConfigMap\ndata:\n  a: b\n  c: [unclosed\n  d: e\n",
        );
        let err = err_of(dir.path(), ARGOCD_CM);
        // libyaml gives up at the first token after the unclosed list.
        assert!(err.location.ends_with("argocd-cm.yaml:5:4"), "{err}");
        assert!(
            err.reason
                .starts_with("invalid YAML: did not find expected ',' or ']'"),
            "{err}"
        );

        write(
            dir.path(),
            "argocd-cm.yaml",
            "kind: ConfigMap\ndata:\n  a: b\n a: c\n",
        );
        let err = err_of(dir.path(), ARGOCD_CM);
        assert!(err.location.ends_with("argocd-cm.yaml:4:2"), "{err}");
    }

    #[test]
    fn volume_form() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "argocd-secret/admin.password", "$2a$10$x");
        write(dir.path(), "argocd-secret/.hidden", "x");
        write(dir.path(), "argocd-secret/sub/file", "x");
        let obj = read_object(dir.path(), ARGOCD_SECRET).unwrap();
        assert_eq!(obj.data.len(), 1);
        assert_eq!(obj.data["admin.password"], "$2a$10$x");
        let expected = dir.path().join("argocd-secret").join("admin.password");
        assert_eq!(obj.locate("admin.password").path, Some(expected));

        std::fs::write(dir.path().join("argocd-secret/bin"), [0xff, 0xfe]).unwrap();
        assert!(
            err_of(dir.path(), ARGOCD_SECRET)
                .location
                .ends_with("argocd-secret/bin")
        );
    }

    #[cfg(unix)]
    #[test]
    fn volume_symlinks_followed_and_dangling_skipped() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let vol = dir.path().join("argocd-cm");
        write(&vol, "..2024_01_01/url", "https://a.example.com");
        symlink("..2024_01_01", vol.join("..data")).unwrap();
        symlink("..data/url", vol.join("url")).unwrap();
        symlink("..data/gone", vol.join("gone")).unwrap();
        let obj = read_object(dir.path(), ARGOCD_CM).unwrap();
        assert_eq!(obj.data.keys().collect::<Vec<_>>(), ["url"]);
    }

    #[test]
    fn both_forms_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "argocd-rbac-cm.yaml", "kind: ConfigMap\n");
        write(dir.path(), "argocd-rbac-cm/policy.csv", "");
        let err = err_of(dir.path(), ARGOCD_RBAC_CM);
        assert!(err.location.ends_with("argocd-rbac-cm.yaml"), "{err}");
        assert!(
            err.reason.contains("defined twice") && err.reason.contains("argocd-rbac-cm"),
            "{err}"
        );
    }

    #[test]
    fn plain_file_without_extension_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "argocd-cm", "kind: ConfigMap\n");
        assert!(
            err_of(dir.path(), ARGOCD_CM)
                .reason
                .contains("expected a directory")
        );
    }

    #[test]
    fn line_keys() {
        assert_eq!(line_key("a.b: c"), Some("a.b"));
        assert_eq!(line_key("a:b: c"), Some("a:b"));
        assert_eq!(line_key("k:"), Some("k"));
        assert_eq!(line_key("\"x: y\": z"), Some("x: y"));
        assert_eq!(line_key("'q':"), Some("q"));
        assert_eq!(line_key("- a: b"), None);
        assert_eq!(line_key("url"), None);
    }
}
