//! Differential oracle driver: reads `sub,res,act,obj` lines on stdin and
//! prints `allow` or `deny` for each, deciding with tiphys's engine exactly as
//! `peer-go rbac-eval` does with Casbin (no built-in policy, plain subjects).
//!
//! cargo run --release --example rbac_eval -- --policy P.csv [--match-mode regex] [--default-role R]

use std::collections::BTreeMap;
use std::io::{BufRead, Write};

use tiphys::rbac::{FixedProjects, LoadOptions, Policy, Subject};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut data = BTreeMap::new();
    let mut default_role = String::new();
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .ok_or_else(|| anyhow::anyhow!("{flag} needs a value"))?;
        match flag.as_str() {
            "--policy" => {
                data.insert("policy.csv".to_owned(), std::fs::read_to_string(&value)?);
            }
            "--match-mode" => {
                data.insert("policy.matchMode".to_owned(), value);
            }
            "--default-role" => default_role = value,
            other => anyhow::bail!("unknown flag {other}"),
        }
    }
    let policy = Policy::from_config(&data, LoadOptions { builtin: false })?.with_default_role(&default_role);
    let projects = FixedProjects::default();
    let stdin = std::io::stdin();
    let mut out = std::io::BufWriter::new(std::io::stdout());
    for line in stdin.lock().lines() {
        let line = line?;
        let answer = match tiphys::rbac::csv::split_fields(line.trim()) {
            Ok(fields) if fields.len() == 4 && !line.trim().is_empty() => {
                let allowed = policy.decide(
                    &projects,
                    Subject::Plain(&fields[0]),
                    &fields[1],
                    &fields[2],
                    &fields[3],
                );
                if allowed { "allow" } else { "deny" }.to_owned()
            }
            Ok(fields) => format!("error: expected 4 fields, got {}", fields.len()),
            Err(e) => format!("error: {e}"),
        };
        writeln!(out, "{answer}")?;
    }
    out.flush()?;
    Ok(())
}
