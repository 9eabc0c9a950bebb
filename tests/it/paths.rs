//! `--basehref`, `--rootpath` and `--staticassets` with upstream's meaning.

use bytes::Bytes;
use http_body_util::Full;

use crate::support::TestServer;
use crate::support::client::{Proto, connect, get, request};

fn html(url: &str) -> http::Request<Full<Bytes>> {
    request("GET", url)
        .header("accept", "text/html")
        .body(Full::new(Bytes::new()))
        .unwrap()
}

#[tokio::test]
async fn basehref_only_rewrites_the_ui_base_tag() {
    let server = TestServer::start(&["--insecure", "--basehref", "/argocd"]);
    let base = format!("http://127.0.0.1:{}", server.port);
    let mut conn = connect(server.addr(), false, Proto::H1).await;
    let index = conn.send(html(&format!("{base}/applications"))).await;
    assert!(
        index.text().contains("<base href=\"/argocd/\""),
        "{}",
        index.text()
    );
    assert_eq!(
        conn.send(get(&format!("{base}/api/version"))).await.status,
        200,
        "still served at the root"
    );
}

#[tokio::test]
async fn rootpath_serves_everything_under_the_prefix_and_health_at_the_root() {
    let server = TestServer::start(&["--rootpath", "/argocd/", "--basehref", "/other"]);
    let base = format!("https://127.0.0.1:{}", server.port);
    let mut conn = connect(server.addr(), true, Proto::H2).await;
    assert_eq!(
        conn.send(get(&format!("{base}/argocd/api/version"))).await.status,
        200
    );
    let index = conn.send(html(&format!("{base}/argocd/applications/x"))).await;
    assert!(
        index.text().contains("<base href=\"/argocd/\""),
        "rootpath forces the base href"
    );
    assert_eq!(
        conn.send(get(&format!("{base}/api/version"))).await.status,
        404,
        "outside the root"
    );
    assert_eq!(conn.send(get(&format!("{base}/healthz"))).await.text(), "ok\n");
    assert!(server.logs().contains("--basehref and --rootpath conflict"));

    // The plaintext redirect keeps the prefix exactly once.
    let mut plain = connect(server.addr(), false, Proto::H1).await;
    let r = plain
        .send(get(&format!("http://127.0.0.1:{}/applications?x=1", server.port)))
        .await;
    assert_eq!(r.status, 307);
    assert_eq!(
        r.header("location").unwrap(),
        format!("https://127.0.0.1:{}/argocd/applications?x=1", server.port)
    );
}

#[tokio::test]
async fn staticassets_serves_another_ui_build_from_disk() {
    let ui = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ui.path().join("assets")).unwrap();
    std::fs::write(
        ui.path().join("index.html"),
        "<html><head><base href=\"/\"></head><body>custom ui</body></html>",
    )
    .unwrap();
    std::fs::write(ui.path().join("assets/app-ABCDEF12.js"), "console.log(1)").unwrap();
    let secret = ui.path().parent().unwrap().join("outside-secret.txt");
    let server = TestServer::start(&["--insecure", "--staticassets", ui.path().to_str().unwrap()]);
    let base = format!("http://127.0.0.1:{}", server.port);
    let mut conn = connect(server.addr(), false, Proto::H1).await;
    assert!(
        conn.send(html(&format!("{base}/settings")))
            .await
            .text()
            .contains("custom ui")
    );
    let js = conn.send(get(&format!("{base}/assets/app-ABCDEF12.js"))).await;
    assert_eq!(js.text(), "console.log(1)");
    assert!(js.header("content-type").unwrap().contains("javascript"));
    assert!(js.header("cache-control").unwrap().contains("immutable"));
    let escape = conn
        .send(get(&format!("{base}/assets/%2e%2e/%2e%2e/{}", secret.display())))
        .await;
    assert_eq!(escape.status, 404);
}

#[test]
fn staticassets_without_an_index_is_a_startup_error() {
    let empty = tempfile::tempdir().unwrap();
    let Err(log) = TestServer::spawn(
        tempfile::tempdir().unwrap(),
        &["--staticassets", empty.path().to_str().unwrap()],
    ) else {
        panic!("started without an index.html");
    };
    assert!(
        log.contains("--staticassets") && log.contains("index.html"),
        "{log}"
    );
}
