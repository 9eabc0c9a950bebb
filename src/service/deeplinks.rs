//! Deep links (argocd-cm `application.links`, `resource.links`, `project.links`), as upstream's
//! server/deeplinks/deeplinks.go makes them: each link's `if` condition (expr-lang, see
//! [`crate::expr`]) is evaluated over the link objects, and when it holds (or there is none)
//! its URL template (Go's text/template with sprig, see [`super::gotemplate`]) is rendered over
//! the same objects. A link whose condition fails, is not a boolean, or whose template fails is
//! left out and logged; the others are answered.
//!
//! The objects, under upstream's names: `resource` (the live object, a Secret masked),
//! `application` and its short name `app`, `cluster` (only the fields upstream's
//! `ClusterLinksData` keeps: no credentials) and `project` (its status emptied: it holds
//! the project's tokens).

use serde_json::{Map, Value, json};

use crate::config::deep_links::DeepLink;
use crate::expr::Program;
use crate::service::gotemplate::{Budget, MissingKey, Template};

/// The link objects a request has.
#[derive(Default)]
pub struct Objects {
    pub resource: Option<Value>,
    pub app: Option<Value>,
    pub cluster: Option<Value>,
    pub project: Option<Value>,
}

impl Objects {
    fn env(self) -> Value {
        let mut env = Map::new();
        if let Some(resource) = self.resource {
            env.insert("resource".to_owned(), resource);
        }
        if let Some(app) = self.app {
            env.insert("application".to_owned(), app.clone());
            env.insert("app".to_owned(), app);
        }
        if let Some(cluster) = self.cluster {
            env.insert("cluster".to_owned(), cluster);
        }
        if let Some(project) = self.project {
            env.insert("project".to_owned(), project);
        }
        Value::Object(env)
    }
}

/// A project as the links see it: with an empty `status` (it holds the tokens' records), as
/// upstream clears it.
pub fn sanitized_project(mut project: Value) -> Value {
    if let Some(obj) = project.as_object_mut() {
        obj.insert("status".to_owned(), json!({}));
    }
    project
}

/// A cluster as the links see it: upstream's `ClusterLinksData` (server and name always; the
/// rest when set), never its connection config.
pub fn sanitized_cluster(cluster: &Value) -> Value {
    let text = |f: &str| cluster.get(f).and_then(Value::as_str).unwrap_or("").to_owned();
    let mut out = json!({"server": text("server"), "name": text("name")});
    let set = |v: &Value| match v {
        Value::Null => false,
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        _ => true,
    };
    for field in ["namespaces", "shard", "project", "labels", "annotations"] {
        if let Some(v) = cluster.get(field).filter(|v| set(v)) {
            out[field] = v.clone();
        }
    }
    out
}

/// The `LinksResponse` for `links` over `objects`; what failed is logged, naming `name`.
pub fn evaluate(links: &[DeepLink], objects: Objects, name: &str) -> Value {
    let env = objects.env();
    let mut items = Vec::new();
    let mut errors = Vec::new();
    for link in links {
        match one(link, &env, name) {
            Ok(Some(item)) => items.push(item),
            Ok(None) => {}
            Err(why) => errors.push(why),
        }
    }
    if !errors.is_empty() {
        tracing::error!(object = name, errors = %errors.join(", "), "deep links left out");
    }
    if items.is_empty() {
        return json!({});
    }
    json!({ "items": items })
}

/// One link's `LinkInfo`, `None` when its condition is false.
fn one(link: &DeepLink, env: &Value, name: &str) -> Result<Option<Value>, String> {
    if let Some(condition) = &link.condition {
        let outcome = Program::parse(condition).and_then(|p| p.eval(env, &go_regex));
        match outcome {
            Ok(Value::Bool(true)) => {}
            Ok(Value::Bool(false)) => return Ok(None),
            Ok(_) => {
                return Err(format!(
                    "link condition '{condition}' evaluated to non-boolean value for resource {name}"
                ));
            }
            Err(e) => {
                return Err(format!(
                    "failed to evaluate link condition '{condition}' with resource {name}, error={e}"
                ));
            }
        }
    }
    let template = Template::parse(&link.url)
        .map_err(|e| format!("failed to parse link template '{}', error={e}", link.url))?;
    let url = template
        .execute(env, MissingKey::NoValue, &Budget::default())
        .map_err(|e| {
            format!(
                "failed to evaluate link template '{}' with resource {name}, error={e}",
                link.url
            )
        })?;
    let mut item = json!({"title": link.title, "url": url});
    if let Some(d) = &link.description {
        item["description"] = Value::String(d.clone());
    }
    if let Some(i) = &link.icon_class {
        item["iconClass"] = Value::String(i.clone());
    }
    Ok(Some(item))
}

/// `matches` with Go's regular expressions.
fn go_regex(pattern: &str, s: &str) -> Result<bool, String> {
    crate::rbac::gore::compile(pattern).map(|r| r.is_match(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(url: &str, condition: Option<&str>) -> DeepLink {
        DeepLink {
            url: url.to_owned(),
            title: "T".to_owned(),
            condition: condition.map(str::to_owned),
            ..DeepLink::default()
        }
    }

    #[test]
    fn links_render_when_their_condition_holds() {
        let objects = || Objects {
            app: Some(json!({"metadata": {"name": "web"}})),
            project: Some(sanitized_project(
                json!({"metadata": {"name": "p"}, "status": {"x": 1}}),
            )),
            ..Objects::default()
        };
        let links = [
            link(
                "https://x/{{ .app.metadata.name | upper }}/{{ .application.metadata.name }}",
                None,
            ),
            link(
                "https://t/{{.project.metadata.name}}",
                Some("app.metadata.name == 'web'"),
            ),
            link("https://f", Some("app.metadata.name == 'other'")),
            link("https://bad", Some("app.metadata.name ==")),
            link("https://num", Some("1")),
            link("https://{{ .project.status.x }}", None),
            link("https://{{ .nope", None),
        ];
        let out = evaluate(&links, objects(), "web");
        let urls: Vec<&str> = out["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["url"].as_str().unwrap())
            .collect();
        assert_eq!(urls, ["https://x/WEB/web", "https://t/p", "https://<no value>"]);
        assert_eq!(evaluate(&[], objects(), "web"), json!({}));
    }

    #[test]
    fn clusters_keep_no_credentials() {
        let c = json!({"server": "https://k", "name": "k", "config": {"bearerToken": "s"},
                       "labels": {"a": "b"}, "namespaces": [], "project": ""});
        assert_eq!(
            sanitized_cluster(&c),
            json!({"server": "https://k", "name": "k", "labels": {"a": "b"}})
        );
    }
}
