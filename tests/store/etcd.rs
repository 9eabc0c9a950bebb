//! What only the etcd backend has: prefixes shared with others, the watch, failover when the
//! leader dies, and the errors of a bad start.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tiphys::store::etcd::{Change, Changes, EtcdWatch};
use tiphys::store::{EtcdOptions, EtcdStore, Expect, Op, Store, StoreError};

use crate::contract::{delete, keys, put};
use crate::etcd_cluster::{CLIENT_CN, EtcdCluster, EtcdTls};

async fn raw_client(cluster: &EtcdCluster) -> etcd_client::Client {
    etcd_client::Client::connect(cluster.endpoints(), None)
        .await
        .unwrap()
}

async fn next(watch: &mut EtcdWatch) -> Result<Changes, StoreError> {
    tokio::time::timeout(Duration::from_secs(20), watch.next())
        .await
        .expect("the watch delivered nothing within 20 s")
}

#[tokio::test]
async fn prefixes_keep_stores_apart() {
    let cluster = EtcdCluster::start(3);
    let mut raw = raw_client(&cluster).await;
    for foreign in ["/tiphys", "/tiphys0", "/tiphys-other/x", "/elsewhere/x"] {
        raw.put(foreign, "foreign", None).await.unwrap();
    }
    let ours = crate::connect(&cluster, "/tiphys/").await;
    let theirs = crate::connect(&cluster, "/tiphys-other/").await;
    ours.commit(vec![
        put("x", "ours", Expect::Absent),
        put("a/1", "1", Expect::Absent),
    ])
    .await
    .unwrap();
    // "x" exists under the other prefix, yet is absent for this store.
    assert_eq!(theirs.get("x").await.unwrap().unwrap().value, b"foreign");
    theirs
        .commit(vec![put("y", "theirs", Expect::Absent)])
        .await
        .unwrap();
    assert_eq!(keys(ours.list("").await.unwrap()), ["a/1", "x"]);
    assert_eq!(keys(theirs.list("").await.unwrap()), ["x", "y"]);
    assert_eq!(ours.get("y").await.unwrap(), None);
    ours.commit(vec![delete("x", Expect::Any), delete("y", Expect::Any)])
        .await
        .unwrap();
    assert_eq!(theirs.get("x").await.unwrap().unwrap().value, b"foreign");
    assert_eq!(theirs.get("y").await.unwrap().unwrap().value, b"theirs");
    for foreign in ["/tiphys", "/tiphys0", "/elsewhere/x"] {
        let got = raw.get(foreign, None).await.unwrap();
        assert_eq!(got.kvs()[0].value(), b"foreign", "{foreign}");
    }
    let got = raw.get("/tiphys/a/1", None).await.unwrap();
    assert_eq!(got.kvs()[0].value(), b"1");
}

#[tokio::test]
async fn the_watch_delivers_another_clients_writes_in_order() {
    let cluster = EtcdCluster::start(3);
    let reader = crate::connect(&cluster, "/tiphys/").await;
    let writer = crate::connect(&cluster, "/tiphys/").await;
    let mut raw = raw_client(&cluster).await;
    let from = reader.revision().await.unwrap() + 1;
    let mut watch = reader.watch_from(from);
    let mut expected = Vec::new();
    for i in 0..20 {
        let ops = if i % 5 == 4 {
            vec![
                delete(&format!("k{}", i - 1), Expect::Any),
                put("last", &i.to_string(), Expect::Any),
            ]
        } else {
            vec![
                put(&format!("k{i}"), "v", Expect::Absent),
                put("last", &i.to_string(), Expect::Any),
            ]
        };
        // Writes outside the prefix are not delivered.
        raw.put("/tiphys0", "foreign", None).await.unwrap();
        let at = writer.commit(ops.clone()).await.unwrap();
        expected.push((at, ops));
    }
    for (at, ops) in expected {
        let changes = next(&mut watch).await.unwrap();
        assert_eq!(changes.revision, at);
        let got: Vec<(String, Option<Vec<u8>>)> = changes
            .changes
            .into_iter()
            .map(|Change { key, entry }| (key, entry.map(|e| e.value)))
            .collect();
        let want: Vec<(String, Option<Vec<u8>>)> = ops
            .into_iter()
            .filter_map(|op| match op {
                Op::Put { key, value, .. } => Some((key, Some(value))),
                Op::Delete { key, .. } => Some((key, None)),
                Op::Check { .. } | Op::Unchanged { .. } => None,
            })
            .collect();
        assert_eq!(got, want, "revision {at}");
    }
    let entry = reader.get("last").await.unwrap().unwrap();
    let change = reader.watch_from(entry.mod_revision).next().await.unwrap();
    assert_eq!(change.changes[1].entry.as_ref(), Some(&entry));
}

