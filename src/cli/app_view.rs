//! How `tiphys app` shows applications: the list's columns and the description of one.

use std::io::Write;

use serde_json::Value;

use super::call::str_at;
use super::view::{self, field};

/// `namespace/name` (the name alone when there is no namespace).
pub fn qualified(app: &Value) -> String {
    let ns = str_at(app, "/metadata/namespace");
    let name = str_at(app, "/metadata/name");
    if ns.is_empty() {
        name.to_owned()
    } else {
        format!("{ns}/{name}")
    }
}

fn sync_policy(app: &Value) -> String {
    match app.pointer("/spec/syncPolicy/automated") {
        None | Some(Value::Null) => "Manual".to_owned(),
        Some(auto) if auto.get("prune") == Some(&Value::Bool(true)) => "Auto-Prune".to_owned(),
        Some(_) => "Auto".to_owned(),
    }
}

fn conditions(app: &Value) -> String {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for condition in app
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let kind = str_at(condition, "/type").to_owned();
        match counts.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => counts.push((kind, 1)),
        }
    }
    let parts: Vec<String> = counts
        .into_iter()
        .map(|(k, n)| if n > 1 { format!("{k}({n})") } else { k })
        .collect();
    view::joined(&parts)
}

fn first_source(app: &Value) -> &Value {
    match app.pointer("/spec/source") {
        Some(source) if !source.is_null() => source,
        _ => app.pointer("/spec/sources/0").unwrap_or(&Value::Null),
    }
}

pub fn row(app: &Value, wide: bool) -> Vec<String> {
    let dest = |k: &str| str_at(app, &format!("/spec/destination/{k}")).to_owned();
    let cluster = if dest("server").is_empty() {
        dest("name")
    } else {
        dest("server")
    };
    let source = first_source(app);
    let mut row = vec![
        qualified(app),
        cluster,
        dest("namespace"),
        str_at(app, "/spec/project").to_owned(),
        str_at(app, "/status/sync/status").to_owned(),
        str_at(app, "/status/health/status").to_owned(),
        sync_policy(app),
        conditions(app),
        str_at(source, "/repoURL").to_owned(),
        str_at(source, "/path").to_owned(),
        str_at(source, "/targetRevision").to_owned(),
    ];
    if wide {
        row.push(str_at(app, "/status/sync/revision").to_owned());
        row.push(operation(app));
        row.push(str_at(app, "/metadata/creationTimestamp").to_owned());
    }
    row
}

/// The current operation: the controller's phase, or `Requested` while none has started.
pub fn operation(app: &Value) -> String {
    let phase = str_at(app, "/status/operationState/phase");
    if !phase.is_empty() {
        phase.to_owned()
    } else if app.get("operation").is_some_and(|o| !o.is_null()) {
        "Requested".to_owned()
    } else {
        String::new()
    }
}

pub fn describe(out: &mut dyn Write, app: &Value) -> std::io::Result<()> {
    field(out, "Name", &qualified(app))?;
    field(out, "Project", str_at(app, "/spec/project"))?;
    let server = str_at(app, "/spec/destination/server");
    if server.is_empty() {
        field(out, "Cluster", str_at(app, "/spec/destination/name"))?;
    } else {
        field(out, "Server", server)?;
    }
    field(out, "Namespace", str_at(app, "/spec/destination/namespace"))?;
    let sources: Vec<&Value> = match app.pointer("/spec/sources").and_then(Value::as_array) {
        Some(list) if !list.is_empty() => list.iter().collect(),
        _ => vec![first_source(app)],
    };
    for source in sources {
        field(out, "Repo", str_at(source, "/repoURL"))?;
        field(out, "Target", str_at(source, "/targetRevision"))?;
        field(out, "Path", str_at(source, "/path"))?;
    }
    field(out, "Sync Policy", &sync_policy(app))?;
    field(out, "Sync Status", str_at(app, "/status/sync/status"))?;
    field(out, "Health Status", str_at(app, "/status/health/status"))?;
    let op = operation(app);
    if !op.is_empty() {
        field(out, "Operation", &op)?;
    }
    let conditions = conditions(app);
    if conditions != "<none>" {
        field(out, "Conditions", &conditions)?;
    }
    Ok(())
}
