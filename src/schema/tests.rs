//! The codec against the real schema: Go encoding/json rules both ways, and protobuf round trips.

use prost::Message as _;
use prost_reflect::DynamicMessage;
use serde_json::json;

use super::Schema;

const APP: &str = "github.com.argoproj.argo_cd.v3.pkg.apis.application.v1alpha1.Application";
const CLUSTER: &str = "github.com.argoproj.argo_cd.v3.pkg.apis.application.v1alpha1.Cluster";

fn normalize(message: &str, input: serde_json::Value) -> serde_json::Value {
    let schema = Schema::get();
    let desc = schema.message(message).unwrap();
    schema.to_json(&schema.from_json(&desc, &input).unwrap())
}

#[test]
fn embedded_schema_loads_and_knows_every_service() {
    let schema = Schema::get();
    for path in [
        "/application.ApplicationService/List",
        "/application.ApplicationService/Watch",
        "/project.ProjectService/Create",
        "/cluster.ClusterService/Get",
        "/repository.RepositoryService/ListRepositories",
        "/repocreds.RepoCredsService/ListRepositoryCredentials",
    ] {
        assert!(schema.method(path).is_some(), "{path}");
    }
    assert!(schema.method("/application.ApplicationService/Nope").is_none());
}

#[test]
fn always_fields_are_emitted_and_zero_fields_omitted() {
    let app = normalize(APP, json!({"metadata": {"name": "a", "labels": {}}, "spec": {}}));
    assert_eq!(app["spec"]["destination"], json!({}));
    assert_eq!(app["spec"]["project"], json!(""));
    assert_eq!(app["status"]["sync"]["status"], json!(""));
    assert_eq!(app["status"]["health"], json!({}));
    assert_eq!(app["status"]["summary"], json!({}));
    assert!(app["metadata"].get("labels").is_none(), "{app}");
    assert!(app["spec"].get("source").is_none(), "{app}");
    assert!(app.get("apiVersion").is_none());
}

#[test]
fn times_int64_and_bytes_follow_go() {
    let cluster = normalize(
        CLUSTER,
        json!({
            "server": "https://x",
            "config": {"tlsClientConfig": {"caData": "AAEC"}},
            "info": {"applicationsCount": "3", "connectionState": {"attemptedAt": "2026-01-01T01:00:00+01:00"}}
        }),
    );
    assert_eq!(cluster["info"]["applicationsCount"], json!(3));
    assert_eq!(
        cluster["info"]["connectionState"]["attemptedAt"],
        json!("2026-01-01T00:00:00Z")
    );
    assert_eq!(cluster["config"]["tlsClientConfig"]["caData"], json!("AAEC"));
    assert_eq!(cluster["name"], json!(""));
    // An unset time is left out, even where Go would write `null`.
    let bare = normalize(CLUSTER, json!({"server": "https://y"}));
    assert!(
        bare["info"]["connectionState"].get("attemptedAt").is_none(),
        "{bare}"
    );
    assert!(bare["connectionState"].get("attemptedAt").is_none(), "{bare}");
    assert_eq!(bare["connectionState"], json!({"status": "", "message": ""}));
}

#[test]
fn empty_always_lists_and_maps_are_empty_not_null() {
    let list = normalize(
        "github.com.argoproj.argo_cd.v3.pkg.apis.application.v1alpha1.RepositoryList",
        json!({"metadata": {}}),
    );
    assert_eq!(list["items"], json!([]), "{list}");
    let list = normalize(
        "github.com.argoproj.argo_cd.v3.pkg.apis.application.v1alpha1.RepoCredsList",
        json!({"items": null}),
    );
    assert_eq!(list["items"], json!([]), "{list}");
}

#[test]
fn input_is_read_as_go_reads_it() {
    let app = normalize(
        APP,
        json!({"Metadata": {"NAME": "a"}, "spec": {"unknownField": 1, "project": null, "source": {"REPOURL": "https://r"}}}),
    );
    assert_eq!(app["metadata"]["name"], json!("a"));
    assert_eq!(app["spec"]["source"]["repoURL"], json!("https://r"));
    assert!(app["spec"].get("unknownField").is_none());
}

