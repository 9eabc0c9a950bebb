//! The built-in actions, our own code: the ones upstream offers for the common workloads
//! (resource_customizations/apps/{Deployment,StatefulSet,DaemonSet}/actions,
//! resource_customizations/batch/CronJob/actions), with the same names, parameters, icons and
//! enabled states, so that a client sees the same list from tiphys as from argocd-server.

use serde_json::{Value, json};

use super::{Action, Impacted, Operation, Param};

/// The annotation `kubectl rollout restart` sets on a pod template.
const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";

/// The built-in actions of the kind `key`, for `obj` (None: the kind has none).
pub fn discover(key: &str, obj: &Value) -> Option<Vec<Action>> {
    Some(match key {
        "apps/Deployment" => {
            let paused = obj.pointer("/spec/paused");
            let mut actions = vec![Action::named("restart"), scale()];
            // As upstream: pause is offered only once spec.paused is set at all.
            if paused.is_some() {
                actions.push(Action::named("pause"));
            }
            actions.push(Action {
                disabled: paused.and_then(Value::as_bool) != Some(true),
                ..Action::named("resume")
            });
            actions
        }
        "apps/StatefulSet" => vec![Action::named("restart"), scale()],
        "apps/DaemonSet" => vec![Action::named("restart")],
        "batch/CronJob" => {
            let mut create = Action::named("create-job");
            create.icon_class = "fa fa-fw fa-plus".into();
            create.display_name = "Create Job".into();
            let suspended = obj.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true);
            let (name, icon) = if suspended {
                ("resume", "fa fa-fw fa-play")
            } else {
                ("suspend", "fa fa-fw fa-pause")
            };
            let mut toggle = Action::named(name);
            toggle.icon_class = icon.into();
            vec![create, toggle]
        }
        _ => return None,
    })
}

fn scale() -> Action {
    Action {
        params: vec![Param {
            name: "replicas".into(),
            ..Param::default()
        }],
        ..Action::named("scale")
    }
}

/// Runs the built-in action `name` of the kind `key` on `obj` (None: there is no such
/// action). `now` is the clock's time, for restartedAt and a created Job's name.
pub fn run(
    key: &str,
    name: &str,
    mut obj: Value,
    params: &[(String, String)],
    now: jiff::Timestamp,
) -> Option<Result<Vec<Impacted>, String>> {
    let patch = |obj: Value| Some(Ok(vec![Impacted::patch(obj)]));
    match (key, name) {
        ("apps/Deployment" | "apps/StatefulSet" | "apps/DaemonSet", "restart") => {
            let at = now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
            set(
                &mut obj,
                &["spec", "template", "metadata", "annotations", RESTARTED_AT],
                json!(at),
            );
            patch(obj)
        }
        ("apps/Deployment" | "apps/StatefulSet", "scale") => {
            let given = params
                .iter()
                .find(|(n, _)| n == "replicas")
                .map(|(_, v)| v.as_str());
            let Some(replicas) = given
                .and_then(|v| v.trim().parse::<i64>().ok())
                .filter(|n| *n >= 0)
            else {
                return Some(Err(format!(
                    "invalid number: {:?} (the parameter replicas must be a whole number of at least 0)",
                    given.unwrap_or("")
                )));
            };
            set(&mut obj, &["spec", "replicas"], json!(replicas));
            patch(obj)
        }
        ("apps/Deployment", "pause") => {
            set(&mut obj, &["spec", "paused"], json!(true));
            patch(obj)
        }
        ("apps/Deployment", "resume") => {
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                spec.remove("paused");
            }
            patch(obj)
        }
        ("batch/CronJob", "suspend" | "resume") => {
            set(&mut obj, &["spec", "suspend"], json!(name == "suspend"));
            patch(obj)
        }
        ("batch/CronJob", "create-job") => Some(Ok(vec![Impacted {
            operation: Operation::Create,
            resource: job_of(&obj, now),
        }])),
        _ => None,
    }
}

