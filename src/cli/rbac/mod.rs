//! `tiphys admin settings rbac …`: questions about an RBAC policy answered
//! offline, as Argo CD's `argocd admin settings rbac can|validate` does.
//!
//! A policy file is plain `policy.csv` text, or an `argocd-rbac-cm` ConfigMap
//! manifest whose `data` holds `policy.csv`, `policy.<name>.csv` overlays,
//! `policy.default`, `policy.matchMode` and `scopes`. Both are decided by the
//! server's own engine ([`crate::rbac`]), so an answer here is the server's.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{anyhow, bail};
use serde_json::{Map, Value as Json};

use crate::rbac::policy::{BUILTIN_POLICY, Rules};
use crate::rbac::project::PROJECT_SCOPED;
use crate::rbac::resources::{check_strict, resolve_alias};
use crate::rbac::{FixedProjects, MatchMode, Policy, Subject};

mod files;
mod projects;
#[cfg(test)]
mod tests;

use self::files::PolicyFile;
use self::projects::read_projects;

/// The name upstream gives the ConfigMap.
const RBAC_CM: &str = "argocd-rbac-cm";

#[derive(clap::Subcommand, Debug)]
pub enum RbacCommand {
    /// Whether SUBJECT may perform ACTION on RESOURCE [SUBRESOURCE] under a policy: prints Yes (exit 0) or No (exit 1).
    Can(CanArgs),
    /// Check a policy file without the built-in policy: prints "Policy is valid." (exit 0), or why not (exit 1).
    Validate(ValidateArgs),
}

#[derive(clap::Args, Debug)]
pub struct CanArgs {
    /// A user, SSO group or role (`role:NAME`, `proj:PROJECT:ROLE`), checked by that name alone;
    /// `-` for the caller whose token claims --claims gives.
    pub subject: String,
    /// The action, such as get, create, update, delete, sync, action/apps/Deployment/restart.
    pub action: String,
    /// The resource, such as applications (or app), projects (or proj), clusters, repositories (or repo).
    pub resource: String,
    /// The object, such as PROJECT/APP; for applications, applicationsets, logs, exec, clusters
    /// and repositories, empty or `*` means `*/*`.
    pub subresource: Option<String>,
    /// The policy: a CSV file, or an argocd-rbac-cm ConfigMap manifest (YAML).
    #[arg(long, value_name = "FILE")]
    pub policy_file: PathBuf,
    /// The default role, instead of the policy's `policy.default`.
    #[arg(long, value_name = "ROLE", default_value = "", hide_default_value = true)]
    pub default_role: String,
    /// Include Argo CD's built-in roles (role:admin, role:readonly), as the server does.
    #[arg(
        long,
        value_name = "BOOL",
        default_value = "true",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = parse_go_bool,
    )]
    pub use_builtin_policy: bool,
    /// Refuse actions the resource does not have (a typo would otherwise just answer No).
    #[arg(
        long,
        value_name = "BOOL",
        default_value = "true",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = parse_go_bool,
    )]
    pub strict: bool,
    /// Print nothing: the answer is the exit code (0 yes, 1 no).
    #[arg(short, long)]
    pub quiet: bool,
    /// Decide as the server does for a caller with these token claims (a JSON object), groups
    /// (through `scopes`) and project roles included; SUBJECT must be `-`.
    #[arg(long, value_name = "JSON")]
    pub claims: Option<String>,
    /// AppProject manifests (YAML; several documents allowed) whose roles apply to --claims
    /// callers: project tokens and role groups (repeatable).
    #[arg(long = "project-file", value_name = "FILE")]
    pub project_files: Vec<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct ValidateArgs {
    /// The policy: a CSV file, or an argocd-rbac-cm ConfigMap manifest (YAML).
    #[arg(long, value_name = "FILE")]
    pub policy_file: PathBuf,
}

/// Go's `strconv.ParseBool`, which upstream's flags accept (`--strict=false`, `=0`, `=f`).
fn parse_go_bool(raw: &str) -> Result<bool, String> {
    match raw {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        other => Err(format!("{other:?} is not a boolean; use true or false")),
    }
}

