//! Kubernetes' limits on the objects tiphys stores, as apimachinery applies them to Argo CD's
//! objects upstream: names are DNS-1123 subdomains (namespaces DNS-1123 labels), label and
//! annotation keys are qualified names, label values are at most 63 characters of a fixed set,
//! and annotations hold at most 256 KiB in all. (The limit on a whole object is the registry's,
//! `MAX_OBJECT_BYTES` in `crate::registry`, as every write passes there.)
//!
//! These checks live in the service layer, not in the registry, because a refusal must name the
//! field as the caller wrote it (`metadata.labels["a b"]` for an application, `labels["a b"]`
//! for a cluster) and the use cases know that. Each refusal is `INVALID_ARGUMENT` naming the
//! field, the value (shortened when long) and the rule it breaks.

use serde_json::Value;

use crate::error::AppError;

/// A DNS-1123 subdomain, and so an object's name, has at most this many characters.
pub const MAX_NAME_CHARS: usize = 253;
/// A DNS-1123 label (a namespace), the name part of a qualified name, and a label value have at
/// most this many characters.
pub const MAX_LABEL_CHARS: usize = 63;
/// The keys and values of an object's annotations add up to at most this many bytes (256 KiB).
pub const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// At most this many characters of a caller's value are quoted back.
const SHOWN_CHARS: usize = 80;

/// The name of an application or project (`metadata.name`): a DNS-1123 subdomain.
pub fn check_object_name(what: &str, name: &str) -> Result<(), AppError> {
    subdomain(name).map_err(|why| {
        AppError::InvalidArgument(format!(
            "metadata.name: invalid {what} name {}: {why}",
            shown(name)
        ))
    })
}

/// The name of the Secret a cluster or repository was declared in (`secretName`): a Secret's
/// name is a DNS-1123 subdomain.
pub fn check_secret_name(name: &str) -> Result<(), AppError> {
    subdomain(name).map_err(|why| {
        AppError::InvalidArgument(format!("secretName: invalid Secret name {}: {why}", shown(name)))
    })
}

/// The namespace of an application (`metadata.namespace`): a DNS-1123 label.
pub fn check_namespace(namespace: &str) -> Result<(), AppError> {
    dns_label(namespace).map_err(|why| {
        AppError::InvalidArgument(format!(
            "metadata.namespace: invalid namespace {}: {why}",
            shown(namespace)
        ))
    })
}

/// The labels of an object, at `field` (`metadata.labels`, or `labels` for a cluster).
pub fn check_labels<'a>(
    field: &str,
    labels: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<(), AppError> {
    for (key, value) in labels {
        let at = || format!("{field}[{}]", shown(key));
        qualified_name(key)
            .map_err(|why| AppError::InvalidArgument(format!("{}: invalid label key: {why}", at())))?;
        label_value(value).map_err(|why| {
            AppError::InvalidArgument(format!("{}: invalid label value {}: {why}", at(), shown(value)))
        })?;
    }
    Ok(())
}

/// The annotations of an object, at `field` (`metadata.annotations`, or `annotations` for a
/// cluster): qualified names as keys, and at most [`MAX_ANNOTATIONS_BYTES`] of keys and values.
pub fn check_annotations<'a>(
    field: &str,
    annotations: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<(), AppError> {
    let mut total = 0_usize;
    for (key, value) in annotations {
        qualified_name(key).map_err(|why| {
            AppError::InvalidArgument(format!("{field}[{}]: invalid annotation key: {why}", shown(key)))
        })?;
        total += key.len() + value.len();
    }
    if total > MAX_ANNOTATIONS_BYTES {
        return Err(AppError::InvalidArgument(format!(
            "{field}: the annotations are {total} bytes (keys and values), more than the limit of \
             {MAX_ANNOTATIONS_BYTES} bytes (256 KiB)"
        )));
    }
    Ok(())
}

/// The string entries of the JSON object `value[field]`. Entries of another type are left to the
/// schema, which refuses them with its own message.
pub fn string_map<'a>(value: &'a Value, field: &str) -> impl Iterator<Item = (&'a str, &'a str)> {
    value
        .get(field)
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
}

