//! `tiphys proj role …`: project roles, their policies and tokens.

use std::io::Write;
use std::path::Path;

use base64::Engine as _;
use serde_json::{Map, Value, json};

use super::call::{self, str_at};
use super::client::Client;
use super::exit;
use super::output::rfc3339;
use super::proj::{RoleCommand, edit_spec};

const SVC: &str = "/project.ProjectService";

pub async fn run(config: &Path, command: RoleCommand, out: &mut dyn Write) -> anyhow::Result<()> {
    match command {
        RoleCommand::Create(args) => {
            let client = Client::connect(config, &args.conn, None).await?;
            let role = args.role.clone();
            let mut new_role = json!({"name": args.role});
            if let Some(description) = &args.description {
                new_role["description"] = Value::from(description.as_str());
            }
            let created = edit_spec(&client, "proj role create failed", &args.project, |spec| {
                let mut roles = roles(spec);
                if roles.iter().any(|r| str_at(r, "/name") == role) {
                    return Ok(false);
                }
                roles.push(new_role);
                spec.insert("roles".to_owned(), Value::Array(roles));
                Ok(true)
            })
            .await?;
            let action = if created { "created" } else { "already exists" };
            writeln!(out, "role '{}' {action} in project '{}'", args.role, args.project)?;
        }
        RoleCommand::AddPolicy(args) => {
            let client = Client::connect(config, &args.conn, None).await?;
            let policy = format!(
                "p, proj:{proj}:{role}, {resource}, {action}, {proj}/{object}, {permission}",
                proj = args.project,
                role = args.role,
                resource = args.resource,
                action = args.action,
                object = args.object,
                permission = args.permission
            );
            let line = policy.clone();
            let role = args.role.clone();
            let project = args.project.clone();
            edit_spec(
                &client,
                "proj role add-policy failed",
                &args.project,
                move |spec| {
                    let mut roles = roles(spec);
                    let found = roles
                        .iter_mut()
                        .find(|r| str_at(r, "/name") == role)
                        .ok_or_else(|| {
                            exit::invalid(format!("role '{role}' does not exist in project '{project}'"))
                        })?;
                    let policies = found
                        .as_object_mut()
                        .map(|r| r.entry("policies").or_insert_with(|| json!([])));
                    let added = match policies {
                        Some(Value::Array(list)) if !list.contains(&Value::from(line.as_str())) => {
                            list.push(Value::from(line));
                            true
                        }
                        _ => false,
                    };
                    spec.insert("roles".to_owned(), Value::Array(roles));
                    Ok(added)
                },
            )
            .await?;
            writeln!(out, "policy added to role '{}': {policy}", args.role)?;
        }
        RoleCommand::CreateToken(args) => {
            let client = Client::connect(config, &args.conn, None).await?;
            let request = json!({
                "project": args.project,
                "role": args.role,
                "expiresIn": args.expires_in,
                "id": args.id.clone().unwrap_or_default(),
                "description": args.description.clone().unwrap_or_default(),
            });
            let path = format!("{SVC}/CreateToken");
            let reply = call::unary(&client, "proj role create-token failed", &path, &request).await?;
            let token = str_at(&reply, "/token");
            if args.token_only {
                writeln!(out, "{token}")?;
                return Ok(());
            }
            let claims = claims(token);
            let time = |key: &str| claims.get(key).and_then(Value::as_i64).filter(|t| *t > 0);
            writeln!(
                out,
                "Create token succeeded for proj:{}:{}.",
                args.project, args.role
            )?;
            writeln!(
                out,
                "  ID: {}",
                claims.get("jti").and_then(Value::as_str).unwrap_or_default()
            )?;
            writeln!(
                out,
                "  Issued At: {}",
                time("iat").map(rfc3339).unwrap_or_default()
            )?;
            let expires = time("exp").map_or_else(|| "Never".to_owned(), rfc3339);
            writeln!(out, "  Expires At: {expires}")?;
            writeln!(out, "  Token: {token}")?;
        }
        RoleCommand::DeleteToken(args) => {
            let client = Client::connect(config, &args.conn, None).await?;
            // The API answers success for a token that does not exist (as upstream's does):
            // look first, so that a mistyped time is not reported as deleted.
            let path = format!("{SVC}/Get");
            let project = call::unary(
                &client,
                "proj role delete-token failed",
                &path,
                &json!({"name": args.project}),
            )
            .await?;
            if !has_token(&project, &args.role, args.iat) {
                return Err(anyhow::Error::new(exit::Failure {
                    kind: exit::Kind::NotFound,
                    message: format!(
                        "proj role delete-token failed: role '{}' of project '{}' has no token issued at {}",
                        args.role, args.project, args.iat
                    ),
                }));
            }
            let request = json!({"project": args.project, "role": args.role, "iat": args.iat});
            let path = format!("{SVC}/DeleteToken");
            call::unary(&client, "proj role delete-token failed", &path, &request).await?;
            writeln!(
                out,
                "token issued at {} of role '{}' deleted",
                args.iat, args.role
            )?;
        }
    }
    Ok(())
}

/// Whether `project` (as the API gives it) has a token of `role` issued at `iat`, in the
/// role's list or in the status's.
fn has_token(project: &Value, role: &str, iat: i64) -> bool {
    let issued = |tokens: Option<&Value>| {
        tokens
            .and_then(Value::as_array)
            .is_some_and(|list| list.iter().any(|t| json_i64(&t["iat"]) == Some(iat)))
    };
    let in_spec = project
        .pointer("/spec/roles")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|r| r["name"] == role)
        .any(|r| issued(r.get("jwtTokens")));
    let escaped = role.replace('~', "~0").replace('/', "~1");
    in_spec || issued(project.pointer(&format!("/status/jwtTokensByRole/{escaped}/items")))
}

/// A number the JSON may give as a number or a string (64-bit integers).
fn json_i64(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

fn roles(spec: &Map<String, Value>) -> Vec<Value> {
    spec.get("roles")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// A JWT's claims, read without verifying it (an empty map when it is not one).
fn claims(token: &str) -> Map<String, Value> {
    token
        .split('.')
        .nth(1)
        .and_then(|p| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(p.trim_end_matches('='))
                .ok()
        })
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}
