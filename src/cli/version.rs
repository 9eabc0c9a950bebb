//! `tiphys version [--client]`

use std::io::Write;
use std::path::Path;

use serde::Serialize;

use super::client::Client;
use super::conn::ClientOpts;
use crate::buildinfo;

#[derive(clap::Args, Debug)]
pub struct VersionArgs {
    /// Print only the client version; do not contact a server.
    #[arg(long)]
    pub client: bool,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: Format,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Format {
    Text,
    Json,
    Short,
}

#[derive(Serialize)]
struct Versions {
    client: Side,
    #[serde(skip_serializing_if = "Option::is_none")]
    server: Option<Side>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Side {
    version: String,
    /// The Argo CD API level (the server's `Version` up to its `+tiphys.` build metadata).
    #[serde(rename = "ArgoCDAPI", skip_serializing_if = "String::is_empty")]
    argocd_api: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    platform: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    compiler: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    build_date: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    git_commit: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    git_tree_state: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    git_tag: String,
}

pub async fn run(args: VersionArgs, config_path: Option<&Path>, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = Side {
        version: buildinfo::VERSION.to_owned(),
        argocd_api: buildinfo::ARGOCD_API.to_owned(),
        platform: buildinfo::platform(),
        compiler: buildinfo::COMPILER.to_owned(),
        build_date: buildinfo::BUILD_DATE.to_owned(),
        git_commit: buildinfo::GIT_COMMIT.to_owned(),
        git_tree_state: buildinfo::GIT_TREE_STATE.to_owned(),
        git_tag: buildinfo::GIT_TAG.to_owned(),
    };
    let server = if args.client {
        None
    } else {
        let config_path = super::config::path(config_path)?;
        let client = Client::connect(&config_path, &args.conn, None).await?;
        let reply = client.finish(
            "version request failed",
            client.conn.version_client().version(()).await,
        )?;
        Some(Side {
            argocd_api: api_level(&reply.version).to_owned(),
            version: reply.version,
            platform: reply.platform,
            compiler: reply.compiler,
            build_date: reply.build_date,
            git_commit: reply.git_commit,
            git_tree_state: reply.git_tree_state,
            git_tag: reply.git_tag,
        })
    };
    let versions = Versions { client, server };
    match args.output {
        Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(&versions)?)?,
        Format::Short => {
            writeln!(out, "tiphys: {}", versions.client.version)?;
            if let Some(server) = &versions.server {
                writeln!(out, "tiphys-server: {}", server.version)?;
            }
        }
        Format::Text => {
            print_side(out, "tiphys", &versions.client)?;
            if let Some(server) = &versions.server {
                print_side(out, "tiphys-server", server)?;
            }
        }
    }
    Ok(())
}

/// The Argo CD API level in a server's `Version`: the part before `+tiphys.…`; nothing for a
/// server that is not tiphys.
fn api_level(version: &str) -> &str {
    match version.split_once('+') {
        Some((level, build)) if build.starts_with("tiphys.") => level,
        _ => "",
    }
}

fn print_side(out: &mut dyn Write, name: &str, side: &Side) -> std::io::Result<()> {
    writeln!(out, "{name}: {}", side.version)?;
    for (label, value) in [
        ("ArgoCDAPI", &side.argocd_api),
        ("BuildDate", &side.build_date),
        ("GitCommit", &side.git_commit),
        ("GitTreeState", &side.git_tree_state),
        ("GitTag", &side.git_tag),
        ("Platform", &side.platform),
        ("Compiler", &side.compiler),
    ] {
        if !value.is_empty() {
            writeln!(out, "  {label}: {value}")?;
        }
    }
    Ok(())
}
