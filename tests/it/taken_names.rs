//! Say nothing the caller may not know (issue 20, item 6): a create whose name is taken by an
//! object the caller cannot see (an application, repository or cluster in a project the caller
//! has no rights in, a project the caller may not read) answers exactly as a create the caller
//! is not allowed to make: never "already exists", "spec is different", nor the stored object.

use serde_json::{Value, json};

use crate::cli_apps::{IN_CLUSTER, REPO};
use crate::credentials_api::{Answer, Rest, start};

const TAKEN_REPO: &str = "https://git.example/taken.git";
const TAKEN_SERVER: &str = "https://taken.example";
const TAKEN_CLUSTER_NAME: &str = "taken-cluster";

fn app(name: &str, project: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {"project": project,
        "source": {"repoURL": REPO, "path": "mine"},
        "destination": {"server": IN_CLUSTER, "namespace": "default"}}})
}

fn project(name: &str) -> Value {
    json!({"project": {"metadata": {"name": name}, "spec": {
        "sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}]}}})
}

/// Whether `taken` answers as `refused` does, once the names the caller chose are swapped; the
/// difference if not. (Collected, so that one run shows every kind that leaks.)
fn differs(what: &str, taken: &Answer, refused: &Answer, swap: (&str, &str)) -> Option<String> {
    let expected = (refused.status, refused.text.replace(swap.0, swap.1));
    let leaks = ["exist", "different", "upsert"]
        .iter()
        .any(|leak| taken.text.contains(leak));
    (refused.status != 403 || (taken.status, taken.text.clone()) != expected || leaks).then(|| {
        format!(
            "{what}: got {} {}, want {} {}",
            taken.status, taken.text, expected.0, expected.1
        )
    })
}

#[tokio::test]
async fn a_name_taken_where_the_caller_cannot_see_answers_as_a_forbidden_create() {
    let (server, _config) = start(
        &["alice"],
        &[
            "p, alice, applications, create, mine/*, allow",
            "p, alice, applications, update, mine/*, allow",
            "p, alice, repositories, create, mine/*, allow",
            "p, alice, repositories, update, mine/*, allow",
            "p, alice, clusters, create, mine/*, allow",
            "p, alice, clusters, update, mine/*, allow",
            "p, alice, projects, create, hid*, allow",
            "p, alice, projects, update, hid*, allow",
        ],
        "",
    );
    let admin = Rest::login(&server, "admin").await;
    for name in ["mine", "hidden"] {
        admin.ok("POST", "/api/v1/projects", Some(&project(name))).await;
    }
    admin
        .ok("POST", "/api/v1/applications", Some(&app("taken", "hidden")))
        .await;
    let repo = |project: &str| json!({"repo": TAKEN_REPO, "project": project});
    admin
        .ok("POST", "/api/v1/repositories", Some(&repo("hidden")))
        .await;
    let cluster =
        |server: &str, name: &str, project: &str| json!({"server": server, "name": name, "project": project});
    admin
        .ok(
            "POST",
            "/api/v1/clusters",
            Some(&cluster(TAKEN_SERVER, TAKEN_CLUSTER_NAME, "hidden")),
        )
        .await;
    let alice = Rest::login(&server, "alice").await;

    let mut leaks = Vec::new();
    for query in ["", "?upsert=true"] {
        let path = format!("/api/v1/applications{query}");
        let taken = alice.call("POST", &path, Some(&app("taken", "mine"))).await;
        let refused = alice.call("POST", &path, Some(&app("taken", "hidden"))).await;
        leaks.extend(differs(
            &format!("application{query}"),
            &taken,
            &refused,
            ("hidden/", "mine/"),
        ));

        let path = format!("/api/v1/repositories{query}");
        let taken = alice.call("POST", &path, Some(&repo("mine"))).await;
        let refused = alice.call("POST", &path, Some(&repo("hidden"))).await;
        leaks.extend(differs(&format!("repository{query}"), &taken, &refused, ("", "")));

        let path = format!("/api/v1/clusters{query}");
        for (server_url, name) in [
            (TAKEN_SERVER, "new-name"),
            ("https://free.example", TAKEN_CLUSTER_NAME),
        ] {
            let taken = alice
                .call("POST", &path, Some(&cluster(server_url, name, "mine")))
                .await;
            let refused = alice
                .call("POST", &path, Some(&cluster(server_url, name, "hidden")))
                .await;
            leaks.extend(differs(
                &format!("cluster {server_url} {name}{query}"),
                &taken,
                &refused,
                ("", ""),
            ));
        }

        let path = format!("/api/v1/projects{query}");
        let taken = alice.call("POST", &path, Some(&project("hidden"))).await;
        let refused = alice.call("POST", &path, Some(&project("other"))).await;
        leaks.extend(differs(
            &format!("project{query}"),
            &taken,
            &refused,
            ("other", "hidden"),
        ));
    }

    assert!(leaks.is_empty(), "{}", leaks.join("\n"));

    // Nothing changed, and a fresh name in her own project is still hers to create.
    let stored = admin.ok("GET", "/api/v1/applications/taken", None).await;
    assert_eq!(stored["spec"]["project"], "hidden", "{stored}");
    let stored = admin
        .ok(
            "GET",
            &format!("/api/v1/clusters/{}", crate::credentials_api::enc(TAKEN_SERVER)),
            None,
        )
        .await;
    assert_eq!(stored["project"], "hidden", "{stored}");
    alice
        .ok("POST", "/api/v1/applications", Some(&app("fresh", "mine")))
        .await;
}
