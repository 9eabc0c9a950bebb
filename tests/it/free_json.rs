//! Fields whose Kubernetes type is `RawExtension` (Helm's `valuesObject`: any JSON) or
//! `IntOrString` (a Kustomize replica's `count`) are kept as given, over REST and gRPC, and
//! applied from a manifest without a warning; a value of the wrong type is refused naming the
//! field. Until they were modelled, the codec dropped them without a word.

use serde_json::{Value, json};

use crate::cli_apps::{IN_CLUSTER, REPO, Session, start_server};
use crate::credentials_api::Rest;

fn application(count_web: Value) -> Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": "charts"},
        "spec": {
            "project": "default",
            "destination": {"server": IN_CLUSTER, "namespace": "web"},
            "sources": [
                {"repoURL": REPO, "path": "helm-guestbook", "helm": {"valuesObject": {
                    "replicaCount": 2,
                    "image": {"tag": "v1.2", "pullPolicy": null},
                    "ingress": {"enabled": true, "hosts": ["a.example", "b.example"]}
                }}},
                {"repoURL": REPO, "path": "kustomize-guestbook", "kustomize": {"replicas": [
                    {"name": "web", "count": count_web},
                    {"name": "api", "count": "50%"}
                ]}}
            ]
        }
    })
}

#[tokio::test]
async fn values_objects_and_replica_counts_are_kept() {
    let (server, _config) = start_server(None);
    let admin = Session::login(&server, "admin", &[]);
    let manifest = application(json!(3));
    let run = admin.run_with(&["apply", "-f", "-"], &manifest.to_string());
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.err, "", "no field is dropped, so nothing to warn about");

    let want_values = &manifest["spec"]["sources"][0]["helm"]["valuesObject"];
    let want_replicas = json!([{"name": "web", "count": 3}, {"name": "api", "count": "50%"}]);
    // Native gRPC (the CLI decodes the protobuf reply), then REST.
    let over_grpc = admin.json(&["app", "get", "charts", "-o", "json"]);
    let rest = Rest::login(&server, "admin").await;
    let over_rest = rest.ok("GET", "/api/v1/applications/charts", None).await;
    for app in [&over_grpc, &over_rest] {
        let sources = &app["spec"]["sources"];
        assert_eq!(&sources[0]["helm"]["valuesObject"], want_values, "{app}");
        assert_eq!(sources[1]["kustomize"]["replicas"], want_replicas, "{app}");
    }

    // The wrong types are refused, naming the field; nothing changes.
    for (count, message) in [
        (
            json!(1.5),
            "spec.sources[1].kustomize.replicas[0].count: expected an integer, got a number",
        ),
        (
            json!([3]),
            "spec.sources[1].kustomize.replicas[0].count: expected a number or a string, got an array",
        ),
    ] {
        let run = admin.run_with(&["apply", "-f", "-"], &application(count).to_string());
        assert_eq!(run.code, Some(1), "{run:?}");
        assert!(run.err.contains(message), "{message}\n{run:?}");
    }
    let again = rest.ok("GET", "/api/v1/applications/charts", None).await;
    assert_eq!(
        again["spec"]["sources"][1]["kustomize"]["replicas"],
        want_replicas
    );
}