/// Why `s` is not a DNS-1123 subdomain: lower case letters, digits, '-' and '.', at most 253
/// characters, every dot-separated part starting and ending with a letter or digit.
fn subdomain(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("it is required".to_owned());
    }
    let chars = s.chars().count();
    if chars > MAX_NAME_CHARS {
        return Err(format!(
            "it has {chars} characters; a DNS-1123 subdomain has at most {MAX_NAME_CHARS} characters"
        ));
    }
    if !s.bytes().all(|b| is_lower_alnum(b) || b == b'-' || b == b'.') {
        return Err(
            "it must consist of lower case letters, digits, '-' and '.' (a DNS-1123 subdomain)".to_owned(),
        );
    }
    if !s.split('.').all(alnum_ends) {
        return Err(
            "it and each of its dot-separated parts must start and end with a lower case letter or digit \
             (a DNS-1123 subdomain)"
                .to_owned(),
        );
    }
    Ok(())
}

/// Why `s` is not a DNS-1123 label: lower case letters, digits and '-', at most 63 characters,
/// starting and ending with a letter or digit.
fn dns_label(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("it is required".to_owned());
    }
    let chars = s.chars().count();
    if chars > MAX_LABEL_CHARS {
        return Err(format!(
            "it has {chars} characters; a DNS-1123 label has at most {MAX_LABEL_CHARS} characters"
        ));
    }
    if !s.bytes().all(|b| is_lower_alnum(b) || b == b'-') || !alnum_ends(s) {
        return Err(
            "it must consist of lower case letters, digits and '-', and start and end with a letter or \
             digit (a DNS-1123 label)"
                .to_owned(),
        );
    }
    Ok(())
}

/// Why `key` is not a qualified name (a label or annotation key): a name of at most 63
/// characters, optionally after a DNS-1123 subdomain prefix and '/'.
fn qualified_name(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        None => (None, key),
        Some((_, name)) if name.contains('/') => {
            return Err("a key has at most one '/', between its prefix and its name".to_owned());
        }
        Some((prefix, name)) => (Some(prefix), name),
    };
    if let Some(prefix) = prefix {
        subdomain(prefix).map_err(|why| format!("the prefix before '/' is invalid: {why}"))?;
    }
    if name.is_empty() {
        return Err("the name is empty".to_owned());
    }
    let chars = name.chars().count();
    if chars > MAX_LABEL_CHARS {
        return Err(format!(
            "the name has {chars} characters; at most {MAX_LABEL_CHARS} are allowed"
        ));
    }
    if !label_syntax(name) {
        return Err(format!("the name {}", NAME_SYNTAX));
    }
    Ok(())
}

/// Why `value` is not a label value: empty, or at most 63 characters of the name syntax.
fn label_value(value: &str) -> Result<(), String> {
    let chars = value.chars().count();
    if chars > MAX_LABEL_CHARS {
        return Err(format!(
            "it has {chars} characters; a label value has at most {MAX_LABEL_CHARS}"
        ));
    }
    if !value.is_empty() && !label_syntax(value) {
        return Err(format!("it {NAME_SYNTAX}, or be empty"));
    }
    Ok(())
}

const NAME_SYNTAX: &str =
    "must consist of letters, digits, '-', '_' and '.', and start and end with a letter or digit";

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, for a non-empty `s`.
fn label_syntax(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && s.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric())
}

fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// Whether `part` is non-empty and starts and ends with a lower case letter or digit.
fn alnum_ends(part: &str) -> bool {
    part.bytes().next().is_some_and(is_lower_alnum) && part.bytes().last().is_some_and(is_lower_alnum)
}

