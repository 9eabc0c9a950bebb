//! `tiphys apply`'s input: a YAML (or JSON) stream of Applications, AppProjects and Argo CD's
//! cluster, repository and repo-creds Secrets.

use crate::cli::apply::read_text;
use crate::cli::manifest::{parse_document, split_documents};
use crate::cli::validate::Validate;

/// The input is one file given to `tiphys apply -f`.
///
/// - Every document with content is either an object to apply or a report line that names
///   the file and the document's number.
/// - The documents, joined with `---` lines, split into the same documents.
/// - An object written back as JSON or as YAML reads as the same object.
pub fn apply_yaml(data: &[u8]) {
    let Some(text) = super::text(data) else { return };
    let docs = split_documents(text);
    let mut items = Vec::new();
    let mut errors = Vec::new();
    read_text("fuzz.yaml", text, Validate::Strict, &mut items, &mut errors);
    assert_eq!(items.len() + errors.len(), docs.len(), "a document went missing");
    for error in &errors {
        let index = error
            .strip_prefix("fuzz.yaml:")
            .and_then(|rest| rest.split_once(": "))
            .and_then(|(n, _)| n.parse::<usize>().ok());
        assert!(
            index.is_some_and(|i| (1..=docs.len()).contains(&i)),
            "a report line that names no document: {error}"
        );
    }

    let joined: String = docs.iter().map(|d| format!("---\n{}", d.text)).collect();
    let again: Vec<String> = split_documents(&joined).into_iter().map(|d| d.text).collect();
    let texts: Vec<&str> = docs.iter().map(|d| d.text.as_str()).collect();
    assert_eq!(again, texts, "joined documents split differently:\n{joined}");

    for doc in &docs {
        let Ok(object) = parse_document(&doc.text) else {
            continue;
        };
        let json = serde_json::to_string(&object).unwrap_or_else(|e| panic!("JSON of an object: {e}"));
        assert_eq!(parse_document(&json).as_ref(), Ok(&object), "as JSON: {json}");
        let yaml = serde_yaml_ng::to_string(&object).unwrap_or_else(|e| panic!("YAML of an object: {e}"));
        assert_eq!(parse_document(&yaml).as_ref(), Ok(&object), "as YAML:\n{yaml}");
    }
}
