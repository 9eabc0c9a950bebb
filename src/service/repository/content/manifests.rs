//! GetManifests for a plain directory, as upstream's `findManifests` and `GenerateManifests`:
//! the `.yaml`, `.yml` and `.json` files of the app directory (its subdirectories too with
//! `recurse`), in walk order; `exclude`, then `include`, matched against the path relative to
//! the app directory; YAML split into documents with empty ones skipped; `List` objects
//! expanded into their items; each object as compact JSON with sorted keys and Go's escaping.
//!
//! Errors follow upstream: a `.json` file must hold exactly one object; a YAML file whose
//! documents fail to parse is an error when an earlier document was an object or the file
//! looks like a manifest (it has `apiVersion:`, `kind:` and `metadata:`), and is otherwise
//! skipped as some other YAML file; an object without `kind` fails to parse (upstream's
//! unstructured decoding needs `kind` only). Errors name the file by its repository path where
//! upstream names its base name. Jsonnet, Helm, Kustomize and plugins need a tool, so they are
//! `FAILED_PRECONDITION` here. App-instance tracking labels are the caller's to add.
//!
//! Work is bounded: listed sizes may add up to [`MAX_MANIFEST_BYTES`] (upstream's default
//! `--max-combined-directory-manifests-size`), and at most [`MAX_MANIFEST_DOCUMENTS`] documents
//! are read.

use serde_json::Value;

use super::source::{Source, resolve_type};
use super::{AppType, Files, app_dir, read_text, under, walk_order, yaml};
use crate::error::AppError;
use crate::glob::Glob;

/// The listed sizes of the manifest files of one app add up to at most this many bytes.
pub const MAX_MANIFEST_BYTES: u64 = 10_000_000;
/// At most this many YAML documents (and list items) are read for one app.
pub const MAX_MANIFEST_DOCUMENTS: usize = 10_000;

/// The manifests of the app at `path` for `source` (an `ApplicationSource` as JSON, `null`
/// for none), each a JSON text.
pub fn manifests(files: &(impl Files + ?Sized), path: &str, source: &Value) -> Result<Vec<String>, AppError> {
    let dir = app_dir(files, path)?;
    let source = Source::parse(source)?;
    let app_type = resolve_type(files, &dir, &source)?;
    if app_type != AppType::Directory {
        return Err(needs_repo_server(app_type.as_str()));
    }
    let options = source.directory.unwrap_or_default();
    let include = pattern(&options.include);
    let exclude = pattern(&options.exclude);

    let mut chosen = Vec::new();
    let mut total: u64 = 0;
    for (path, size) in walk_order(files.list().iter()) {
        let Some(rel) = under(&dir, path) else { continue };
        if !options.recurse && rel.contains('/') {
            continue;
        }
        let name = rel.rsplit('/').next().unwrap_or(rel);
        if !is_manifest_name(name) {
            continue;
        }
        if exclude
            .as_ref()
            .is_some_and(|g| g.as_ref().is_some_and(|g| g.matches(rel)))
        {
            continue;
        }
        if include
            .as_ref()
            .is_some_and(|g| !g.as_ref().is_some_and(|g| g.matches(rel)))
        {
            continue;
        }
        if name.ends_with(".jsonnet") {
            return Err(needs_repo_server(&format!("Jsonnet ({path})")));
        }
        total = total.saturating_add(*size);
        if total > MAX_MANIFEST_BYTES {
            return Err(AppError::PayloadTooLarge(format!(
                "exceeded max combined manifest file size of {MAX_MANIFEST_BYTES} bytes at {path}"
            )));
        }
        chosen.push(path.as_str());
    }

    let mut budget = Budget { documents: 0 };
    let mut out = Vec::new();
    for path in chosen {
        let text = read_text(files, path, MAX_MANIFEST_BYTES)?;
        let objects = if path.ends_with(".json") {
            json_file(path, &text)?
        } else {
            yaml_file(path, &text, &mut budget)?
        };
        for object in objects {
            expand(object, &mut out, &mut budget, path)?;
        }
    }
    Ok(out)
}

/// `None` for no pattern; `Some(None)` for one that does not compile (it matches nothing, as
/// upstream's `util/glob.Match` logs and answers no). No separators: `*` crosses `/`.
fn pattern(text: &str) -> Option<Option<Glob>> {
    (!text.is_empty()).then(|| Glob::new(text, &[]).ok())
}

/// Upstream's manifest file pattern, `^.*\.(yaml|yml|json|jsonnet)$` on the base name.
fn is_manifest_name(name: &str) -> bool {
    [".yaml", ".yml", ".json", ".jsonnet"]
        .iter()
        .any(|ext| name.ends_with(ext))
}

fn needs_repo_server(what: &str) -> AppError {
    AppError::FailedPrecondition(format!("rendering {what} needs a repo server"))
}

