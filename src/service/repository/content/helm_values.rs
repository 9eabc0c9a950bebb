//! Helm values flattened into parameters, as upstream's `GetParameters` does: nested keys
//! joined with `.`, list items as `key[i]`, and every leaf printed with Go's `%v` after a trip
//! through JSON, so numbers are float64 (`1000000` becomes `1e+06`), `null` is `<nil>`, and
//! empty maps and lists give nothing. Later files override earlier ones key by key.

use std::collections::BTreeMap;

use serde_json::Value;

use super::yaml;

/// A values file larger than this is refused rather than parsed.
pub const MAX_VALUES_BYTES: u64 = 4 * 1024 * 1024;
/// More parameters than this (over all value files) is refused: the answer would be useless.
pub const MAX_PARAMETERS: usize = 100_000;

/// Flattens one values document into `out`. The document must be a mapping (or empty), as
/// upstream unmarshals it into a map; anything else is an error naming `what`.
pub(super) fn flatten_into(text: &str, what: &str, out: &mut BTreeMap<String, String>) -> Result<(), String> {
    let values = yaml::first_document(text).map_err(|e| format!("failed to parse values in {what}: {e}"))?;
    match values {
        Value::Null => Ok(()),
        Value::Object(map) => {
            for (key, value) in map {
                leaf(value, key, out)?;
            }
            Ok(())
        }
        other => Err(format!(
            "failed to parse values in {what}: the document is {}, not a mapping",
            kind(&other)
        )),
    }
}

fn leaf(value: Value, name: String, out: &mut BTreeMap<String, String>) -> Result<(), String> {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                leaf(value, format!("{name}.{key}"), out)?;
            }
        }
        Value::Array(items) => {
            for (i, value) in items.into_iter().enumerate() {
                leaf(value, format!("{name}[{i}]"), out)?;
            }
        }
        scalar => {
            if out.len() >= MAX_PARAMETERS && !out.contains_key(&name) {
                return Err(format!("values hold more than {MAX_PARAMETERS} parameters"));
            }
            out.insert(name, go_text(&scalar));
        }
    }
    Ok(())
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Array(_) => "a list",
        Value::String(_) => "a string",
        Value::Number(_) => "a number",
        Value::Bool(_) => "a boolean",
        Value::Null | Value::Object(_) => "a mapping",
    }
}

/// A JSON scalar as Go's `fmt.Sprintf("%v", v)` prints what `json.Unmarshal` made of it.
fn go_text(value: &Value) -> String {
    match value {
        Value::Null => "<nil>".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::String(s) => s.clone(),
        Value::Number(n) => go_float(n.as_f64().unwrap_or(f64::NAN)),
        Value::Array(_) | Value::Object(_) => String::new(),
    }
}

/// Go's `%v` of a float64: the shortest digits that round-trip, in `%e` form when the decimal
/// exponent is below -4 or at least 6 (`1e+06`, `1.5e-05`), else plain (`123456`, `0.001`).
pub(super) fn go_float(f: f64) -> String {
    let scientific = format!("{f:e}");
    let Some((mantissa, exp)) = scientific.split_once('e') else {
        return scientific;
    };
    let Ok(exp) = exp.parse::<i32>() else {
        return scientific;
    };
    if (-4..6).contains(&exp) {
        format!("{f}")
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flat(text: &str) -> Result<BTreeMap<String, String>, String> {
        let mut out = BTreeMap::new();
        flatten_into(text, "values.yaml", &mut out).map(|()| out)
    }

    #[test]
    fn floats_print_as_go_prints_them() {
        let cases = [
            (1.0, "1"),
            (100000.0, "100000"),
            (1000000.0, "1e+06"),
            (12345678.0, "1.2345678e+07"),
            (1.5, "1.5"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.5e-7, "-2.5e-07"),
            (1e21, "1e+21"),
            (1.5e300, "1.5e+300"),
            (0.0, "0"),
        ];
        for (f, want) in cases {
            assert_eq!(go_float(f), want, "{f}");
        }
    }

    #[test]
    fn flattens_nested_maps_and_lists() {
        let out = flat(
            "image:\n  repository: nginx\n  tag: 1.19\nreplicas: 3\nbig: 10000000\nenabled: true\n\
             nothing: null\nempty: {}\nnone: []\nports: [80, {name: https, port: 443}]\n\
             matrix: [[1, 2]]\n\"dotted.key\": x\n",
        )
        .unwrap_or_default();
        let want: BTreeMap<String, String> = [
            ("image.repository", "nginx"),
            ("image.tag", "1.19"),
            ("replicas", "3"),
            ("big", "1e+07"),
            ("enabled", "true"),
            ("nothing", "<nil>"),
            ("ports[0]", "80"),
            ("ports[1].name", "https"),
            ("ports[1].port", "443"),
            ("matrix[0][0]", "1"),
            ("matrix[0][1]", "2"),
            ("dotted.key", "x"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(out, want);
    }

    #[test]
    fn later_files_override_earlier_ones() {
        let mut out = BTreeMap::new();
        assert!(flatten_into("a: 1\nb: {c: 2}\n", "values.yaml", &mut out).is_ok());
        assert!(flatten_into("b: {c: x}\nd: y\n", "prod.yaml", &mut out).is_ok());
        assert_eq!(out.get("a").map(String::as_str), Some("1"));
        assert_eq!(out.get("b.c").map(String::as_str), Some("x"));
        assert_eq!(out.get("d").map(String::as_str), Some("y"));
    }

    #[test]
    fn a_list_or_a_scalar_is_not_values() {
        let err = flat("- a\n- b\n").err().unwrap_or_default();
        assert!(err.contains("values.yaml") && err.contains("a list"), "{err}");
        assert!(flat("just text\n").is_err());
        assert!(flat("a: [\n").is_err());
        assert_eq!(flat("").ok().map(|m| m.len()), Some(0));
    }

    #[test]
    fn too_many_parameters_are_refused() {
        let mut text = String::from("a:\n");
        for i in 0..=MAX_PARAMETERS {
            text.push_str(&format!("- {i}\n"));
        }
        let err = flat(&text).err().unwrap_or_default();
        assert!(err.contains("more than"), "{err}");
    }

    #[test]
    fn deep_values_are_bounded() {
        let mut text = String::new();
        for i in 0..200 {
            text.push_str(&" ".repeat(i));
            text.push_str("k:\n");
        }
        assert!(flat(&text).is_err());
    }
}
