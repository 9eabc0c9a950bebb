//! `notification.NotificationService`: the triggers, templates and services configured in
//! `argocd-notifications-cm`, by name, as upstream's UI offers them for subscriptions. tiphys
//! sends no notifications; it lists what a notifications controller beside it would use.
//!
//! The ConfigMap is read at each call, from `--config-dir` or from the installation (`--kube`;
//! it is small, and the calls are rare), so an edit shows at once. Keys are read as upstream's notifications engine reads them
//! (`trigger.<name>`, `template.<name>`, `service.<type>` or `service.<type>.<name>`); a
//! template or trigger that is not YAML, or a service key with more parts, is an error naming
//! the key and its line, where upstream's engine fails the whole list with its own message.

use std::collections::BTreeSet;

use serde::Serialize;

use super::{Ctx, Empty, Reply};
use crate::config::source::RawObject;
use crate::error::AppError;

/// The ConfigMap's name, as upstream's.
pub const NOTIFICATIONS_CM: &str = "argocd-notifications-cm";

/// What the ConfigMap names, each set sorted.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Names {
    pub triggers: BTreeSet<String>,
    pub templates: BTreeSet<String>,
    pub services: BTreeSet<String>,
}

#[derive(Serialize)]
struct Named {
    name: String,
}

#[derive(Serialize)]
struct List {
    items: Vec<Named>,
}

fn list(names: BTreeSet<String>) -> Result<Reply, AppError> {
    let items = names.into_iter().map(|name| Named { name }).collect();
    Reply::json(List { items })
}

/// `ListTriggers` (`GET /api/v1/notifications/triggers`): any logged-in caller, as upstream.
pub async fn list_triggers(ctx: Ctx, _: Empty) -> Result<Reply, AppError> {
    list(read(&ctx).await?.triggers)
}

/// `ListServices` (`GET /api/v1/notifications/services`).
pub async fn list_services(ctx: Ctx, _: Empty) -> Result<Reply, AppError> {
    list(read(&ctx).await?.services)
}

/// `ListTemplates` (`GET /api/v1/notifications/templates`).
pub async fn list_templates(ctx: Ctx, _: Empty) -> Result<Reply, AppError> {
    list(read(&ctx).await?.templates)
}

async fn read(ctx: &Ctx) -> Result<Names, AppError> {
    ctx.caller.require()?;
    match ctx.app.config.read_object(NOTIFICATIONS_CM).await {
        None => Ok(Names::default()),
        Some(Ok(cm)) => names(&cm).map_err(AppError::FailedPrecondition),
        Some(Err(e)) => Err(AppError::FailedPrecondition(format!("{NOTIFICATIONS_CM}: {e}"))),
    }
}

/// Reads the names as the notifications engine does; the first bad key is the error.
pub fn names(cm: &RawObject) -> Result<Names, String> {
    let mut names = Names::default();
    for (key, value) in &cm.data {
        let bad = |why: String| format!("{}: key {key:?}: {why}", cm.locate(key));
        if let Some(name) = key.strip_prefix("template.") {
            serde_yaml_ng::from_str::<serde_yaml_ng::Value>(value)
                .map_err(|e| bad(format!("the template is not YAML: {e}")))?;
            names.templates.insert(name.to_owned());
        } else if let Some(name) = key.strip_prefix("trigger.") {
            let parsed = serde_yaml_ng::from_str::<serde_yaml_ng::Value>(value)
                .map_err(|e| bad(format!("the trigger is not YAML: {e}")))?;
            if !parsed.is_sequence() {
                return Err(bad("a trigger is a list of conditions".to_owned()));
            }
            names.triggers.insert(name.to_owned());
        } else if let Some(rest) = key.strip_prefix("service.") {
            let name = match rest.split('.').collect::<Vec<_>>()[..] {
                [kind] => kind,
                [_, name] => name,
                _ => {
                    return Err(bad(
                        "a service key is `service.<type>` or `service.<type>.<name>`".to_owned(),
                    ));
                }
            };
            if name.is_empty() {
                return Err(bad("the service's type or name is empty".to_owned()));
            }
            names.services.insert(name.to_owned());
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(pairs: &[(&str, &str)]) -> RawObject {
        RawObject {
            data: pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..RawObject::empty(NOTIFICATIONS_CM)
        }
    }

    #[test]
    fn names_are_read_as_the_engine_reads_them() {
        let got = names(&cm(&[
            (
                "trigger.on-sync-failed",
                "- when: app.status.operationState.phase == 'Failed'\n  send: [failed]\n",
            ),
            ("template.app.failed", "message: failed\n"),
            ("service.slack", "token: $slack-token\n"),
            ("service.webhook.github", "url: https://api.github.com\n"),
            ("subscriptions", "- recipients: [slack:ops]\n"),
            ("context", "argocdUrl: https://cd.example.com\n"),
        ]))
        .unwrap();
        let set = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<BTreeSet<_>>();
        assert_eq!(got.triggers, set(&["on-sync-failed"]));
        assert_eq!(got.templates, set(&["app.failed"]));
        assert_eq!(got.services, set(&["github", "slack"]));
    }

    #[test]
    fn a_bad_key_is_named() {
        let err = names(&cm(&[("service.webhook.a.b", "url: x")])).unwrap_err();
        assert!(
            err.contains("service.webhook.a.b") && err.contains("service.<type>"),
            "{err}"
        );
        let err = names(&cm(&[("trigger.t", "when: [unclosed")])).unwrap_err();
        assert!(err.contains("trigger.t") && err.contains("not YAML"), "{err}");
        let err = names(&cm(&[("trigger.t", "when: x")])).unwrap_err();
        assert!(err.contains("list of conditions"), "{err}");
    }
}
