//! Pages, filters, sorts and facet counts of applications (README, "Pages, filters and
//! facets"): every page and count checked against the same question answered by hand over the
//! whole list, for an admin and for a user who may see one project; continue tokens that stay
//! valid while applications change, and refused when altered, reused for another query or
//! expired; each bad parameter refused by name; the same over gRPC.
//!
//! The applications are written into the registry with a `status`, as the controller writes
//! it (a client's create drops it), so that the sync and health filters have values.

use std::collections::BTreeMap;

use http::StatusCode;
use serde_json::{Value, json};
use tiphys::clock::Clock;
use tiphys::registry::{Change, Key, Kind};
use tiphys::schema::Schema;

use crate::support::Server;

const APPS: usize = 240;
const SYNC: [&str; 3] = ["Synced", "OutOfSync", ""];
const HEALTH: [&str; 4] = ["Healthy", "Degraded", "Progressing", "Missing"];

fn app(i: usize) -> Value {
    let mut status = json!({});
    if !SYNC[i % 3].is_empty() {
        status = json!({"sync": {"status": SYNC[i % 3]}, "health": {"status": HEALTH[i % 4]}});
    }
    json!({
        "metadata": {
            "name": format!("svc-{:03}-{}", (i * 37) % APPS, if i.is_multiple_of(5) { "blue" } else { "green" }),
            "namespace": "argocd",
            "labels": {"tier": if i.is_multiple_of(2) { "web" } else { "db" }},
        },
        "spec": {
            "project": if i.is_multiple_of(4) { "team-a" } else { "default" },
            "destination": {"server": "https://kubernetes.default.svc", "namespace": format!("ns-{}", i % 12)},
            "source": {"repoURL": format!("https://git.example/org/repo-{}.git", i % 2), "path": "p"},
        },
        "status": status,
    })
}

async fn open(clock: Clock) -> Server {
    open_in(clock, 1).await
}

