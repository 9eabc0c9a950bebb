//! One policy line split into fields the way Go's `encoding/csv` does with
//! `TrimLeadingSpace` (what Argo CD parses `policy.csv` with), so a policy
//! means here exactly what it means upstream: only leading blanks of a field
//! are dropped, a field with a comma must be quoted, `""` inside quotes is one
//! quote, and a quote anywhere else is an error.

/// Splits `line` (one line, already trimmed) into fields.
pub fn split_fields(line: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut rest = line;
    loop {
        rest = rest.trim_start_matches(char::is_whitespace);
        let column = line.len() - rest.len() + 1;
        if let Some(quoted) = rest.strip_prefix('"') {
            let (field, after) = quoted_field(quoted)
                .ok_or_else(|| format!("column {column}: a quoted field is not closed by '\"'"))?;
            fields.push(field);
            match after.strip_prefix(',') {
                Some(next) => rest = next,
                None if after.is_empty() => return Ok(fields),
                None => {
                    let at = line.len() - after.len() + 1;
                    return Err(format!(
                        "column {at}: text after the closing '\"' of a quoted field (quote the whole field)"
                    ));
                }
            }
        } else {
            let end = rest.find(',').unwrap_or(rest.len());
            let field = &rest[..end];
            if let Some(q) = field.find('"') {
                return Err(format!(
                    "column {}: a '\"' inside an unquoted field (quote the field and double the '\"')",
                    column + q
                ));
            }
            fields.push(field.to_owned());
            if end == rest.len() {
                return Ok(fields);
            }
            rest = &rest[end + 1..];
        }
    }
}

/// The content of a quoted field (after its opening quote) and what follows
/// the closing quote; None when it never closes.
fn quoted_field(text: &str) -> Option<(String, &str)> {
    let mut field = String::new();
    let mut rest = text;
    loop {
        let q = rest.find('"')?;
        field.push_str(&rest[..q]);
        rest = &rest[q + 1..];
        match rest.strip_prefix('"') {
            Some(after) => {
                field.push('"');
                rest = after;
            }
            None => return Some((field, rest)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::split_fields;

    fn ok(line: &str) -> Vec<String> {
        split_fields(line).unwrap()
    }

    #[test]
    fn only_leading_blanks_are_trimmed() {
        assert_eq!(ok("p, a ,  b,c "), ["p", "a ", "b", "c "]);
        assert_eq!(ok("p,\tx"), ["p", "x"]);
    }

    #[test]
    fn quotes_protect_commas_and_double_up() {
        assert_eq!(
            ok(r#"p, "role,admin", "say ""hi""""#),
            ["p", "role,admin", r#"say "hi""#]
        );
        assert_eq!(ok(r#"g, "proj/{a,b}",x"#), ["g", "proj/{a,b}", "x"]);
    }

    #[test]
    fn empty_fields_are_kept() {
        assert_eq!(ok("p,,a,"), ["p", "", "a", ""]);
        assert_eq!(ok(r#"p, "", x"#), ["p", "", "x"]);
    }

    #[test]
    fn stray_quotes_are_errors() {
        assert!(split_fields(r#"p, a"b, c"#).unwrap_err().contains("column 5"));
        assert!(
            split_fields(r#"p, "ab"c, d"#)
                .unwrap_err()
                .contains("after the closing")
        );
        assert!(split_fields(r#"p, "open, d"#).unwrap_err().contains("not closed"));
    }
}
