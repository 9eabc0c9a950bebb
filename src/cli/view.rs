//! How the resource commands print objects: `-o json|yaml|wide|name`, or by default a table
//! (lists) or a description (one object), as argocd does.

use std::io::Write;

use serde_json::Value;

use super::output;

/// `-o`: the output shape of the resource commands.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// The objects as JSON (a list prints an array).
    Json,
    /// The objects as YAML.
    Yaml,
    /// The table with more columns.
    Wide,
    /// Only the names, one a line.
    Name,
}

/// A list command's table: the default columns, and those `-o wide` adds.
pub struct Table<'a> {
    pub header: &'a [&'a str],
    pub wide: &'a [&'a str],
    /// The cells of one object: the default columns, then (when `wide`) the wide ones.
    pub row: &'a dyn Fn(&Value, bool) -> Vec<String>,
    /// The name `-o name` prints.
    pub name: &'a dyn Fn(&Value) -> String,
}

pub fn structured(out: &mut dyn Write, shape: Shape, value: &Value) -> anyhow::Result<bool> {
    match shape {
        Shape::Json => writeln!(out, "{}", serde_json::to_string_pretty(value)?)?,
        Shape::Yaml => write!(out, "{}", serde_yaml_ng::to_string(value)?)?,
        Shape::Wide | Shape::Name => return Ok(false),
    }
    Ok(true)
}

/// Prints a list of objects.
pub fn list(
    out: &mut dyn Write,
    shape: Option<Shape>,
    items: &[Value],
    table: &Table<'_>,
) -> anyhow::Result<()> {
    if let Some(shape) = shape
        && structured(out, shape, &Value::Array(items.to_vec()))?
    {
        return Ok(());
    }
    if shape == Some(Shape::Name) {
        for item in items {
            writeln!(out, "{}", (table.name)(item))?;
        }
        return Ok(());
    }
    let wide = shape == Some(Shape::Wide);
    let mut header = table.header.to_vec();
    if wide {
        header.extend_from_slice(table.wide);
    }
    let rows: Vec<Vec<String>> = items.iter().map(|item| (table.row)(item, wide)).collect();
    output::table(out, &header, &rows)?;
    Ok(())
}

/// Prints one object: structured, its name, or the description `describe` writes.
pub fn one(
    out: &mut dyn Write,
    shape: Option<Shape>,
    value: &Value,
    name: &dyn Fn(&Value) -> String,
    describe: &dyn Fn(&mut dyn Write, &Value) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    if let Some(shape) = shape
        && structured(out, shape, value)?
    {
        return Ok(());
    }
    if shape == Some(Shape::Name) {
        writeln!(out, "{}", name(value))?;
        return Ok(());
    }
    describe(out, value)?;
    Ok(())
}

/// `Label:` padded to a fixed column, then the value (argocd's description layout).
pub fn field(out: &mut dyn Write, label: &str, value: &str) -> std::io::Result<()> {
    let label = format!("{label}:");
    writeln!(out, "{label:<20}{value}").map(|()| ())
}

/// A JSON value as a table cell: strings as they are, others compact.
pub fn cell(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// A string list as a comma-separated cell (`<none>` when empty).
pub fn joined(values: &[String]) -> String {
    if values.is_empty() {
        "<none>".to_owned()
    } else {
        values.join(",")
    }
}

/// The strings of a JSON array found at `pointer`.
pub fn strings(value: &Value, pointer: &str) -> Vec<String> {
    value
        .pointer(pointer)
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|v| cell(Some(v))).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lists_print_tables_names_and_json() {
        let items = vec![json!({"n": "a", "x": 1}), json!({"n": "bb", "x": 2})];
        let row = |v: &Value, wide: bool| {
            let mut r = vec![cell(v.get("n"))];
            if wide {
                r.push(cell(v.get("x")));
            }
            r
        };
        let name = |v: &Value| cell(v.get("n"));
        let table = Table {
            header: &["NAME"],
            wide: &["X"],
            row: &row,
            name: &name,
        };
        let mut out = Vec::new();
        list(&mut out, Some(Shape::Wide), &items, &table).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "NAME  X\na     1\nbb    2\n");
        let mut out = Vec::new();
        list(&mut out, Some(Shape::Name), &items, &table).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "a\nbb\n");
        let mut out = Vec::new();
        list(&mut out, Some(Shape::Json), &items, &table).unwrap();
        let back: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(back, Value::Array(items));
    }
}
