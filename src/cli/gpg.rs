//! `tiphys gpg …`: the OpenPGP public keys commits may be signed with, through
//! `gpgkey.GPGKeyService`, with upstream's `argocd gpg` verbs.

use std::io::Write;
use std::path::Path;

use serde_json::{Value, json};

use super::call::{self, str_at};
use super::cert::{Input, read_input};
use super::client::Client;
use super::conn::ClientOpts;
use super::repo::ListArgs;
use super::view::{self, Shape, Table, field};

const KEYS: &str = "/gpgkey.GPGKeyService";

#[derive(clap::Subcommand, Debug)]
pub enum GpgCommand {
    /// Add the public keys of an armored key file (`--from`).
    Add(Input),
    /// List the keys.
    List(ListArgs),
    /// Print one key.
    Get(GetArgs),
    /// Remove a key.
    #[command(visible_alias = "remove")]
    Rm(KeyArgs),
}

#[derive(clap::Args, Debug)]
pub struct GetArgs {
    /// The key ID (or fingerprint).
    pub key_id: String,
    /// Output: json, yaml, wide or name [default: a description].
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Shape>,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct KeyArgs {
    /// The key ID (or fingerprint).
    pub key_id: String,
    #[command(flatten)]
    pub conn: ClientOpts,
}

pub async fn run(config: &Path, command: GpgCommand, out: &mut dyn Write) -> anyhow::Result<()> {
    match command {
        GpgCommand::Add(args) => {
            let armored = read_input(args.from.as_deref())?;
            let client = Client::connect(config, &args.conn, None).await?;
            let request = json!({"publickey": {"keyData": armored}, "upsert": args.upsert});
            let reply = call::unary(&client, "gpg add failed", &format!("{KEYS}/Create"), &request).await?;
            let created = reply.pointer("/created").cloned().unwrap_or_default();
            for key in call::items(&created) {
                writeln!(out, "Created GnuPG key with key ID {}", str_at(&key, "/keyID"))?;
            }
            for skipped in reply["skipped"].as_array().into_iter().flatten() {
                writeln!(
                    out,
                    "Key {} already exists: skipped",
                    skipped.as_str().unwrap_or_default()
                )?;
            }
        }
        GpgCommand::List(args) => {
            let client = Client::connect(config, &args.conn, None).await?;
            let reply = call::unary(&client, "gpg list failed", &format!("{KEYS}/List"), &json!({})).await?;
            let row = |k: &Value, _wide: bool| {
                ["/keyID", "/subType", "/owner"]
                    .iter()
                    .map(|p| str_at(k, p).to_owned())
                    .collect()
            };
            let table = Table {
                header: &["KEYID", "TYPE", "IDENTITY"],
                wide: &[],
                row: &row,
                name: &|k: &Value| str_at(k, "/keyID").to_owned(),
            };
            view::list(out, args.output, &call::items(&reply), &table)?;
        }
        GpgCommand::Get(args) => {
            let client = Client::connect(config, &args.conn, None).await?;
            let request = json!({"keyID": args.key_id});
            let key = call::unary(&client, "gpg get failed", &format!("{KEYS}/Get"), &request).await?;
            let name = |k: &Value| str_at(k, "/keyID").to_owned();
            view::one(out, args.output, &key, &name, &describe)?;
        }
        GpgCommand::Rm(args) => {
            let client = Client::connect(config, &args.conn, None).await?;
            let request = json!({"keyID": args.key_id});
            call::unary(&client, "gpg rm failed", &format!("{KEYS}/Delete"), &request).await?;
            writeln!(out, "Deleted key with key ID {}", args.key_id)?;
        }
    }
    Ok(())
}

fn describe(out: &mut dyn Write, key: &Value) -> std::io::Result<()> {
    field(out, "Type", str_at(key, "/subType"))?;
    field(out, "KeyID", str_at(key, "/keyID"))?;
    field(out, "Fingerprint", str_at(key, "/fingerprint"))?;
    field(out, "Identity", str_at(key, "/owner"))?;
    field(out, "Trust", str_at(key, "/trust"))?;
    writeln!(out, "Key Data:\n{}", str_at(key, "/keyData"))
}
