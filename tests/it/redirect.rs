//! The plaintext redirect on the TLS port is never an open redirect (issue 20, item 6): its
//! `Location` comes from the external URL (`url` in argocd-cm) when one is set, and otherwise
//! names only a host of the TLS certificate or of `--redirect-hosts`; a forged Host gets 400.

use crate::support::TestServer;
use crate::support::client::{Proto, connect, request};
use bytes::Bytes;
use http_body_util::Full;

/// A plaintext GET of `/x?y=1` with `host`: status, Location and body.
async fn plain_get(server: &TestServer, host: &str) -> (u16, Option<String>, String) {
    let mut conn = connect(server.addr(), false, Proto::H1).await;
    let req = request("GET", &format!("http://127.0.0.1:{}/x?y=1", server.port))
        .header("host", host)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let r = conn.send(req).await;
    (r.status, r.header("location").map(str::to_owned), r.text())
}

const FOREIGN: &str = "the Host header names a host this server does not answer for";

#[tokio::test]
async fn redirect_only_to_the_certificates_names_or_redirect_hosts() {
    let server = TestServer::start(&["--redirect-hosts", "cd.example.test,*.apps.example.test"]);
    let port = server.port;
    for (host, location) in [
        (
            format!("127.0.0.1:{port}"),
            format!("https://127.0.0.1:{port}/x?y=1"),
        ),
        (
            format!("LocalHost:{port}"),
            format!("https://LocalHost:{port}/x?y=1"),
        ),
        (
            "cd.example.test:8443".to_owned(),
            "https://cd.example.test:8443/x?y=1".to_owned(),
        ),
        (
            "a.apps.example.test".to_owned(),
            "https://a.apps.example.test/x?y=1".to_owned(),
        ),
    ] {
        let (status, loc, _) = plain_get(&server, &host).await;
        assert_eq!((status, loc.as_deref()), (307, Some(location.as_str())), "{host}");
    }
    for forged in [
        "evil.example",
        "evil.example:443",
        "cd.example.test.evil.example",
        "localhost.evil.example",
        "a.b.apps.example.test",
    ] {
        let (status, loc, body) = plain_get(&server, forged).await;
        assert_eq!((status, loc), (400, None), "{forged}: {body}");
        assert!(body.contains(FOREIGN), "{forged}: {body}");
        assert!(!body.contains("evil"), "{forged}: {body}");
    }
}

#[tokio::test]
async fn redirect_uses_the_external_url_of_argocd_cm() {
    let config = tempfile::tempdir().unwrap();
    std::fs::write(
        config.path().join("argocd-cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-cm\ndata:\n  url: https://cd.example.com:8443/\n",
    )
    .unwrap();
    let server = TestServer::start(&["--config-dir", config.path().to_str().unwrap()]);
    for host in ["evil.example", "127.0.0.1", "cd.example.com"] {
        let (status, loc, _) = plain_get(&server, host).await;
        assert_eq!(
            (status, loc.as_deref()),
            (307, Some("https://cd.example.com:8443/x?y=1")),
            "{host}"
        );
    }
}