pub fn run(command: RbacCommand, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    match command {
        RbacCommand::Can(args) => can(&args, out),
        RbacCommand::Validate(args) => validate(&args, out),
    }
}

// ---------------------------------------------------------------------------
// can

fn can(args: &CanArgs, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let claims = match (&args.claims, args.subject.as_str()) {
        (Some(raw), "-") => Some(parse_claims(raw)?),
        (Some(_), other) => {
            bail!("--claims takes the subject from the claims: pass SUBJECT as `-`, not {other:?}")
        }
        (None, "-") => bail!("SUBJECT `-` stands for the caller of --claims JSON, which is missing"),
        (None, _) => None,
    };
    let file = PolicyFile::read(&args.policy_file)?;
    let policy = file
        .load(args.use_builtin_policy)
        .map_err(|why| anyhow!("the policy does not load: {why}"))?;
    let policy = if args.default_role.is_empty() {
        policy
    } else {
        policy.with_default_role(&args.default_role)
    };
    let projects = read_projects(&args.project_files)?;
    let warn = |text: &str| {
        if !args.quiet {
            eprintln!("warning: {text}");
        }
    };
    for warning in &file.warnings {
        warn(warning);
    }
    for warning in &projects.warnings {
        warn(warning);
    }
    if claims.is_none() && !args.project_files.is_empty() {
        warn(
            "--project-file only matters with --claims: a plain SUBJECT is checked against the global \
             policy alone, as upstream's tool does",
        );
    }

    let resource = resolve_alias(&args.resource);
    if args.strict
        && let Err(why) = check_strict(resource, &args.action)
    {
        eprintln!("{why} (pass --strict=false to ask anyway)");
        return Ok(ExitCode::FAILURE);
    }
    let object = object_for(resource, args.subresource.as_deref().unwrap_or_default());
    let source = FixedProjects(projects.projects);
    let allowed = match &claims {
        Some(claims) => {
            let user = claims_user(claims);
            policy.decide(
                &source,
                Subject::Claims {
                    user: &user,
                    claims: Some(claims),
                },
                resource,
                &args.action,
                &object,
            )
        }
        None => policy.decide(
            &source,
            Subject::Plain(&args.subject),
            resource,
            &args.action,
            &object,
        ),
    };

    if allowed {
        if !args.quiet {
            writeln!(out, "Yes")?;
            if claims.is_none()
                && ignored_group_grant(&policy, &args.subject)
                && !group_allowed_by_server(&policy, &source, &args.subject, resource, &args.action, &object)
            {
                warn(&format!(
                    "{:?} looks like an SSO group with `p` lines of its own but no `g, {}, ...` line: the API \
                     server ignores `p` grants to a group from a token unless the group is the member of some \
                     `g` line, so its members would not get this; bind the group to a role instead",
                    args.subject, args.subject
                ));
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    if !args.quiet {
        writeln!(out, "No")?;
        // Why a No may be surprising: lines that do nothing, patterns that cannot match.
        if let Ok(user_only) = file.load(false) {
            for warning in user_only.warnings() {
                warn(&file.locate_warning(warning));
            }
        }
        if policy.mode() == MatchMode::Regex && args.use_builtin_policy {
            warn(
                "in regex mode the built-in policy's patterns (`*`, `*/*`) are invalid regular expressions, \
                 so any check that reaches role:readonly or role:admin denies (as upstream)",
            );
        }
    }
    Ok(ExitCode::FAILURE)
}

/// The object as upstream's tool forms it: project-scoped resources get `*/*`
/// for an empty or `*` sub-resource (`*` alone would not match `*/*` lines).
fn object_for(resource: &str, subresource: &str) -> String {
    if PROJECT_SCOPED.contains(&resource) && matches!(subresource, "" | "*") {
        "*/*".to_owned()
    } else {
        subresource.to_owned()
    }
}

/// A plain subject that looks like an SSO group (`org:team`, not a role) with
/// `p` lines but no `g` line of its own: it answers Yes here, but the server
/// never checks such a group from a token.
fn ignored_group_grant(policy: &Policy, subject: &str) -> bool {
    if !subject.contains(':') || subject.starts_with("role:") || subject.starts_with("proj:") {
        return false;
    }
    policy.has_rules(subject) && !policy.binds(subject)
}

/// The server's answer for a token with no user id whose only group is
/// `group` (in the first claim `scopes` names; none when `scopes` is empty).
fn group_allowed_by_server(
    policy: &Policy,
    projects: &FixedProjects,
    group: &str,
    resource: &str,
    action: &str,
    object: &str,
) -> bool {
    let Some(scope) = policy.scopes().first() else {
        return false;
    };
    let claims = Map::from_iter([(scope.clone(), Json::Array(vec![Json::String(group.to_owned())]))]);
    let subject = Subject::Claims {
        user: "",
        claims: Some(&claims),
    };
    policy.decide(projects, subject, resource, action, object)
}

/// `--claims`: a JSON object of token claims.
fn parse_claims(raw: &str) -> anyhow::Result<Map<String, Json>> {
    let value: Json = serde_json::from_str(raw).map_err(|e| {
        anyhow!("--claims is not valid JSON ({e}); pass an object such as '{{\"sub\":\"alice\",\"groups\":[\"devs\"]}}'")
    })?;
    match value {
        Json::Object(map) => Ok(map),
        other => bail!(
            "--claims must be a JSON object of token claims, such as '{{\"sub\":\"alice\",\"groups\":[\"devs\"]}}'; got {}",
            json_type(&other)
        ),
    }
}

fn json_type(value: &Json) -> &'static str {
    match value {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

/// The user id the server decides for: `federated_claims.user_id` when it is
/// a non-empty string, else `sub` when it is a string, else "". A local
/// account's own token (issuer `argocd`, sub `NAME:login` or `NAME:apiKey`)
/// stands for the account NAME, as the server reads it.
fn claims_user(claims: &Map<String, Json>) -> String {
    let federated = claims
        .get("federated_claims")
        .and_then(|f| f.get("user_id"))
        .and_then(Json::as_str)
        .filter(|id| !id.is_empty());
    if let Some(id) = federated {
        return id.to_owned();
    }
    let sub = claims.get("sub").and_then(Json::as_str).unwrap_or_default();
    if claims.get("iss").and_then(Json::as_str) == Some("argocd")
        && let Some((name, "login" | "apiKey")) = sub.rsplit_once(':')
    {
        return name.to_owned();
    }
    sub.to_owned()
}

// ---------------------------------------------------------------------------
// validate

fn validate(args: &ValidateArgs, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let file = PolicyFile::read(&args.policy_file)?;
    if file.is_empty() {
        eprintln!("Policy is empty or could not be loaded.");
        return Ok(ExitCode::FAILURE);
    }
    let policy = match file.load(false) {
        Ok(policy) => policy,
        Err(why) => {
            eprintln!("Policy is invalid: {why}");
            return Ok(ExitCode::FAILURE);
        }
    };
    for warning in &file.warnings {
        eprintln!("warning: {warning}");
    }
    for warning in policy.warnings() {
        eprintln!("warning: {}", file.locate_warning(warning));
    }
    let rules = file.user_rules();
    if rules.rules.is_empty() && rules.bindings.is_empty() {
        eprintln!(
            "warning: {}: no `p` or `g` lines: the policy grants nothing",
            file.name
        );
    }
    let builtin = builtin_names();
    let empty: Vec<&str> = rules
        .empty_roles()
        .into_iter()
        .filter(|role| !builtin.contains(*role))
        .collect();
    if !empty.is_empty() {
        eprintln!(
            "warning: user defined roles not found in policies: {}",
            empty.join(", ")
        );
    }
    writeln!(out, "Policy is valid.")?;
    Ok(ExitCode::SUCCESS)
}

/// Subjects the built-in policy defines (`role:admin`, `role:readonly`,
/// `admin`): binding to them is not a typo even though `validate` leaves the
/// built-in policy out.
fn builtin_names() -> BTreeSet<String> {
    let mut rules = Rules::default();
    if rules.add_text("built-in policy", BUILTIN_POLICY).is_err() {
        return BTreeSet::new();
    }
    let mut names: BTreeSet<String> = rules.rules.into_iter().map(|r| r.subject).collect();
    names.extend(rules.bindings.into_iter().map(|(member, _)| member));
    names
}
