//! Output shapes shared by the client commands: `-o json|yaml|text`,
//! aligned tables and timestamps.

use std::io::Write;

use serde::Serialize;

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    #[default]
    Text,
    Json,
    Yaml,
}

/// Writes `value` as JSON or YAML; `Text` is the caller's to render.
pub fn structured<T: Serialize>(out: &mut dyn Write, format: Format, value: &T) -> anyhow::Result<()> {
    match format {
        Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(value)?)?,
        Format::Yaml => write!(out, "{}", serde_yaml_ng::to_string(value)?)?,
        Format::Text => anyhow::bail!("text output is rendered by the command"),
    }
    Ok(())
}

/// Columns padded to the widest cell plus two spaces (as Go's tabwriter with
/// padding 2 does); the last column is not padded.
pub fn table(out: &mut dyn Write, header: &[&str], rows: &[Vec<String>]) -> std::io::Result<()> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 < row.len() {
                let width = widths.get(i).copied().unwrap_or(0);
                line.push_str(&format!("{cell:<width$}  "));
            } else {
                line.push_str(cell);
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// Unix seconds as RFC 3339 in UTC.
pub fn rfc3339(secs: i64) -> String {
    crate::schema::time::format(secs, 0, false).unwrap_or_else(|| secs.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns() {
        let mut out = Vec::new();
        let rows = vec![
            vec!["*".to_owned(), "a".to_owned(), "x:1".to_owned()],
            vec![String::new(), "longer".to_owned(), "y:2".to_owned()],
        ];
        table(&mut out, &["CURRENT", "NAME", "SERVER"], &rows).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "CURRENT  NAME    SERVER\n*        a       x:1\n         longer  y:2\n"
        );
    }

    #[test]
    fn timestamps() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
    }
}
