//! Small helpers the resource commands share: qualified names, confirmations, durations and
//! reading manifest files given with `-f`.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::Path;

use anyhow::Context as _;
use serde_json::Value;

use super::exit;

/// `NAMESPACE/NAME` or `NAME` (then `namespace`, possibly empty for the server's default).
pub fn split_qualified(name: &str, namespace: Option<&str>) -> (String, String) {
    match name.split_once('/') {
        Some((ns, name)) => (ns.to_owned(), name.to_owned()),
        None => (namespace.unwrap_or_default().to_owned(), name.to_owned()),
    }
}

/// Asks `question` (on stderr) and reads one line of stdin; only `y` or `yes` confirms. With
/// `yes` given (`-y`) nothing is asked.
pub fn confirm(question: &str, yes: bool) -> anyhow::Result<()> {
    if yes {
        return Ok(());
    }
    eprint!("{question} [y/n] ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    let n = std::io::stdin()
        .lock()
        .read_line(&mut line)
        .context("cannot read the answer from stdin")?;
    if !std::io::stdin().is_terminal() {
        eprintln!();
    }
    let answer = line.trim().to_ascii_lowercase();
    if n > 0 && (answer == "y" || answer == "yes") {
        return Ok(());
    }
    Err(anyhow::anyhow!(
        "not confirmed: nothing was changed (pass -y to skip the question)"
    ))
}

/// A Go duration (`30m`, `24h`, `7d`; `0` for none) in whole seconds, rounded up (so `500ms`
/// does not mean "never").
pub fn parse_seconds(raw: &str) -> Result<i64, String> {
    let d = crate::config::parse_go_duration_or_days(raw.trim())?;
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    i64::try_from(secs).map_err(|_| format!("{raw:?} is too long"))
}

/// The one object of a manifest file (YAML or JSON).
pub fn read_object(path: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let docs = super::manifest::split_documents(&text);
    match docs.as_slice() {
        [doc] => super::manifest::parse_document(&doc.text)
            .map_err(|e| exit::invalid(format!("{}: {e}", path.display()))),
        [] => Err(exit::invalid(format!(
            "{}: no object in the file",
            path.display()
        ))),
        _ => Err(exit::invalid(format!(
            "{}: {} objects in the file, expected one (use `tiphys apply -f` for several)",
            path.display(),
            docs.len()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names() {
        assert_eq!(
            split_qualified("ns/app", Some("x")),
            ("ns".to_owned(), "app".to_owned())
        );
        assert_eq!(
            split_qualified("app", Some("x")),
            ("x".to_owned(), "app".to_owned())
        );
        assert_eq!(split_qualified("app", None), (String::new(), "app".to_owned()));
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory as _;
        crate::cli::Cli::command().debug_assert();
    }

    #[test]
    fn durations() {
        assert_eq!(parse_seconds("0"), Ok(0));
        assert_eq!(parse_seconds("1h"), Ok(3600));
        assert!(parse_seconds("soon").is_err());
    }
}
