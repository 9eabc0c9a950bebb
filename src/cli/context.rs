//! `tiphys context [NAME] [--delete]`: list, switch or delete contexts.

use std::io::Write;
use std::path::Path;

use anyhow::bail;

use super::config::LocalConfig;
use super::output;

#[derive(clap::Args, Debug)]
pub struct ContextArgs {
    /// The context to switch to (or delete); without it, contexts are listed.
    pub name: Option<String>,
    /// Delete the context (and its token, and its server entry when no other context uses it).
    #[arg(long, requires = "name")]
    pub delete: bool,
}

pub fn run(config_path: &Path, args: ContextArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let mut cfg = LocalConfig::load(config_path)?;
    let Some(name) = args.name else {
        let rows: Vec<Vec<String>> = cfg
            .contexts
            .iter()
            .map(|c| {
                let mark = if c.name == cfg.current_context { "*" } else { "" };
                vec![mark.to_owned(), c.name.clone(), c.server.clone()]
            })
            .collect();
        output::table(out, &["CURRENT", "NAME", "SERVER"], &rows)?;
        return Ok(());
    };
    if args.delete {
        let had_token = cfg.resolve(&name).is_ok_and(|r| r.token().is_some());
        if !cfg.remove_context(&name) {
            bail!("context '{name}' does not exist");
        }
        cfg.save(config_path)?;
        writeln!(out, "Context '{name}' deleted")?;
        if had_token {
            eprintln!("note: its token was only forgotten, not revoked (`tiphys logout {name}` revokes it)");
        }
        return Ok(());
    }
    cfg.resolve(&name)?;
    if cfg.current_context != name {
        cfg.current_context.clone_from(&name);
        cfg.save(config_path)?;
    }
    writeln!(out, "Switched to context '{name}'")?;
    Ok(())
}