/// A Job from a CronJob's template, as `kubectl create job --from=cronjob/<name>` makes it:
/// owned by the CronJob, marked as started by hand, named for the minute.
fn job_of(cron: &Value, now: jiff::Timestamp) -> Value {
    let text = |p: &str| cron.pointer(p).and_then(Value::as_str).unwrap_or("").to_owned();
    let mut metadata = cron
        .pointer("/spec/jobTemplate/metadata")
        .filter(|m| m.as_object().is_some_and(|o| !o.is_empty()))
        .cloned()
        .unwrap_or_else(|| json!({}));
    let suffix = now.strftime("%y%m%d%H%M").to_string();
    metadata["name"] = json!(format!("{}-{suffix}", text("/metadata/name")));
    metadata["namespace"] = json!(text("/metadata/namespace"));
    set(
        &mut metadata,
        &["annotations", "cronjob.kubernetes.io/instantiate"],
        json!("manual"),
    );
    metadata["ownerReferences"] = json!([{
        "apiVersion": text("/apiVersion"),
        "kind": text("/kind"),
        "name": text("/metadata/name"),
        "uid": text("/metadata/uid"),
        "blockOwnerDeletion": true,
        "controller": true,
    }]);
    let spec = cron
        .pointer("/spec/jobTemplate/spec")
        .cloned()
        .unwrap_or_else(|| json!({}));
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec})
}

/// Sets `path` in `obj`, making the objects on the way.
fn set(obj: &mut Value, path: &[&str], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut at = obj;
    for part in parents {
        if !at.get(*part).is_some_and(Value::is_object) {
            at[*part] = json!({});
        }
        at = &mut at[*part];
    }
    at[*last] = value;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(actions: &[Action]) -> Vec<(&str, bool)> {
        actions.iter().map(|a| (a.name.as_str(), a.disabled)).collect()
    }

    #[test]
    fn deployments_offer_what_upstream_offers() {
        let running = discover("apps/Deployment", &json!({"spec": {}})).unwrap();
        assert_eq!(
            names(&running),
            [("restart", false), ("scale", false), ("resume", true)]
        );
        let paused = discover("apps/Deployment", &json!({"spec": {"paused": true}})).unwrap();
        assert_eq!(
            names(&paused),
            [
                ("restart", false),
                ("scale", false),
                ("pause", false),
                ("resume", false)
            ]
        );
        assert!(discover("ConfigMap", &json!({})).is_none());
    }

    #[test]
    fn restart_stamps_the_template_with_the_clock() {
        let now = jiff::Timestamp::from_second(1_700_000_000).unwrap();
        let out = run(
            "apps/Deployment",
            "restart",
            json!({"spec": {"template": {}}}),
            &[],
            now,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            out[0].resource.pointer("/spec/template/metadata/annotations"),
            Some(&json!({RESTARTED_AT: "2023-11-14T22:13:20Z"}))
        );
    }

    #[test]
    fn scale_needs_a_number() {
        let now = jiff::Timestamp::UNIX_EPOCH;
        let params = [("replicas".to_owned(), "x".to_owned())];
        let err = run("apps/StatefulSet", "scale", json!({}), &params, now)
            .unwrap()
            .unwrap_err();
        assert!(err.contains("\"x\""), "{err}");
        assert!(run("apps/DaemonSet", "scale", json!({}), &params, now).is_none());
    }

    #[test]
    fn create_job_copies_the_template() {
        let now = jiff::Timestamp::from_second(1_700_000_000).unwrap();
        let cron = json!({"apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": "c", "namespace": "n", "uid": "u"},
            "spec": {"jobTemplate": {"spec": {"template": {"spec": {}}}}}});
        let out = run("batch/CronJob", "create-job", cron, &[], now)
            .unwrap()
            .unwrap();
        assert_eq!(out[0].operation, Operation::Create);
        assert_eq!(out[0].resource["metadata"]["name"], "c-2311142213");
        assert_eq!(out[0].resource["metadata"]["ownerReferences"][0]["uid"], "u");
    }
}
