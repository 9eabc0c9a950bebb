//! `tiphys apply --validate`: the fields of a manifest that the server's schema does not know (a
//! typo such as `spec.syncPolcy`, which the server would drop without a word), each named with
//! its line in the file, as kubectl's strict field validation names them.

use serde_json::Value;

use super::call::str_at;
use super::key_lines::key_lines;
use super::manifest::{self, API_VERSION, RawDoc};
use crate::registry::Kind;
use crate::schema::{Schema, Step, path_string};

/// kubectl's `--validate` modes.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validate {
    /// Refuse a document with unknown fields.
    #[value(alias = "true")]
    Strict,
    /// Apply it, with a warning per unknown field.
    Warn,
    /// Check nothing.
    #[value(alias = "false")]
    Ignore,
}

/// The top-level fields of a Kubernetes v1 Secret, besides `apiVersion` and `kind`.
const SECRET_FIELDS: [&str; 5] = ["metadata", "data", "stringData", "type", "immutable"];

const OBJECT_META: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// Argo CD fields that tiphys's schema leaves out on purpose (see the notes in proto/v1alpha1):
/// not typos, so never refused, but the server does not keep them, which deserves a warning.
const LEFT_OUT: [(&str, &str); 1] = [(
    "github.com.argoproj.argo_cd.v3.pkg.apis.application.v1alpha1.AppProjectSpec",
    "sourceIntegrity",
)];

/// A field of a document that the schema does not know.
#[derive(Debug, PartialEq, Eq)]
pub struct Finding {
    /// The line of its key in the file.
    pub line: usize,
    pub path: String,
    /// One of [`LEFT_OUT`]: known to Argo CD, dropped by tiphys.
    pub left_out: bool,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Finding { line, path, .. } = self;
        if self.left_out {
            write!(
                f,
                "line {line}: field \"{path}\" is not supported by tiphys and is dropped"
            )
        } else {
            write!(f, "line {line}: unknown field \"{path}\"")
        }
    }
}

impl Validate {
    /// Checks one parsed document (`source` names it in warnings): with `strict`, unknown
    /// fields make an error that lists them all; with `warn`, each is a warning. Fields tiphys
    /// drops are warnings in both.
    pub fn check(self, object: &Value, doc: &RawDoc, source: &str) -> Result<(), String> {
        if self == Validate::Ignore {
            return Ok(());
        }
        let (left_out, unknown): (Vec<Finding>, Vec<Finding>) =
            findings(object, doc).into_iter().partition(|f| f.left_out);
        for finding in &left_out {
            eprintln!("warning: {source}: {finding}");
        }
        if self == Validate::Strict && !unknown.is_empty() {
            let all: Vec<String> = unknown.iter().map(Finding::to_string).collect();
            return Err(all.join(", "));
        }
        for finding in &unknown {
            eprintln!("warning: {source}: {finding}");
        }
        Ok(())
    }
}

/// The fields of `object` (read from `doc`) that the schema does not know, in the order of the
/// file. Only what `apply` sends is checked (not `status` or `operation`: see
/// [`manifest::client_part`]); documents of other kinds are refused by `apply` anyway.
pub fn findings(object: &Value, doc: &RawDoc) -> Vec<Finding> {
    let sent = manifest::client_part(object);
    let paths = match (str_at(object, "/apiVersion"), str_at(object, "/kind")) {
        (API_VERSION, "Application") => unknown_in(Kind::Application.message(), &sent, &[]),
        (API_VERSION, "AppProject") => unknown_in(Kind::AppProject.message(), &sent, &[]),
        (API_VERSION, "ApplicationSet") => unknown_in(Kind::ApplicationSet.message(), &sent, &[]),
        ("v1", "Secret") => secret_unknown(&sent),
        _ => Vec::new(),
    };
    if paths.is_empty() {
        return Vec::new();
    }
    let lines = key_lines(&doc.text);
    let mut found: Vec<Finding> = paths
        .into_iter()
        .map(|(path, left_out)| {
            // A key met only through an alias, say, is not in `lines`: its nearest ancestor is.
            let line = (0..=path.len())
                .rev()
                .find_map(|n| lines.get(&path[..n]))
                .map_or(doc.line, |line| doc.line + line - 1);
            Finding {
                line,
                path: path_string(&path),
                left_out,
            }
        })
        .collect();
    found.sort_by(|a, b| (a.line, &a.path).cmp(&(b.line, &b.path)));
    found
}

/// The unknown fields of `json` as a message of type `message`, with their paths under
/// `prefix`, each marked whether it is [`LEFT_OUT`].
fn unknown_in(message: &str, json: &Value, prefix: &[Step]) -> Vec<(Vec<Step>, bool)> {
    let schema = Schema::get();
    // The message names are tiphys's own, compiled in with the schema.
    let Ok(desc) = schema.message(message) else {
        return Vec::new();
    };
    schema
        .unknown_fields(&desc, json)
        .into_iter()
        .map(|u| {
            let left_out = matches!(u.path.last(), Some(Step::Key(key))
                if LEFT_OUT.contains(&(u.message.full_name(), key.as_str())));
            ([prefix, &u.path].concat(), left_out)
        })
        .collect()
}

