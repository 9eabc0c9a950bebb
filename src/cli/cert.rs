//! `tiphys cert …`: repository TLS certificates and SSH known-host keys through
//! `certificate.CertificateService`, with upstream's `argocd cert` verbs.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use super::call::{self, str_at};
use super::client::Client;
use super::conn::ClientOpts;
use super::exit;
use super::view::{self, Table};

const CERTS: &str = "/certificate.CertificateService";

#[derive(clap::Subcommand, Debug)]
pub enum CertCommand {
    /// Add the TLS certificates (a PEM bundle) trusted for repositories on SERVER_NAME.
    AddTls(AddTlsArgs),
    /// Add SSH known-host entries (known_hosts lines, as `ssh-keyscan` prints them).
    AddSsh(AddSshArgs),
    /// List certificates and known-host keys.
    List(ListArgs),
    /// Remove the certificates and known-host keys of the hosts matching HOST_PATTERN.
    #[command(visible_alias = "remove")]
    Rm(RmArgs),
}

/// Where an add reads its input, and whether it replaces what differs (`cert add-*`, `gpg add`).
#[derive(clap::Args, Debug)]
pub struct Input {
    /// The file to read (standard input when missing).
    #[arg(long)]
    pub from: Option<PathBuf>,
    /// Replace entries already kept when they differ.
    #[arg(long)]
    pub upsert: bool,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct AddTlsArgs {
    /// The repository server's host name.
    pub server_name: String,
    /// (`--from`: a PEM bundle.)
    #[command(flatten)]
    pub input: Input,
}

#[derive(clap::Args, Debug)]
pub struct AddSshArgs {
    /// Read the entries without asking (the only mode: accepted for upstream's scripts).
    #[arg(long)]
    pub batch: bool,
    /// (`--from`: known_hosts lines.)
    #[command(flatten)]
    pub input: Input,
}

#[derive(clap::Args, Debug)]
// (Its own group name: the flattened `repo::ListArgs` has the default one.)
#[group(id = "CertListArgs")]
pub struct ListArgs {
    /// Only certificates of this type: https or ssh.
    #[arg(long, value_parser = ["https", "ssh"])]
    pub cert_type: Option<String>,
    /// Only hosts matching this glob.
    #[arg(long)]
    pub hostname_pattern: Option<String>,
    #[command(flatten)]
    pub list: super::repo::ListArgs,
}

#[derive(clap::Args, Debug)]
pub struct RmArgs {
    /// A glob of the host names to remove.
    pub host_pattern: String,
    /// Only certificates of this type: https or ssh.
    #[arg(long, value_parser = ["https", "ssh"])]
    pub cert_type: Option<String>,
    /// Only SSH keys of this type (e.g. ssh-ed25519).
    #[arg(long)]
    pub cert_sub_type: Option<String>,
    #[command(flatten)]
    pub conn: ClientOpts,
}

/// The text of `--from FILE`, or of standard input.
pub fn read_input(from: Option<&Path>) -> anyhow::Result<String> {
    match from {
        Some(path) => {
            std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
        }
        None => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("cannot read standard input")?;
            Ok(text)
        }
    }
}

/// The certificate items of known_hosts text: one per host of each line. Only the shape is
/// checked here; the server checks the keys.
fn known_host_items(text: &str) -> anyhow::Result<Vec<Value>> {
    let mut items = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut parts = line.split_whitespace();
        let (Some(hosts), Some(kind), Some(data)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(exit::invalid(format!(
                "line {}: expected \"host key-type base64-key\"",
                n + 1
            )));
        };
        for host in hosts.split(',') {
            items.push(json!({
                "serverName": host,
                "certType": "ssh",
                "certSubType": kind,
                "certData": STANDARD.encode(data),
            }));
        }
    }
    if items.is_empty() {
        return Err(exit::invalid("no known_hosts entries given"));
    }
    Ok(items)
}

async fn create(config: &Path, input: &Input, items: Vec<Value>) -> anyhow::Result<Value> {
    let client = Client::connect(config, &input.conn, None).await?;
    let request = json!({"certificates": {"items": items}, "upsert": input.upsert});
    call::unary(
        &client,
        "cert add failed",
        &format!("{CERTS}/CreateCertificate"),
        &request,
    )
    .await
}

pub async fn run(config: &Path, command: CertCommand, out: &mut dyn Write) -> anyhow::Result<()> {
    match command {
        CertCommand::AddTls(args) => {
            let pem = read_input(args.input.from.as_deref())?;
            let item = json!({"serverName": args.server_name, "certType": "https", "certData": STANDARD.encode(pem)});
            let created = create(config, &args.input, vec![item]).await?;
            writeln!(
                out,
                "Created entry with {} PEM certificates for repository server {}",
                call::items(&created).len(),
                args.server_name
            )?;
        }
        CertCommand::AddSsh(args) => {
            let items = known_host_items(&read_input(args.input.from.as_deref())?)?;
            let created = create(config, &args.input, items).await?;
            writeln!(
                out,
                "Successfully created {} SSH known host entries",
                call::items(&created).len()
            )?;
        }
        CertCommand::List(args) => {
            let client = Client::connect(config, &args.list.conn, None).await?;
            let request = json!({
                "certType": args.cert_type.unwrap_or_default(),
                "hostNamePattern": args.hostname_pattern.unwrap_or_default(),
            });
            let path = format!("{CERTS}/ListCertificates");
            let reply = call::unary(&client, "cert list failed", &path, &request).await?;
            let row = |c: &Value, _wide: bool| {
                ["/serverName", "/certType", "/certSubType", "/certInfo"]
                    .iter()
                    .map(|p| str_at(c, p).to_owned())
                    .collect()
            };
            let table = Table {
                header: &["HOSTNAME", "TYPE", "SUBTYPE", "INFO"],
                wide: &[],
                row: &row,
                name: &|c: &Value| str_at(c, "/serverName").to_owned(),
            };
            view::list(out, args.list.output, &call::items(&reply), &table)?;
        }
        CertCommand::Rm(args) => {
            let client = Client::connect(config, &args.conn, None).await?;
            let request = json!({
                "hostNamePattern": args.host_pattern,
                "certType": args.cert_type.unwrap_or_default(),
                "certSubType": args.cert_sub_type.unwrap_or_default(),
            });
            let path = format!("{CERTS}/DeleteCertificate");
            let removed = call::unary(&client, "cert rm failed", &path, &request).await?;
            writeln!(
                out,
                "Removed {} certificates matching '{}'",
                call::items(&removed).len(),
                args.host_pattern
            )?;
        }
    }
    Ok(())
}
