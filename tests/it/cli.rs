//! The CLI against a real server in each transport mode.

use crate::support::{TestServer, cli};

const VERSION: &str = concat!("v3.4.0+tiphys.", env!("CARGO_PKG_VERSION"));

#[test]
fn version_over_native_grpc_and_grpc_web_with_the_servers_certificate() {
    let server = TestServer::start(&[]);
    let addr = format!("localhost:{}", server.port);
    let ca = server.ca();
    let ca = ca.to_str().unwrap();
    for extra in [&[][..], &["--grpc-web"][..]] {
        let mut args = vec!["version", "--server", &addr, "--server-crt", ca, "-o", "json"];
        args.extend_from_slice(extra);
        let (ok, out, err) = cli(&args);
        assert!(ok, "{extra:?}: {err}");
        let json: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(json["server"]["Version"], VERSION);
        assert_eq!(json["server"]["ArgoCDAPI"], "v3.4.0", "{json}");
        assert_eq!(json["client"]["ArgoCDAPI"], "v3.4.0", "{json}");
        assert!(!err.contains("gRPC-Web instead"), "no fallback needed: {err}");
    }
    let (ok, _, err) = cli(&["version", "--server", &addr]);
    assert!(!ok);
    assert!(
        err.contains("--server-crt") && err.contains("--insecure"),
        "{err}"
    );
}

#[test]
fn version_over_h2c_and_grpc_web_under_a_root_path() {
    let server = TestServer::start(&["--insecure", "--rootpath", "/argocd"]);
    let addr = format!("127.0.0.1:{}", server.port);
    let (ok, out, err) = cli(&["version", "--server", &addr, "--plaintext", "-o", "short"]);
    assert!(ok, "{err}");
    assert!(out.contains(&format!("tiphys-server: {VERSION}")), "{out}");
    let (ok, out, err) = cli(&[
        "version",
        "--server",
        &addr,
        "--plaintext",
        "--grpc-web-root-path",
        "/argocd",
        "-o",
        "short",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains(&format!("tiphys-server: {VERSION}")), "{out}");
}

#[test]
fn client_version_needs_no_server_and_a_missing_server_is_explained() {
    let (ok, out, _) = cli(&["version", "--client"]);
    let own = concat!("v", env!("CARGO_PKG_VERSION"));
    assert!(
        ok && out.starts_with(&format!("tiphys: {own}\n  ArgoCDAPI: v3.4.0\n")),
        "{out}"
    );
    let (ok, _, err) = cli(&["version"]);
    assert!(!ok && err.contains("--server"), "{err}");
}