#[test]
fn wrong_types_name_the_field() {
    let schema = Schema::get();
    let desc = schema.message(APP).unwrap();
    let err = schema
        .from_json(&desc, &json!({"spec": {"destination": {"server": 5}}}))
        .unwrap_err();
    assert_eq!(err.path, "spec.destination.server");
    assert!(
        err.to_string().contains("expected a string, got a number"),
        "{err}"
    );
    let err = schema
        .from_json(&desc, &json!({"metadata": {"labels": {"a": 1}}}))
        .unwrap_err();
    assert!(err.path.starts_with("metadata.labels"), "{err}");
    let err = schema.from_json(&desc, &json!([1])).unwrap_err();
    assert!(err.to_string().contains("expected an object"), "{err}");
}

#[test]
fn protobuf_round_trip_keeps_the_json_form() {
    let schema = Schema::get();
    let desc = schema.message(APP).unwrap();
    let app = normalize(
        APP,
        json!({
            "metadata": {"name": "a", "namespace": "argocd", "labels": {"x": "y"}, "generation": 3,
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"project": "p", "destination": {"server": "https://s", "namespace": "n"},
                     "source": {"repoURL": "https://r", "path": "p", "targetRevision": "HEAD"},
                     "syncPolicy": {"syncOptions": ["A=true"]}},
            "operation": {"sync": {"prune": true, "revision": "abc"}}
        }),
    );
    let bytes = schema.encode(&desc, &app).unwrap();
    assert_eq!(schema.decode(&desc, &bytes).unwrap(), app);
    // Field numbers as upstream: metadata = 1, ObjectMeta.name = 1.
    let msg = DynamicMessage::decode(desc, bytes.as_slice()).unwrap();
    let meta = msg.get_field_by_number(1).unwrap();
    let name = meta.as_message().unwrap().get_field_by_number(1).unwrap();
    assert_eq!(name.as_str(), Some("a"));
    assert!(!msg.encode_to_vec().is_empty());
}

#[test]
fn proto2_required_fields_are_always_encoded() {
    let schema = Schema::get();
    let method = schema
        .method("/application.ApplicationService/GetApplicationSyncWindows")
        .unwrap();
    let bytes = schema.encode(&method.output(), &json!({})).unwrap();
    // canSync (field 4, bool) is required: present even when false.
    let msg = DynamicMessage::decode(method.output(), bytes.as_slice()).unwrap();
    let can_sync = method.output().get_field_by_name("canSync").unwrap();
    assert!(msg.has_field(&can_sync), "required field missing from {bytes:?}");
}

#[test]
fn application_set_spec_has_upstreams_field_numbers() {
    // An ApplicationSetSpec as upstream's Go types encode it (applicationset_types.go):
    // preservedFields = 6, goTemplateOptions = 7, applyNestedSelectors = 8 (a bool, always sent
    // by upstream's clients), ignoreApplicationDifferences = 9.
    let mut bytes = vec![0x32, 0x03, 0x0a, 0x01, b'a', 0x3a, 16];
    bytes.extend_from_slice(b"missingkey=error");
    bytes.extend_from_slice(&[0x40, 0x01, 0x4a, 0x03, 0x0a, 0x01, b'x']);
    let schema = Schema::get();
    let desc = schema
        .message("github.com.argoproj.argo_cd.v3.pkg.apis.application.v1alpha1.ApplicationSetSpec")
        .unwrap();
    let spec = schema.decode(&desc, &bytes).unwrap();
    assert_eq!(spec["preservedFields"], json!({"annotations": ["a"]}));
    assert_eq!(spec["goTemplateOptions"], json!(["missingkey=error"]));
    assert_eq!(spec["applyNestedSelectors"], json!(true));
    assert_eq!(spec["ignoreApplicationDifferences"], json!([{"name": "x"}]));
}

#[test]
fn omitempty_recognises_zero_values() {
    use super::is_zero;
    assert!(is_zero(&String::new()));
    assert!(is_zero(&0_i64));
    assert!(is_zero(&false));
    assert!(is_zero(&Vec::<String>::new()));
    assert!(!is_zero(&"x".to_owned()));
    assert!(!is_zero(&true));
}