/// `s` quoted, shortened to [`SHOWN_CHARS`] characters: a refusal need not echo a megabyte.
fn shown(s: &str) -> String {
    match s.char_indices().nth(SHOWN_CHARS) {
        None => format!("{s:?}"),
        Some((cut, _)) => format!("{:?}…", &s[..cut]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(result: Result<(), AppError>) -> String {
        match result {
            Err(AppError::InvalidArgument(message)) => message,
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn names_are_dns_1123_subdomains() {
        for ok in [
            "a",
            "guest-book.v1",
            "0",
            "a.b.c",
            &"a".repeat(253),
            &format!("{}.b", "a".repeat(63)),
        ] {
            assert!(check_object_name("application", ok).is_ok(), "{ok}");
        }
        for (bad, why) in [
            ("", "required"),
            ("Guest", "lower case"),
            ("-a", "start and end"),
            ("a-", "start and end"),
            ("a..b", "dot-separated parts"),
            (".a", "dot-separated parts"),
            ("a.", "dot-separated parts"),
            ("a.-b", "dot-separated parts"),
            ("a_b", "lower case"),
            ("a/b", "lower case"),
            ("é", "lower case"),
        ] {
            let m = message(check_object_name("application", bad));
            assert!(m.starts_with("metadata.name: invalid application name "), "{m}");
            assert!(m.contains(why), "{bad}: {m}");
        }
        let m = message(check_object_name("project", &"a".repeat(254)));
        assert!(m.contains("254 characters") && m.contains("at most 253"), "{m}");
        assert!(m.len() < 250, "the name is shortened: {m}");
    }

    #[test]
    fn namespaces_are_dns_1123_labels() {
        assert!(check_namespace("argocd").is_ok());
        assert!(check_namespace(&"a".repeat(63)).is_ok());
        for bad in ["", "a.b", "A", "-a", &"a".repeat(64)] {
            let m = message(check_namespace(bad));
            assert!(m.starts_with("metadata.namespace: invalid namespace"), "{m}");
        }
    }

    #[test]
    fn label_keys_and_values() {
        let long_prefix = format!("{}/x", "p".repeat(253));
        let name63 = "n".repeat(63);
        let value63 = "v".repeat(63);
        for (key, value) in [
            ("team", "web"),
            ("app.kubernetes.io/name", "guest_book-1.0"),
            ("A_b.c-D", ""),
            (long_prefix.as_str(), "x"),
            (name63.as_str(), value63.as_str()),
        ] {
            assert!(
                check_labels("metadata.labels", [(key, value)]).is_ok(),
                "{key}={value}"
            );
        }
        let name64 = "n".repeat(64);
        let value64 = "v".repeat(64);
        let too_long_prefix = format!("{}/x", "p".repeat(254));
        for (key, value, expected) in [
            (
                "a b",
                "x",
                r#"metadata.labels["a b"]: invalid label key: the name must consist"#,
            ),
            (
                "",
                "x",
                r#"metadata.labels[""]: invalid label key: the name is empty"#,
            ),
            ("a/", "x", "the name is empty"),
            ("/a", "x", "the prefix before '/' is invalid: it is required"),
            ("a/b/c", "x", "at most one '/'"),
            (
                "Ex.com/a",
                "x",
                "the prefix before '/' is invalid: it must consist of lower case",
            ),
            ("-a", "x", "start and end with a letter or digit"),
            (name64.as_str(), "x", "the name has 64 characters; at most 63"),
            (too_long_prefix.as_str(), "x", "254 characters"),
            (
                "team",
                "a b",
                r#"metadata.labels["team"]: invalid label value "a b": it must consist"#,
            ),
            ("team", "-a", "invalid label value"),
            (
                "team",
                value64.as_str(),
                "it has 64 characters; a label value has at most 63",
            ),
        ] {
            let m = message(check_labels("metadata.labels", [(key, value)]));
            assert!(m.contains(expected), "{key}={value}: {m}");
        }
    }

    #[test]
    fn annotations_add_up_to_256_kib() {
        let big = "v".repeat(MAX_ANNOTATIONS_BYTES - 2);
        assert!(check_annotations("metadata.annotations", [("a", "b"), ("c", &big[1..])]).is_ok());
        assert!(check_annotations("metadata.annotations", [("ab", big.as_str())]).is_ok());
        let m = message(check_annotations("metadata.annotations", [("abc", big.as_str())]));
        assert_eq!(
            m,
            "metadata.annotations: the annotations are 262145 bytes (keys and values), more than the \
             limit of 262144 bytes (256 KiB)"
        );
        let m = message(check_annotations("annotations", [("a b", "x")]));
        assert!(
            m.starts_with(r#"annotations["a b"]: invalid annotation key: "#),
            "{m}"
        );
        // Values are free text.
        assert!(check_annotations("metadata.annotations", [("note", "any text: ✓ / \n")]).is_ok());
    }

    #[test]
    fn string_maps_skip_what_the_schema_refuses() {
        let value = serde_json::json!({"labels": {"a": "b", "n": 1}});
        assert_eq!(string_map(&value, "labels").collect::<Vec<_>>(), [("a", "b")]);
        assert_eq!(string_map(&value, "annotations").count(), 0);
    }
}