/// The server with the applications written in `batches` a second apart: the registry stamps
/// `creationTimestamp` itself, to the second.
async fn open_in(clock: Clock, batches: usize) -> Server {
    let server = Server::open_with_clock(
        "  accounts.alice: login\n",
        "  policy.default: ''\n  policy.csv: |\n    p, alice, applications, get, team-a/*, allow\n",
        &[],
        clock,
    )
    .await;
    let registry = &server.server.app.registry;
    for project in ["team-a"] {
        registry
            .apply(vec![Change::Create {
                key: Key::new(Kind::AppProject, "argocd", project),
                value: json!({"metadata": {"name": project, "namespace": "argocd"},
                              "spec": {"sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}]}}),
            }])
            .await
            .unwrap();
    }
    for batch in 0..batches {
        if batch > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(1050)).await;
        }
        let changes = (0..APPS)
            .filter(|i| i % batches == batch)
            .map(|i| {
                let value = app(i);
                let name = value["metadata"]["name"].as_str().unwrap().to_owned();
                Change::Create {
                    key: Key::new(Kind::Application, "argocd", &name),
                    value,
                }
            })
            .collect();
        registry.apply(changes).await.unwrap();
    }
    server
}

/// Every application's JSON, by name.
fn everything() -> BTreeMap<String, Value> {
    (0..APPS)
        .map(app)
        .map(|a| (a["metadata"]["name"].as_str().unwrap().to_owned(), a))
        .collect()
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["metadata"]["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Every page of `query` (a REST query string without `continue`), following the tokens.
async fn all_pages(server: &Server, token: &str, query: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut next = String::new();
    for _ in 0..APPS + 1 {
        let sep = if next.is_empty() {
            String::new()
        } else {
            format!("&continue={next}")
        };
        let (status, list) = server
            .rest(
                "GET",
                &format!("/api/v1/applications?{query}{sep}"),
                token,
                Value::Null,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{list}");
        out.extend(names(&list));
        match list["metadata"]["continue"].as_str() {
            Some(token) if !token.is_empty() => next = token.to_owned(),
            _ => return out,
        }
    }
    panic!("the pages of {query} never end");
}

fn status_of(app: &Value, field: &str) -> String {
    match app["status"][field]["status"].as_str() {
        Some(s) if !s.is_empty() => s.to_owned(),
        _ => "Unknown".to_owned(),
    }
}

#[tokio::test]
async fn pages_in_each_sort_are_the_whole_filtered_list_in_order() {
    let server = open_in(Clock::system(), 3).await;
    let admin = server.login("admin");
    let all = everything();
    // The creation times as the registry stamped them.
    let (_, listed) = server
        .rest("GET", "/api/v1/applications", &admin, Value::Null)
        .await;
    let created: BTreeMap<String, String> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["metadata"]["name"].as_str().unwrap().to_owned(),
                a["metadata"]["creationTimestamp"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let mut by_name: Vec<String> = all.keys().cloned().collect();
    by_name.sort();
    assert_eq!(all_pages(&server, &admin, "limit=17").await, by_name);
    let mut reversed = by_name.clone();
    reversed.reverse();
    assert_eq!(all_pages(&server, &admin, "limit=50&sort=-name").await, reversed);

    let mut by_created: Vec<(&String, &String)> = created.iter().map(|(n, t)| (t, n)).collect();
    by_created.sort();
    assert!(
        by_created.first().unwrap().0 < by_created.last().unwrap().0,
        "three creation times"
    );
    let newest_first: Vec<String> = by_created.iter().rev().map(|(_, n)| (*n).clone()).collect();
    assert_eq!(
        all_pages(&server, &admin, "limit=33&sort=-created").await,
        newest_first
    );

    // Health sorts the least healthy first, then by name.
    let order = [
        "Degraded",
        "Missing",
        "Unknown",
        "Progressing",
        "Suspended",
        "Healthy",
    ];
    let mut by_health: Vec<(usize, &String)> = all
        .iter()
        .map(|(n, a)| {
            (
                order.iter().position(|o| *o == status_of(a, "health")).unwrap(),
                n,
            )
        })
        .collect();
    by_health.sort();
    let expected: Vec<String> = by_health.iter().map(|(_, n)| (*n).clone()).collect();
    assert_eq!(all_pages(&server, &admin, "limit=40&sort=health").await, expected);
}

#[tokio::test]
async fn filters_and_search_select_exactly_what_a_scan_would() {
    let server = open(Clock::system()).await;
    let admin = server.login("admin");
    let all = everything();
    let pick = |pred: &dyn Fn(&Value) -> bool| -> Vec<String> {
        all.iter()
            .filter(|(_, a)| pred(a))
            .map(|(n, _)| n.clone())
            .collect()
    };
    let cases: Vec<(&str, Vec<String>)> = vec![
        (
            "filter=health%3DDegraded",
            pick(&|a| status_of(a, "health") == "Degraded"),
        ),
        (
            "filter=sync%3DUnknown",
            pick(&|a| status_of(a, "sync") == "Unknown"),
        ),
        (
            "filter=sync%3DOutOfSync&filter=health%3DMissing",
            pick(&|a| status_of(a, "sync") == "OutOfSync" && status_of(a, "health") == "Missing"),
        ),
        (
            "filter=namespace%3Dns-1&filter=namespace%3Dns-2",
            pick(&|a| ["ns-1", "ns-2"].contains(&a["spec"]["destination"]["namespace"].as_str().unwrap())),
        ),
        (
            "filter=project%3Dteam-a",
            pick(&|a| a["spec"]["project"] == "team-a"),
        ),
        ("filter=cluster%3Dhttps://kubernetes.default.svc", pick(&|_| true)),
        ("filter=cluster%3Delsewhere", vec![]),
        (
            "filter=repo%3DHTTPS://git.example/org/repo-1",
            pick(&|a| {
                a["spec"]["source"]["repoURL"]
                    .as_str()
                    .unwrap()
                    .ends_with("repo-1.git")
            }),
        ),
        (
            "search=BLUE",
            pick(&|a| a["metadata"]["name"].as_str().unwrap().contains("blue")),
        ),
        (
            "search=-00",
            pick(&|a| a["metadata"]["name"].as_str().unwrap().contains("-00")),
        ),
        (
            "search=blue&selector=tier%3Dweb",
            pick(&|a| {
                a["metadata"]["name"].as_str().unwrap().contains("blue")
                    && a["metadata"]["labels"]["tier"] == "web"
            }),
        ),
        ("search=no-such-name", vec![]),
    ];
    for (query, expected) in cases {
        assert!(
            query.contains("elsewhere") || query.contains("no-such") || !expected.is_empty(),
            "{query}"
        );
        assert_eq!(
            all_pages(&server, &admin, &format!("limit=9&{query}")).await,
            expected,
            "{query}"
        );
    }
}

/// The facet counts of a reply, as field → value → count.
fn facets(list: &Value) -> BTreeMap<String, BTreeMap<String, i64>> {
    list["facets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let values = f["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| {
                    (
                        v["value"].as_str().unwrap().to_owned(),
                        v["count"].as_i64().unwrap(),
                    )
                })
                .collect();
            (f["field"].as_str().unwrap().to_owned(), values)
        })
        .collect()
}

#[tokio::test]
async fn facets_count_what_the_caller_may_see_with_the_other_filters_applied() {
    let server = open(Clock::system()).await;
    let all = everything();
    let count = |pred: &dyn Fn(&Value) -> bool, value: &dyn Fn(&Value) -> String| {
        let mut out: BTreeMap<String, i64> = BTreeMap::new();
        for a in all.values().filter(|a| pred(a)) {
            *out.entry(value(a)).or_default() += 1;
        }
        out
    };
    let health = |a: &Value| status_of(a, "health");
    let project = |a: &Value| a["spec"]["project"].as_str().unwrap().to_owned();
    for (user, sees) in [("admin", None), ("alice", Some("team-a"))] {
        let token = server.login(user);
        let visible = |a: &Value| sees.is_none_or(|p| a["spec"]["project"] == p);
        let (status, list) = server
            .rest(
                "GET",
                "/api/v1/applications?limit=5&facets=health,project&filter=health%3DHealthy",
                &token,
                Value::Null,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{list}");
        let got = facets(&list);
        // health's counts leave its own filter out; project's apply it.
        assert_eq!(got["health"], count(&|a| visible(a), &health), "{user}");
        assert_eq!(
            got["project"],
            count(&|a| visible(a) && health(a) == "Healthy", &project),
            "{user}"
        );
        if sees.is_some() {
            assert!(
                !got["project"].contains_key("default"),
                "a count of what alice may not see"
            );
        }
        assert_eq!(names(&list).len(), 5);
    }
}

#[tokio::test]
async fn a_continue_token_outlives_changes_and_refuses_misuse() {
    let clock = Clock::paused();
    let server = open(clock.clone()).await;
    let admin = server.login("admin");
    let (_, first) = server
        .rest(
            "GET",
            "/api/v1/applications?limit=10&sort=name",
            &admin,
            Value::Null,
        )
        .await;
    let token = first["metadata"]["continue"].as_str().unwrap().to_owned();
    let last = names(&first).pop().unwrap();

    // Applications before and after the cut come and go: the next page starts right after it.
    let registry = &server.server.app.registry;
    let first_name = names(&first)[0].clone();
    registry
        .apply(vec![Change::Delete {
            key: Key::new(Kind::Application, "argocd", &first_name),
            expect: None,
        }])
        .await
        .unwrap();
    let mut early = app(0);
    early["metadata"]["name"] = json!("aaa-new");
    registry
        .apply(vec![Change::Create {
            key: Key::new(Kind::Application, "argocd", "aaa-new"),
            value: early,
        }])
        .await
        .unwrap();
    let (status, second) = server
        .rest(
            "GET",
            &format!("/api/v1/applications?limit=10&sort=name&continue={token}"),
            &admin,
            Value::Null,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{second}");
    let mut expected: Vec<String> = everything().into_keys().filter(|n| *n > last).collect();
    expected.truncate(10);
    assert_eq!(names(&second), expected);

    let refused = |query: String, needle: &'static str| {
        let server = &server;
        let admin = admin.clone();
        async move {
            let (status, body) = server
                .rest(
                    "GET",
                    &format!("/api/v1/applications?{query}"),
                    &admin,
                    Value::Null,
                )
                .await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
            let message = body["message"].as_str().unwrap_or_default().to_owned();
            assert!(message.contains(needle), "{query}: {message}");
        }
    };
    let mut altered = token.clone().into_bytes();
    let at = altered.len() / 2;
    altered[at] = if altered[at] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    refused(
        format!("limit=10&sort=name&continue={altered}"),
        "not one this server issued",
    )
    .await;
    refused(format!("limit=10&sort=created&continue={token}"), "another query").await;
    refused(
        format!("limit=10&filter=health%3DDegraded&continue={token}"),
        "another query",
    )
    .await;
    refused("filter=colour%3Dred".into(), "unknown filter field \"colour\"").await;
    refused("filter=health".into(), "not of the form field=value").await;
    refused("facets=project,colour".into(), "unknown facet field \"colour\"").await;
    refused("sort=size".into(), "unknown sort \"size\"").await;
    refused("limit=-1".into(), "out of range").await;
    // The same token, a different page size: still the same query.
    let (status, _) = server
        .rest(
            "GET",
            &format!("/api/v1/applications?limit=3&sort=name&continue={token}"),
            &admin,
            Value::Null,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    clock.advance(std::time::Duration::from_secs(15 * 60));
    refused(format!("limit=10&sort=name&continue={token}"), "expired").await;
}

#[tokio::test]
async fn grpc_pages_carry_the_continue_token_and_the_facets() {
    let server = open(Clock::system()).await;
    let admin = server.login("admin");
    let schema = Schema::get();
    let query = schema.message("application.ApplicationQuery").unwrap();
    let list_type = schema
        .message("github.com.argoproj.argo_cd.v3.pkg.apis.application.v1alpha1.ApplicationList")
        .unwrap();
    let request = schema
        .encode(
            &query,
            &json!({"limit": 7, "sort": "-name", "filter": ["project=team-a"], "facets": ["sync"]}),
        )
        .unwrap();
    let (code, message, bytes) = server
        .grpc("/application.ApplicationService/List", &admin, &request)
        .await;
    assert_eq!(code, "0", "{message}");
    let list = schema.decode(&list_type, &bytes).unwrap();
    let mut expected: Vec<String> = everything()
        .into_iter()
        .filter(|(_, a)| a["spec"]["project"] == "team-a")
        .map(|(n, _)| n)
        .collect();
    expected.reverse();
    expected.truncate(7);
    assert_eq!(names(&list), expected);
    assert!(
        !list["metadata"]["continue"].as_str().unwrap().is_empty(),
        "{}",
        list["metadata"]
    );
    assert_eq!(facets(&list)["sync"].values().sum::<i64>(), (APPS / 4) as i64);

    let bad = schema.encode(&query, &json!({"filter": ["colour=red"]})).unwrap();
    let (code, message, _) = server
        .grpc("/application.ApplicationService/List", &admin, &bad)
        .await;
    assert_eq!(code, "3", "INVALID_ARGUMENT");
    assert!(message.contains("unknown filter field"), "{message}");
}
