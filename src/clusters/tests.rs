//! The cluster client against real sockets on loopback: a TLS server whose certificate the
//! cluster's CA does not sign, and a port nobody listens on. (Answers of a real API server are
//! in tests/e2e/test_cluster_state.py.)

use std::sync::Arc;

use base64::Engine as _;
use serde_json::json;

use super::*;

/// A TLS server on loopback with a self-signed certificate for 127.0.0.1, completing
/// handshakes with whoever trusts it. Returns its URL.
async fn tls_server() -> String {
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let key = rustls_pki_types::PrivateKeyDer::Pkcs8(signing_key.serialize_der().into());
    let config =
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key)
            .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        for _ in 0..16 {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let _ = acceptor.accept(tcp).await;
            });
        }
    });
    format!("https://127.0.0.1:{port}")
}

fn other_ca() -> String {
    let other = rcgen::generate_simple_self_signed(vec!["elsewhere".to_owned()]).unwrap();
    base64::engine::general_purpose::STANDARD.encode(other.cert.pem())
}

fn clusters() -> Clusters {
    Clusters::new(
        Limits {
            timeout: Duration::from_secs(5),
            ..Limits::default()
        },
        None,
    )
}

#[tokio::test]
async fn a_certificate_from_another_ca_is_a_certificate_failure() {
    let server = tls_server().await;
    let target = Target::read(&json!({"server": server, "config": {
        "bearerToken": "secret-token-1", "tlsClientConfig": {"caData": other_ca()}
    }}))
    .unwrap();
    let err = clusters().check(&target, &[]).await.unwrap_err();
    assert!(matches!(err, ClusterError::Certificate(_)), "{err:?}");
    assert!(err.to_string().contains("invalid peer certificate"), "{err}");
    assert!(!err.to_string().contains("secret-token-1"), "{err}");
}

#[tokio::test]
async fn a_closed_port_is_a_refused_connection() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let target = Target::read(&json!({"server": format!("https://127.0.0.1:{port}"), "config": {
        "tlsClientConfig": {"insecure": true}
    }}))
    .unwrap();
    let err = clusters().check(&target, &[]).await.unwrap_err();
    assert!(matches!(err, ClusterError::Refused(_)), "{err:?}");
}

#[tokio::test]
async fn without_kube_or_a_pod_the_in_cluster_destination_is_unknown() {
    let target = Target::read(&json!({"server": IN_CLUSTER_SERVER})).unwrap();
    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
        return; // running in a pod: the in-cluster configuration exists
    }
    let err = clusters().check(&target, &[]).await.unwrap_err();
    assert!(matches!(err, ClusterError::NoInCluster(_)), "{err:?}");
}