/// A Secret against Kubernetes' Secret; its `data` and `stringData` keys are read (and warned
/// about) by [`super::secrets`].
fn secret_unknown(secret: &Value) -> Vec<(Vec<Step>, bool)> {
    let mut out = Vec::new();
    for (key, value) in secret.as_object().into_iter().flatten() {
        let at = vec![Step::Key(key.clone())];
        if key == "metadata" {
            out.extend(unknown_in(OBJECT_META, value, &at));
        } else if !SECRET_FIELDS.contains(&key.as_str()) {
            out.push((at, false));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::manifest::{parse_document, split_documents};

    /// The findings of each document of `text`, as report lines.
    fn report(text: &str) -> Vec<Vec<String>> {
        split_documents(text)
            .iter()
            .map(|doc| {
                let object = parse_document(&doc.text).unwrap();
                findings(&object, doc).iter().map(Finding::to_string).collect()
            })
            .collect()
    }

    #[test]
    fn every_unknown_field_is_named_with_its_line_in_the_file() {
        let text = "\
# applications
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: ok}
spec:
  project: default
---

# the second one
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: guestbook
  labels: {anyLabel: x}
  annotations:
    any/annotation: y
  resourceVersion: '7'
  nmae: typo
spec:
  syncPolcy: {automated: {}}
  sources:
  - repoURL: https://r
  - repoURL: https://r
    helm:
      valueFile: [values.yaml]
      valuesObject: {any: {thing: [1]}}
  destination: {server: https://k, namespce: web}
status: {anything: goes}
operation: {sync: {anything: goes}}
";
        assert_eq!(
            report(text),
            [
                vec![],
                vec![
                    "line 19: unknown field \"metadata.nmae\"".to_owned(),
                    "line 21: unknown field \"spec.syncPolcy\"".to_owned(),
                    "line 26: unknown field \"spec.sources[1].helm.valueFile\"".to_owned(),
                    "line 28: unknown field \"spec.destination.namespce\"".to_owned(),
                ]
            ]
        );
    }

    #[test]
    fn json_projects_and_secrets_are_checked_too() {
        let project = "{\"apiVersion\": \"argoproj.io/v1alpha1\", \"kind\": \"AppProject\",\n\
                       \"metadata\": {\"name\": \"web\"},\n\
                       \"spec\": {\"sourceRepo\": [\"*\"], \"sourceIntegrity\": {}}}\n";
        assert_eq!(
            report(project),
            [vec![
                "line 3: field \"spec.sourceIntegrity\" is not supported by tiphys and is dropped".to_owned(),
                "line 3: unknown field \"spec.sourceRepo\"".to_owned(),
            ]]
        );
        let secret = "\
apiVersion: v1
kind: Secret
metadata:
  name: repo
  labels: {argocd.argoproj.io/secret-type: repository}
  managedFields: [{manager: kubectl}]
  namespac: argocd
type: Opaque
strngData: {url: https://r}
data: {anyKey: eA==}
";
        assert_eq!(
            report(secret),
            [vec![
                "line 7: unknown field \"metadata.namespac\"".to_owned(),
                "line 9: unknown field \"strngData\"".to_owned(),
            ]]
        );
        // Kinds `apply` refuses anyway are not looked into.
        assert_eq!(
            report("apiVersion: v1\nkind: ConfigMap\nbogus: 1\n"),
            [Vec::<String>::new()]
        );
    }

    #[test]
    fn a_key_met_through_an_alias_is_placed_at_the_alias() {
        let text = "\
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: &meta {name: a, nmae: b}
spec:
  destination: *meta
";
        assert_eq!(
            report(text),
            [vec![
                "line 3: unknown field \"metadata.nmae\"".to_owned(),
                "line 5: unknown field \"spec.destination.nmae\"".to_owned(),
            ]]
        );
    }

    #[test]
    fn modes_refuse_warn_or_let_through() {
        let text = "apiVersion: argoproj.io/v1alpha1\nkind: Application\nspec: {syncPolcy: {}, projct: x}\n";
        let doc = &split_documents(text)[0];
        let object = parse_document(&doc.text).unwrap();
        assert_eq!(
            Validate::Strict.check(&object, doc, "f:1"),
            Err("line 3: unknown field \"spec.projct\", line 3: unknown field \"spec.syncPolcy\"".to_owned())
        );
        assert_eq!(Validate::Warn.check(&object, doc, "f:1"), Ok(()));
        assert_eq!(Validate::Ignore.check(&object, doc, "f:1"), Ok(()));
    }
}