#[tokio::test]
async fn a_watch_below_compaction_is_told_to_list_again() {
    let cluster = EtcdCluster::start(3);
    let store = crate::connect(&cluster, "/tiphys/").await;
    let from = store.revision().await.unwrap() + 1;
    for i in 0..5 {
        store
            .commit(vec![put("k", &i.to_string(), Expect::Any)])
            .await
            .unwrap();
    }
    let now = store.revision().await.unwrap();
    let mut raw = raw_client(&cluster).await;
    raw.compact(i64::try_from(now).unwrap(), None).await.unwrap();
    let err = next(&mut store.watch_from(from)).await.unwrap_err();
    match err {
        StoreError::Compacted { requested, oldest } => assert_eq!((requested, oldest), (from, now)),
        other => panic!("expected Compacted, got {other:?}"),
    }
    // From the oldest kept revision on, the watch works.
    let mut watch = store.watch_from(now);
    assert_eq!(next(&mut watch).await.unwrap().revision, now);
    let at = store.commit(vec![put("k", "after", Expect::Any)]).await.unwrap();
    assert_eq!(next(&mut watch).await.unwrap().revision, at);
}

/// `kill -9` of the leader while conditional writes go on: no call fails, none takes longer
/// than the retry bound, every acknowledged write is there afterwards, and a watch sees each
/// one once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leaders_death_costs_latency_not_writes() {
    const WRITES: usize = 150;
    const KILL_AT: usize = 40;
    let cluster = Arc::new(Mutex::new(EtcdCluster::start(3)));
    let endpoints = cluster.lock().unwrap().endpoints();
    let store = EtcdStore::connect(EtcdOptions::new(endpoints)).await.unwrap();
    let from = store.revision().await.unwrap() + 1;
    let mut watch = store.watch_from(from);

    // The killer waits (bounded) for the writer to get going, then kills the leader.
    let written = Arc::new(AtomicUsize::new(0));
    let killer = {
        let (cluster, written) = (Arc::clone(&cluster), Arc::clone(&written));
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            while written.load(Ordering::SeqCst) < KILL_AT && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            let mut cluster = cluster.lock().unwrap();
            let leader = cluster.leader();
            cluster.kill(leader);
            leader
        })
    };

    let bound = EtcdOptions::new(Vec::new()).request_timeout + Duration::from_secs(1);
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut counter_rev = 0;
    for i in 0..WRITES {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the writer ran out of time"
        );
        let expect = if i == 0 {
            Expect::Absent
        } else {
            Expect::ModRevision(counter_rev)
        };
        let ops = vec![
            put(&format!("w/{i:04}"), &i.to_string(), Expect::Absent),
            put("counter", &i.to_string(), expect),
        ];
        let call = Instant::now();
        let result = store.commit(ops).await;
        let took = call.elapsed();
        slowest = slowest.max(took);
        counter_rev = result.unwrap_or_else(|e| panic!("write {i} failed after {took:?}: {e}"));
        assert!(took < bound, "write {i} took {took:?}");
        written.store(i + 1, Ordering::SeqCst);
    }
    let killed = killer.join().unwrap();
    eprintln!("killed member {killed}; the slowest write took {slowest:?}");

    // Every acknowledged write is there, with the last counter.
    let listed = store.list("w/").await.unwrap();
    assert_eq!(listed.len(), WRITES);
    let counter = store.get("counter").await.unwrap().unwrap();
    assert_eq!(
        (counter.value, counter.mod_revision),
        ((WRITES - 1).to_string().into_bytes(), counter_rev)
    );

    // The watch (which may have been on the killed member) saw each write once, in order.
    for i in 0..WRITES {
        let changes = next(&mut watch).await.unwrap();
        let key = &changes.changes[0].key;
        assert_eq!(key, &format!("w/{i:04}"), "at revision {}", changes.revision);
    }

    // The killed member comes back and catches up (read from it alone, without a quorum).
    let mut cluster = cluster.lock().unwrap();
    cluster.restart(killed);
    let last = (WRITES - 1).to_string();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = cluster.etcdctl_on(
            killed,
            &["get", "--consistency=s", "--print-value-only", "/tiphys/counter"],
        );
        if String::from_utf8_lossy(&out.stdout).trim() == last {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "member {killed} did not catch up: {out:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test]
async fn unreachable_endpoints_are_named_at_start() {
    let ports: Vec<u16> = (0..2)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect::<Vec<_>>()
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect();
    let endpoints: Vec<String> = ports.iter().map(|p| format!("http://127.0.0.1:{p}")).collect();
    let mut options = EtcdOptions::new(endpoints.clone());
    options.dial_timeout = Duration::from_secs(1);
    let started = Instant::now();
    let err = EtcdStore::connect(options).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    let message = err.to_string();
    assert!(
        message.starts_with(&format!("etcd at {} did not answer", endpoints.join(", "))),
        "{message}"
    );

    let err = EtcdStore::connect(EtcdOptions::new(Vec::new()))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "no etcd endpoint given");
}