struct Budget {
    documents: usize,
}

impl Budget {
    fn take(&mut self, path: &str) -> Result<(), AppError> {
        self.documents += 1;
        if self.documents > MAX_MANIFEST_DOCUMENTS {
            return Err(AppError::PayloadTooLarge(format!(
                "more than {MAX_MANIFEST_DOCUMENTS} manifest documents, at {path}"
            )));
        }
        Ok(())
    }
}

fn unmarshal_error(path: &str, why: &str) -> AppError {
    AppError::FailedPrecondition(format!("Failed to unmarshal \"{path}\": {why}"))
}

/// A `.json` file: exactly one object.
fn json_file(path: &str, text: &str) -> Result<Vec<Value>, AppError> {
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let value = match stream.next() {
        Some(Ok(value)) => value,
        Some(Err(e)) => return Err(unmarshal_error(path, &e.to_string())),
        None => return Err(unmarshal_error(path, "EOF")),
    };
    if stream.next().is_some() {
        return Err(AppError::FailedPrecondition(format!(
            "Found multiple objects in \"{path}\". Only single objects are allowed in JSON files."
        )));
    }
    object(value)
        .map(|o| vec![o])
        .map_err(|why| unmarshal_error(path, &why))
}

/// A YAML file: its non-empty documents, with upstream's rule for files that are not
/// manifests at all.
fn yaml_file(path: &str, text: &str, budget: &mut Budget) -> Result<Vec<Value>, AppError> {
    let mut objects = Vec::new();
    let failure = match yaml::split_documents(text) {
        Err(e) => Some(e),
        Ok(docs) => {
            let mut failure = None;
            for doc in docs {
                budget.take(path)?;
                match yaml::document(doc).and_then(|v| match v {
                    Value::Null => Ok(None),
                    other => object(other).map(Some),
                }) {
                    Ok(Some(o)) => objects.push(o),
                    Ok(None) => {}
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
            }
            failure
        }
    };
    match failure {
        None => Ok(objects),
        Some(why) if !objects.is_empty() || looks_like_manifest(text) => Err(unmarshal_error(
            path,
            &format!("failed to unmarshal manifest: {why}"),
        )),
        Some(_) => Ok(Vec::new()),
    }
}

fn looks_like_manifest(text: &str) -> bool {
    ["apiVersion:", "kind:", "metadata:"]
        .iter()
        .all(|k| text.contains(k))
}

/// A decoded document as a Kubernetes object: a mapping with a non-empty string `kind`.
fn object(value: Value) -> Result<Value, String> {
    match value {
        Value::Object(map) => {
            if map
                .get("kind")
                .and_then(Value::as_str)
                .is_some_and(|k| !k.is_empty())
            {
                Ok(Value::Object(map))
            } else {
                Err("Object 'Kind' is missing".to_owned())
            }
        }
        other => Err(format!("the document is not an object: {}", short(&other))),
    }
}

fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 80 {
        format!("{}…", text.chars().take(80).collect::<String>())
    } else {
        text
    }
}

/// Adds `object` to `out`, or its items when it is a list; a list whose `items` is null (and
/// that has no spec or status) adds nothing, as upstream's `isNullList`.
fn expand(object: Value, out: &mut Vec<String>, budget: &mut Budget, path: &str) -> Result<(), AppError> {
    let Value::Object(mut map) = object else {
        return Ok(());
    };
    match map.remove("items") {
        Some(Value::Array(items)) => {
            for item in items {
                budget.take(path)?;
                if !item.is_object() {
                    return Err(AppError::FailedPrecondition(format!(
                        "{path}: items member is not an object"
                    )));
                }
                out.push(go_json(item));
            }
        }
        Some(Value::Null) if !map.contains_key("spec") && !map.contains_key("status") => {}
        Some(items) => {
            map.insert("items".to_owned(), items);
            out.push(go_json(Value::Object(map)));
        }
        None => out.push(go_json(Value::Object(map))),
    }
    Ok(())
}

/// Compact JSON as Go's `json.Marshal` writes an unstructured object: keys sorted, whole
/// floats as integers (they decode as int64 upstream), and `<`, `>`, `&`, U+2028, U+2029
/// escaped. Those characters only occur inside strings, so escaping the text is exact.
fn go_json(mut value: Value) -> String {
    whole_floats(&mut value);
    let text = value.to_string();
    if !text.contains(['<', '>', '&', '\u{2028}', '\u{2029}']) {
        return text;
    }
    let mut escaped = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '<' => escaped.push_str("\\u003c"),
            '>' => escaped.push_str("\\u003e"),
            '&' => escaped.push_str("\\u0026"),
            '\u{2028}' => escaped.push_str("\\u2028"),
            '\u{2029}' => escaped.push_str("\\u2029"),
            other => escaped.push(other),
        }
    }
    escaped
}

