//! The audit trail: one line (tracing target `audit`, JSON with `--log-format json`) for every
//! call that changes something (a method with a REST mapping other than GET: creates, updates,
//! deletes, syncs, logins, logouts, token and password changes), and for every call refused
//! for who the caller is (`Unauthenticated`, `Throttled`: failed logins and lockouts among
//! them). Every RPC passes through [`audited`], on every transport, so no use case can forget
//! it. A `PermissionDenied` is logged once, where it is made: by `Rbac::deny`, with what RBAC
//! checked, or by `Rbac::refuse`, with the kind of refusal (a sync window, a project's rule).
//! Nothing else can make one (`crate::error::Denied`), so skipping them here loses none.
//!
//! Each call made with an SSO user's personal access token is recorded too, reads included.
//!
//! Fields (README, "Audit trail"): `event` (`call`), `method` (the gRPC method), `subject`,
//! `groups`, `token_id`, `client` (the address after trusted proxies), `object` (the names the
//! request gives: no values, credentials masked in URLs), `result` (`ok` or the gRPC code's
//! name) and, for a refusal, `reason` (the message the caller got). Nothing else of the request
//! is logged: never a password, token or credential.

use std::sync::Arc;

use serde_json::Value;

use crate::error::AppError;
use crate::principal::{Caller, Credentials};
use crate::service::{Ctx, UseCase};

/// Names of request fields that say which object a call is about. Values of other fields are
/// never read: they may be secrets (a login's password, a repository's key).
const NAMES: &[&str] = &[
    "name",
    "appNamespace",
    "project",
    "role",
    "id",
    "server",
    "repo",
    "url",
    "username",
];

/// `inner`, recording each call as the module's doc says. `mutates`: the method changes
/// state (every call is recorded, not only refusals).
pub fn audited(method: &'static str, mutates: bool, inner: Arc<UseCase>) -> Arc<UseCase> {
    Arc::new(move |ctx: Ctx, json: Value| {
        let object = mutates.then(|| object_of(&json));
        let who = (Arc::clone(&ctx.app), ctx.caller.clone());
        let reply = inner(ctx, json);
        Box::pin(async move {
            let reply = reply.await;
            // A denial has its line already, from the one place that makes one (`Rbac::deny`
            // or `Rbac::refuse`, with what was checked or why): one line per denial.
            let denied = matches!(reply, Err(AppError::PermissionDenied(_)));
            // A token that could not be checked (its reviewer did not answer) is refused too.
            let unchecked = matches!(who.1.credentials, Credentials::Unchecked(_))
                && matches!(reply, Err(AppError::Unavailable(_)));
            let refused = unchecked
                || matches!(
                    reply,
                    Err(AppError::Unauthenticated(_) | AppError::Throttled(..) | AppError::RateLimited(..))
                );
            // Every use of a personal access token is recorded, reads too (a denial has its
            // line already, naming the token's id).
            let personal = who.1.principal.sso().is_some_and(|s| s.personal_token.is_some());
            if ((mutates || personal) && !denied) || refused {
                let (app, caller) = who;
                let groups = crate::rbac::groups(&app.rbac.policy(), &caller.principal).join(",");
                let outcome = reply.as_ref().map(|_| ());
                record(method, &caller, &groups, object.as_deref().unwrap_or(""), outcome);
            }
            reply
        })
    })
}

/// The line of a login refused before its request was read (a rate limit, decided from the
/// headers by the server): the method, the caller and why, with no object (the body that
/// would name the user is never read).
pub fn refused_login(method: &str, caller: &Caller, err: &AppError) {
    record(method, caller, "", "", Err(err));
}

fn record(method: &str, caller: &Caller, groups: &str, object: &str, reply: Result<(), &AppError>) {
    let (result, reason) = match reply {
        Ok(_) => ("ok".to_owned(), String::new()),
        Err(e) => {
            let (code, _) = e.codes();
            let reason = match e {
                // Internal causes are logged by the error table, never here.
                AppError::Internal(_) => String::new(),
                e => crate::urlmask::mask(&e.to_string()),
            };
            (format!("{code:?}"), reason)
        }
    };
    tracing::info!(
        target: "audit",
        event = "call",
        method,
        subject = caller.principal.subject(),
        groups,
        token_id = caller.principal.token_id(),
        client = %caller.ip,
        object,
        result,
        reason,
        "{method}: {result}"
    );
}

/// `field=value` for each naming field of the request and of its top-level messages'
/// `metadata` (`application.metadata.name`), space-separated, URLs masked.
fn object_of(request: &Value) -> String {
    let mut out = Vec::new();
    let mut add = |path: String, value: &Value| {
        if let Some(text) = value.as_str().filter(|t| !t.is_empty()) {
            out.push(format!("{path}={}", crate::urlmask::mask(text)));
        }
    };
    let Some(fields) = request.as_object() else {
        return String::new();
    };
    for (field, value) in fields {
        if value.is_string() {
            if NAMES.contains(&field.as_str()) {
                add(field.clone(), value);
            }
        } else if let Some(meta) = value.get("metadata").and_then(Value::as_object) {
            for part in ["namespace", "name"] {
                if let Some(v) = meta.get(part) {
                    add(format!("{field}.metadata.{part}"), v);
                }
            }
        } else if let Some(inner) = value.as_object() {
            // `repo.repo`, `cluster.server`: the object's own naming field.
            for (name, v) in inner {
                if NAMES.contains(&name.as_str()) {
                    add(format!("{field}.{name}"), v);
                }
            }
        }
    }
    out.join(" ")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::object_of;

    #[test]
    fn the_object_is_named_without_values_or_credentials() {
        let login = json!({"username": "alice", "password": "hunter2"});
        assert_eq!(object_of(&login), "username=alice");
        let app = json!({"application": {"metadata": {"name": "a1", "namespace": "argocd"},
                         "spec": {"source": {"repoURL": "https://x"}}}, "upsert": true});
        assert_eq!(
            object_of(&app),
            "application.metadata.namespace=argocd application.metadata.name=a1"
        );
        let repo = json!({"repo": {"repo": "https://bob:secret@git.example/x.git", "password": "p"}});
        let named = object_of(&repo);
        assert!(named.starts_with("repo.repo=https://bob:"), "{named}");
        assert!(!named.contains("secret") && !named.contains("=p"), "{named}");
    }
}