#[tokio::test]
async fn wrong_credentials_are_refused_clearly() {
    let cluster = EtcdCluster::start(1);
    cluster.enable_auth("right");
    let options = |password: &str| {
        let mut options = EtcdOptions::new(cluster.endpoints());
        options.username = Some("root".to_owned());
        options.password = Some(password.to_owned());
        options
    };
    let err = EtcdStore::connect(options("wrong")).await.unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains(&format!(
            "etcd at {} refused the credentials",
            cluster.endpoints()[0]
        )),
        "{message}"
    );
    let store = EtcdStore::connect(options("right")).await.unwrap();
    let at = store.commit(vec![put("k", "v", Expect::Absent)]).await.unwrap();
    assert_eq!(store.get("k").await.unwrap().unwrap().mod_revision, at);

    // Without credentials, calls are denied by name rather than timing out.
    let mut anonymous = EtcdOptions::new(cluster.endpoints());
    anonymous.dial_timeout = Duration::from_secs(2);
    let err = EtcdStore::connect(anonymous).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "etcd at {} denied access: it requires authentication (give the etcd username and \
             password file)",
            cluster.endpoints()[0]
        )
    );
}

/// The watch's member dies (each of the two it may use, in turn): it reopens on another one
/// from the revision after the last it received, so no commit is skipped or repeated.
#[tokio::test]
async fn a_broken_watch_resumes_without_a_gap() {
    let mut cluster = EtcdCluster::start(3);
    let writer = crate::connect(&cluster, "/tiphys/").await;
    let mut options = EtcdOptions::new(cluster.endpoints()[..2].to_vec());
    options.prefix = "/tiphys/".to_owned();
    let reader = EtcdStore::connect(options).await.unwrap();
    let mut watch = reader.watch_from(writer.revision().await.unwrap() + 1);
    let (mut written, mut seen) = (Vec::new(), Vec::new());
    for member in 0..2 {
        for i in 0..5 {
            let op = put(&format!("m{member}/{i}"), "v", Expect::Absent);
            written.push(writer.commit(vec![op]).await.unwrap());
        }
        // Some of these changes are taken before the kill, the rest after it.
        for _ in 0..2 {
            seen.push(next(&mut watch).await.unwrap().revision);
        }
        cluster.kill(member);
        let op = put(&format!("dead{member}"), "v", Expect::Absent);
        written.push(writer.commit(vec![op]).await.unwrap());
        cluster.restart(member);
    }
    while seen.len() < written.len() {
        seen.push(next(&mut watch).await.unwrap().revision);
    }
    assert_eq!(seen, written);
}