fn whole_floats(value: &mut Value) {
    match value {
        Value::Number(n) if n.is_f64() => {
            if let Some(f) = n.as_f64()
                && f.fract() == 0.0
                && f.abs() < 9.0e15
            {
                *value = Value::Number((f as i64).into());
            }
        }
        Value::Array(items) => items.iter_mut().for_each(whole_floats),
        Value::Object(map) => map.values_mut().for_each(whole_floats),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::service::repository::content::MemFiles;

    const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: \"<v>&\"\n";

    fn kinds_and_names(out: &[String]) -> Vec<String> {
        out.iter()
            .map(|m| {
                let v: Value = serde_json::from_str(m).unwrap_or_default();
                format!(
                    "{}/{}",
                    v["kind"].as_str().unwrap_or("?"),
                    v["metadata"]["name"].as_str().unwrap_or("?")
                )
            })
            .collect()
    }

    fn repo() -> MemFiles {
        MemFiles::new([
            ("app/a.yaml", CM.to_owned()),
            (
                "app/b.yml",
                "---\napiVersion: v1\nkind: Service\nmetadata: {name: s1}\n---\n# empty\n---\napiVersion: v1\nkind: Service\nmetadata: {name: s2}\nspec: {replicas: 1.0}\n".to_owned(),
            ),
            ("app/c.json", "{\"apiVersion\": \"v1\", \"kind\": \"Secret\", \"metadata\": {\"name\": \"j\"}}".to_owned()),
            ("app/README.md", "# not a manifest".to_owned()),
            ("app/values.yaml", "replicas: 2\n".to_owned()),
            ("app/sub/d.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: deep}\n".to_owned()),
            ("app/sub/skip/e.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: deeper}\n".to_owned()),
            ("app-other/x.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: other}\n".to_owned()),
        ])
    }

    #[test]
    fn reads_the_directory_in_walk_order_as_compact_json() {
        let out = manifests(&repo(), "app", &Value::Null).unwrap_or_default();
        assert_eq!(
            kinds_and_names(&out),
            ["ConfigMap/a", "Service/s1", "Service/s2", "Secret/j"]
        );
        assert_eq!(
            out[0],
            r#"{"apiVersion":"v1","data":{"k":"\u003cv\u003e\u0026"},"kind":"ConfigMap","metadata":{"name":"a"}}"#
        );
        assert!(out[2].contains(r#""spec":{"replicas":1}"#), "{}", out[2]);
    }

    #[test]
    fn recurse_include_and_exclude() {
        let src = json!({"directory": {"recurse": true}});
        let out = manifests(&repo(), "app", &src).unwrap_or_default();
        assert_eq!(
            kinds_and_names(&out),
            [
                "ConfigMap/a",
                "Service/s1",
                "Service/s2",
                "Secret/j",
                "Pod/deep",
                "Pod/deeper"
            ]
        );
        let src = json!({"directory": {"recurse": true, "exclude": "sub/skip/*"}});
        let out = manifests(&repo(), "app", &src).unwrap_or_default();
        assert_eq!(kinds_and_names(&out).last().map(String::as_str), Some("Pod/deep"));
        let src = json!({"directory": {"recurse": true, "include": "{a.yaml,sub/*}"}});
        let out = manifests(&repo(), "app", &src).unwrap_or_default();
        assert_eq!(kinds_and_names(&out), ["ConfigMap/a", "Pod/deep", "Pod/deeper"]);
        // Exclude wins over include; a broken include matches nothing.
        let src = json!({"directory": {"include": "*.yaml", "exclude": "a.yaml"}});
        assert_eq!(manifests(&repo(), "app", &src).map(|o| o.len()).ok(), Some(0));
        let src = json!({"directory": {"include": "[a.yaml"}});
        assert_eq!(manifests(&repo(), "app", &src).map(|o| o.len()).ok(), Some(0));
        // An unclosed brace closes at the end, as gobwas/glob reads it.
        let src = json!({"directory": {"include": "{a.yaml"}});
        let out = manifests(&repo(), "app", &src).unwrap_or_default();
        assert_eq!(kinds_and_names(&out), ["ConfigMap/a"]);
    }

    #[test]
    fn lists_are_expanded_and_null_lists_dropped() {
        let files = MemFiles::new([
            (
                "l/list.yaml",
                "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Pod, metadata: {name: p1}}\n- {apiVersion: v1, kind: Pod, metadata: {name: p2}}\n",
            ),
            (
                "l/null.yaml",
                "apiVersion: v1\nkind: ConfigMapList\nitems: null\n",
            ),
        ]);
        let out = manifests(&files, "l", &Value::Null).unwrap_or_default();
        assert_eq!(kinds_and_names(&out), ["Pod/p1", "Pod/p2"]);
    }

    #[test]
    fn invalid_files_give_upstreams_errors() {
        let bad_json = MemFiles::new([("d/x.json", "{\"kind\": \"A\"} {\"kind\": \"B\"}")]);
        let err = manifests(&bad_json, "d", &Value::Null);
        assert!(
            matches!(&err, Err(AppError::FailedPrecondition(m)) if m.contains("Found multiple objects in \"d/x.json\"")),
            "{err:?}"
        );

        let no_kind = MemFiles::new([("d/x.json", "{\"apiVersion\": \"v1\"}")]);
        let err = manifests(&no_kind, "d", &Value::Null);
        assert!(
            matches!(&err, Err(AppError::FailedPrecondition(m)) if m.contains("d/x.json") && m.contains("Kind")),
            "{err:?}"
        );

        let broken_second = MemFiles::new([("d/x.yaml", format!("{CM}---\nkind: [\n"))]);
        let err = manifests(&broken_second, "d", &Value::Null);
        assert!(
            matches!(&err, Err(AppError::FailedPrecondition(m)) if m.contains("d/x.yaml")),
            "{err:?}"
        );

        let looks_like = MemFiles::new([("d/x.yaml", "apiVersion: v1\nkind: [\nmetadata: {}\n")]);
        assert!(matches!(
            manifests(&looks_like, "d", &Value::Null),
            Err(AppError::FailedPrecondition(_))
        ));

        let empty_kind = MemFiles::new([("d/x.yaml", "apiVersion: v1\nkind: \"\"\nmetadata: {name: a}\n")]);
        assert!(matches!(
            manifests(&empty_kind, "d", &Value::Null),
            Err(AppError::FailedPrecondition(_))
        ));

        // Without `kind:` in the text the file is not taken for a manifest, and skipped.
        let no_kind_yaml = MemFiles::new([("d/x.yaml", "apiVersion: v1\nmetadata: {name: a}\n")]);
        assert_eq!(
            manifests(&no_kind_yaml, "d", &Value::Null).map(|o| o.len()).ok(),
            Some(0)
        );

        // Other YAML that fails as an object is skipped, as upstream skips it.
        let other = MemFiles::new([
            ("d/values.yaml", "replicas: 2\n"),
            ("d/list.yaml", "- a\n"),
            ("d/bad.yaml", "a: [\n"),
        ]);
        assert_eq!(
            manifests(&other, "d", &Value::Null).map(|o| o.len()).ok(),
            Some(0)
        );
    }

    #[test]
    fn tools_need_a_repo_server() {
        let files = MemFiles::new([
            ("h/Chart.yaml", "name: h\n"),
            ("k/kustomization.yaml", "resources: []\n"),
            ("j/main.jsonnet", "{}"),
        ]);
        for (path, source, what) in [
            ("h", Value::Null, "Helm"),
            ("k", Value::Null, "Kustomize"),
            ("j", Value::Null, "Jsonnet"),
            ("j", json!({"plugin": {}}), "Plugin"),
        ] {
            let err = manifests(&files, path, &source);
            assert!(
                matches!(&err, Err(AppError::FailedPrecondition(m)) if m.contains(what) && m.contains("needs a repo server")),
                "{err:?}"
            );
        }
        // An explicit directory source reads a kustomization directory as plain files.
        let out = manifests(&files, "k", &json!({"directory": {}}));
        assert_eq!(out.map(|o| o.len()).ok(), Some(0));
    }

    #[test]
    fn work_is_bounded() {
        let big = "a".repeat(MAX_MANIFEST_BYTES as usize / 2 + 1);
        let files = MemFiles::new([("d/a.yaml", big.clone()), ("d/b.yaml", big)]);
        let err = manifests(&files, "d", &Value::Null);
        assert!(
            matches!(&err, Err(AppError::PayloadTooLarge(m)) if m.contains("d/b.yaml")),
            "{err:?}"
        );

        let many = "---\n".repeat(MAX_MANIFEST_DOCUMENTS + 1);
        let files = MemFiles::new([("d/a.yaml", many)]);
        assert!(matches!(
            manifests(&files, "d", &Value::Null),
            Err(AppError::PayloadTooLarge(_))
        ));
    }

    #[test]
    fn bad_paths_and_empty_repositories() {
        assert!(matches!(
            manifests(&repo(), "../app", &Value::Null),
            Err(AppError::InvalidArgument(_))
        ));
        assert!(matches!(
            manifests(&repo(), "missing", &Value::Null),
            Err(AppError::NotFound(_))
        ));
        assert_eq!(
            manifests(&MemFiles::default(), ".", &Value::Null)
                .map(|o| o.len())
                .ok(),
            Some(0)
        );
    }
}
