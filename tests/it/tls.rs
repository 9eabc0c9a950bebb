//! Certificates: generated and reused, renewed before expiry, RSA and ECDSA
//! with TLS 1.2 and 1.3, hot reload under an open connection, bad files.

use std::time::{Duration, Instant};

use crate::support::client::{self, Proto, get, tls_config, tls_connect};
use crate::support::{TestServer, write_cert};

async fn served_leaf(server: &TestServer) -> Vec<u8> {
    tls_connect(server.addr(), tls_config(&[b"h2"], rustls::ALL_VERSIONS))
        .await
        .unwrap()
        .1
}

fn not_after_days(der: &[u8]) -> i64 {
    let (_, cert) = x509_parser::parse_x509_certificate(der).unwrap();
    (cert.validity().not_after.timestamp() - jiff::Timestamp::now().as_second()) / 86400
}

#[tokio::test]
async fn self_signed_certificate_is_generated_once_and_reused() {
    let data = tempfile::tempdir().unwrap();
    let data_arg = data.path().to_str().unwrap().to_owned();
    let mut first = TestServer::start(&["--data-dir", &data_arg]);
    let leaf = served_leaf(&first).await;
    assert!(not_after_days(&leaf) > 360, "valid for a year");
    let (_, cert) = x509_parser::parse_x509_certificate(&leaf).unwrap();
    let san = format!("{:?}", cert.subject_alternative_name().unwrap().unwrap().value);
    assert!(
        san.contains("\"localhost\"") && san.contains("[127, 0, 0, 1]"),
        "{san}"
    );
    assert!(first.terminate().success());
    let key_mode = std::fs::metadata(data.path().join("tls/tls.key")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&key_mode.permissions()) & 0o077,
        0,
        "key is private"
    );

    let second = TestServer::start(&["--data-dir", &data_arg]);
    assert_eq!(
        served_leaf(&second).await,
        leaf,
        "the same certificate after a restart"
    );
}

#[tokio::test]
async fn an_expiring_self_signed_certificate_is_renewed() {
    let data = tempfile::tempdir().unwrap();
    let tls_dir = data.path().join("tls");
    std::fs::create_dir_all(&tls_dir).unwrap();
    let mut params =
        rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    params.not_after = (std::time::SystemTime::now() + Duration::from_secs(3 * 86400)).into();
    let key = rcgen::KeyPair::generate().unwrap();
    let old = params.self_signed(&key).unwrap();
    std::fs::write(tls_dir.join("tls.crt"), old.pem()).unwrap();
    std::fs::write(tls_dir.join("tls.key"), key.serialize_pem()).unwrap();

    let server = TestServer::start(&["--data-dir", data.path().to_str().unwrap()]);
    let leaf = served_leaf(&server).await;
    assert_ne!(leaf, old.der().to_vec());
    assert!(not_after_days(&leaf) > 300);
}

#[tokio::test]
async fn rsa_and_ecdsa_certificates_work_with_tls_1_2_and_1_3() {
    for rsa in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = write_cert(dir.path(), "server", rsa);
        let server = TestServer::start(&[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ]);
        for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
            let (stream, leaf) = tls_connect(server.addr(), tls_config(&[b"h2"], &[version]))
                .await
                .unwrap();
            assert_eq!(leaf, pem_der(&cert), "rsa={rsa}");
            assert_eq!(stream.get_ref().1.protocol_version(), Some(version.version));
            let mut conn = client::handshake(hyper_util::rt::TokioIo::new(stream), Proto::H2).await;
            let r = conn
                .send(get(&format!("https://127.0.0.1:{}/api/version", server.port)))
                .await;
            assert_eq!(r.status, 200, "rsa={rsa} {version:?}");
        }
    }
}

#[tokio::test]
async fn tls_min_version_1_3_refuses_tls_1_2() {
    let server = TestServer::start(&["--tlsminversion", "1.3"]);
    assert!(
        tls_connect(server.addr(), tls_config(&[b"h2"], &[&rustls::version::TLS12]))
            .await
            .is_err()
    );
    assert!(
        tls_connect(server.addr(), tls_config(&[b"h2"], &[&rustls::version::TLS13]))
            .await
            .is_ok()
    );
}

fn pem_der(path: &std::path::Path) -> Vec<u8> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_file(path).unwrap().to_vec()
}