/// Options for `cluster` with the TLS files given (a 3 s dial timeout).
fn tls_options(cluster: &EtcdCluster, ca: Option<&Path>, client: Option<(&Path, &Path)>) -> EtcdOptions {
    let mut options = EtcdOptions::new(cluster.endpoints());
    options.ca_cert = ca.map(Path::to_path_buf);
    options.client_cert = client.map(|(cert, _)| cert.to_path_buf());
    options.client_key = client.map(|(_, key)| key.to_path_buf());
    options.dial_timeout = Duration::from_secs(3);
    options
}

/// Reads, writes and the watch over TLS with a client certificate, on every member.
#[tokio::test]
async fn tls_with_a_client_certificate_reads_writes_and_watches() {
    let cluster = EtcdCluster::start_tls(3);
    assert!(
        cluster
            .endpoints()
            .iter()
            .all(|e| e.starts_with("https://127.0.0.1:"))
    );
    let tls = cluster.tls();
    let store = EtcdStore::connect(tls_options(&cluster, Some(&tls.ca), Some((&tls.cert, &tls.key))))
        .await
        .unwrap();
    let mut watch = store.watch_from(store.revision().await.unwrap() + 1);
    let at = store.commit(vec![put("k", "v", Expect::Absent)]).await.unwrap();
    assert_eq!(store.get("k").await.unwrap().unwrap().mod_revision, at);
    assert_eq!(next(&mut watch).await.unwrap().revision, at);
    // Each member on its own: all of them serve TLS with the same files.
    for endpoint in cluster.endpoints() {
        let mut options = tls_options(&cluster, Some(&tls.ca), Some((&tls.cert, &tls.key)));
        options.endpoints = vec![endpoint.clone()];
        let one = EtcdStore::connect(options).await.unwrap();
        assert_eq!(keys(one.list("").await.unwrap()), ["k"], "{endpoint}");
    }
    // etcdctl agrees: the value is in etcd, under the default prefix.
    let out = cluster.etcdctl(&["get", "/tiphys/k", "--print-value-only"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "v", "{out:?}");
}

/// Every kind of bad TLS material is refused at start with what to fix, naming the endpoint:
/// files before connecting, handshakes a member refuses (or that refuse the member) within the
/// dial timeout. Three members failing alike are named once, with the one cause.
#[tokio::test]
async fn bad_tls_material_is_refused_at_start_naming_the_endpoint_and_the_cause() {
    let cluster = EtcdCluster::start_tls(3);
    let tls = cluster.tls();
    let endpoints = cluster.endpoints().join(", ");
    let dir = tempfile::tempdir().unwrap();
    // A CA, server and client certificate of their own, which the cluster does not trust.
    let other = EtcdTls::generate(dir.path(), "other");
    let missing = dir.path().join("missing.pem");
    let not_pem = dir.path().join("not-pem.pem");
    std::fs::write(&not_pem, "hello, not a certificate\n").unwrap();
    let d = |p: &Path| p.display().to_string();
    let handshake = |cause: String| {
        format!("etcd at {endpoints} did not answer at start: TLS with {endpoints} failed: {cause} (")
    };
    let file = |what: String| format!("etcd at {endpoints}: {what}");
    let client = Some((tls.cert.as_path(), tls.key.as_path()));
    let cases: Vec<(&str, EtcdOptions, String)> = vec![
        (
            "a CA that did not sign the member's certificate",
            tls_options(&cluster, Some(&other.ca), client),
            handshake(format!(
                "the member's certificate is not signed by the etcd CA certificate {}",
                d(&other.ca)
            )),
        ),
        (
            "no CA: the system's roots",
            tls_options(&cluster, None, client),
            handshake(
                "the member's certificate is not signed by a CA the system trusts; give the etcd CA \
                 certificate"
                    .to_owned(),
            ),
        ),
        (
            "no client certificate",
            tls_options(&cluster, Some(&tls.ca), None),
            handshake(
                "the member requires a client certificate; give the etcd client certificate and key"
                    .to_owned(),
            ),
        ),
        (
            "a client certificate of another CA",
            tls_options(&cluster, Some(&tls.ca), Some((&other.cert, &other.key))),
            handshake(format!(
                "the member refused the client certificate {}; is it signed by a CA in the member's \
                 --trusted-ca-file, and still valid?",
                d(&other.cert)
            )),
        ),
        (
            "a key of another certificate",
            tls_options(&cluster, Some(&tls.ca), Some((&tls.cert, &other.key))),
            file(format!(
                "the client key {} does not belong to the client certificate {}",
                d(&other.key),
                d(&tls.cert)
            )),
        ),
        (
            "no client certificate file",
            tls_options(&cluster, Some(&tls.ca), Some((&missing, &tls.key))),
            file(format!(
                "cannot read the client certificate {}: No such file or directory (os error 2)",
                d(&missing)
            )),
        ),
        (
            "a client certificate that is not PEM",
            tls_options(&cluster, Some(&tls.ca), Some((&not_pem, &tls.key))),
            file(format!("the client certificate {} is not PEM", d(&not_pem))),
        ),
        (
            "a client key that is not PEM",
            tls_options(&cluster, Some(&tls.ca), Some((&tls.cert, &not_pem))),
            file(format!("the client key {} is not PEM", d(&not_pem))),
        ),
        (
            "a CA that is not PEM",
            tls_options(&cluster, Some(&not_pem), client),
            file(format!("the CA certificate {} is not PEM", d(&not_pem))),
        ),
        (
            "the key given as the certificate",
            tls_options(&cluster, Some(&tls.ca), Some((&tls.key, &tls.key))),
            file(format!(
                "the client certificate {} holds no PEM CERTIFICATE block",
                d(&tls.key)
            )),
        ),
        (
            "the certificate given as the key",
            tls_options(&cluster, Some(&tls.ca), Some((&tls.cert, &tls.cert))),
            file(format!(
                "the client key {} holds no PEM private key",
                d(&tls.cert)
            )),
        ),
        (
            "the client key given as the CA",
            tls_options(&cluster, Some(&tls.key), client),
            file(format!(
                "the CA certificate {} holds no PEM CERTIFICATE block",
                d(&tls.key)
            )),
        ),
    ];
    for (case, options, expected) in cases {
        let started = Instant::now();
        let err = EtcdStore::connect(options).await.unwrap_err();
        let elapsed = started.elapsed();
        let message = err.to_string();
        assert!(
            message.starts_with(&expected),
            "{case}:\n{message}\nexpected:\n{expected}"
        );
        if expected.contains("did not answer") {
            assert!(matches!(err, StoreError::Unavailable(_)), "{case}: {err:?}");
            // The dial timeout (3 s), then one handshake of its own per member.
            assert!(elapsed < Duration::from_secs(10), "{case}: {elapsed:?}");
        } else {
            // Refused before connecting, not retried.
            assert!(matches!(err, StoreError::Invalid(_)), "{case}: {err:?}");
            assert!(elapsed < Duration::from_secs(1), "{case}: {elapsed:?}");
        }
    }
}

/// etcd's authentication over TLS: the password is checked (the client certificate alone, whose
/// CN names no etcd user, does not get in), and the right one reads and writes.
#[tokio::test]
async fn etcd_auth_and_a_client_certificate_work_together() {
    let cluster = EtcdCluster::start_tls(1);
    cluster.enable_auth("right");
    let tls = cluster.tls();
    let endpoint = &cluster.endpoints()[0];
    let options = |password: Option<&str>| {
        let mut options = tls_options(&cluster, Some(&tls.ca), Some((&tls.cert, &tls.key)));
        options.username = password.map(|_| "root".to_owned());
        options.password = password.map(str::to_owned);
        options
    };
    let store = EtcdStore::connect(options(Some("right"))).await.unwrap();
    let at = store.commit(vec![put("k", "v", Expect::Absent)]).await.unwrap();
    assert_eq!(store.get("k").await.unwrap().unwrap().mod_revision, at);

    let err = EtcdStore::connect(options(Some("wrong"))).await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with(&format!("etcd at {endpoint} refused the credentials")),
        "{err}"
    );
    // Without a password etcd takes the certificate's CN for the user, which does not exist.
    let err = EtcdStore::connect(options(None)).await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with(&format!("etcd at {endpoint} denied access")),
        "{CLIENT_CN}: {err}"
    );
}