#[tokio::test]
async fn certificate_files_are_hot_reloaded_without_dropping_connections() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = write_cert(dir.path(), "live", false);
    let server = TestServer::start(&[
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    let base = format!("https://127.0.0.1:{}", server.port);
    let first = pem_der(&cert);
    let mut open = client::connect(server.addr(), true, Proto::H2).await;
    assert_eq!(open.send(get(&format!("{base}/api/version"))).await.status, 200);

    // Replace both files the way a secret mount does: new files renamed over the old.
    let staging = tempfile::tempdir().unwrap();
    let (new_cert, new_key) = write_cert(staging.path(), "rotated", false);
    std::fs::rename(&new_key, &key).unwrap();
    std::fs::rename(&new_cert, &cert).unwrap();
    let second = pem_der(&cert);
    assert_ne!(first, second);

    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if served_leaf(&server).await == second {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "new certificate not served within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        open.send(get(&format!("{base}/api/version"))).await.status,
        200,
        "the open connection survives"
    );

    // A broken replacement never takes effect.
    std::fs::write(&cert, "not a certificate").unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(served_leaf(&server).await, second);
    assert!(
        server.logs().contains("new TLS certificate rejected"),
        "{}",
        server.logs()
    );
}

fn start_fails(args: &[&str]) -> String {
    match TestServer::spawn(tempfile::tempdir().unwrap(), args) {
        Ok(_) => panic!("server started with {args:?}"),
        Err(log) => log,
    }
}

#[test]
fn unreadable_or_mismatched_certificate_files_stop_startup_with_the_file_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let (cert_a, key_a) = write_cert(dir.path(), "a", false);
    let (_, key_b) = write_cert(dir.path(), "b", false);
    let missing = dir.path().join("missing.crt");

    let log = start_fails(&[
        "--tls-cert",
        missing.to_str().unwrap(),
        "--tls-key",
        key_a.to_str().unwrap(),
    ]);
    assert!(
        log.contains("missing.crt") && log.contains("No such file"),
        "{log}"
    );
    assert_eq!(log.matches("No such file").count(), 1, "the cause once: {log}");

    // An encrypted key is named as such, not as "no usable key".
    let encrypted = dir.path().join("encrypted.key");
    std::fs::write(
        &encrypted,
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIFHzBJBgkqhkiG9w0BBQ0wPDAbBgkqhkiG9w0BBQww\n-----END ENCRYPTED PRIVATE KEY-----\n",
    )
    .unwrap();
    let log = start_fails(&[
        "--tls-cert",
        cert_a.to_str().unwrap(),
        "--tls-key",
        encrypted.to_str().unwrap(),
    ]);
    assert!(
        log.contains("encrypted.key") && log.contains("is an encrypted private key"),
        "{log}"
    );

    let log = start_fails(&[
        "--tls-cert",
        cert_a.to_str().unwrap(),
        "--tls-key",
        key_b.to_str().unwrap(),
    ]);
    assert!(
        log.contains("a.crt") && log.contains("b.key") && log.contains("do not belong together"),
        "{log}"
    );

    let garbage = dir.path().join("garbage.crt");
    std::fs::write(&garbage, "hello").unwrap();
    let log = start_fails(&[
        "--tls-cert",
        garbage.to_str().unwrap(),
        "--tls-key",
        key_a.to_str().unwrap(),
    ]);
    assert!(
        log.contains("garbage.crt") && log.contains("no PEM CERTIFICATE"),
        "{log}"
    );

    let log = start_fails(&[
        "--tls-cert",
        cert_a.to_str().unwrap(),
        "--tls-key",
        cert_a.to_str().unwrap(),
    ]);
    assert!(log.contains("a.crt") && log.contains("private key"), "{log}");

    let log = start_fails(&["--tlsciphers", "TLS_NOT_A_CIPHER"]);
    assert!(log.contains("TLS_NOT_A_CIPHER"), "{log}");
}

/// A certificate outside its validity is served (clients decide) but said, at start and at each
/// reload.
#[tokio::test]
async fn an_expired_certificate_is_warned_about_at_start_and_at_each_reload() {
    let dir = tempfile::tempdir().unwrap();
    let write_expired = |stem: &str| {
        let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let cert = params.self_signed(&key).unwrap();
        let (cert_path, key_path) = (
            dir.path().join(format!("{stem}.crt")),
            dir.path().join(format!("{stem}.key")),
        );
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        (cert_path, key_path)
    };
    let (cert, key) = write_expired("old");
    let server = TestServer::start(&[
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    let warned = |server: &TestServer| server.logs().matches("the TLS certificate has expired").count();
    assert_eq!(warned(&server), 1, "{}", server.logs());
    // Another expired pair renamed over the files: reloaded, and warned about again.
    let (new_cert, new_key) = write_expired("older");
    std::fs::rename(&new_key, &key).unwrap();
    std::fs::rename(&new_cert, &cert).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while warned(&server) < 2 {
        assert!(
            Instant::now() < deadline,
            "no warning at the reload: {}",
            server.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        server.logs().contains("TLS certificate reloaded"),
        "{}",
        server.logs()
    );
}
