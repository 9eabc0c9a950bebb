//! The CLI never hangs: a server that accepts connections and never answers, or a real
//! server stopped with SIGSTOP, ends a command within --connect-timeout / --request-timeout
//! with a message naming the server and the bound, and exit code 7 (unavailable).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::cli_apps::{Session, session_client, start_server};
use crate::support::{TestServer, bin};

const UNAVAILABLE: i32 = 7;
/// Far above the 1 s / 2 s bounds the tests pass, far below "hangs".
const BOUND: Duration = Duration::from_secs(10);
/// A run still going after this is killed and fails the test.
const KILL_AFTER: Duration = Duration::from_secs(30);
const SHORT: [&str; 4] = ["--connect-timeout", "1s", "--request-timeout", "2s"];

/// A loopback listener that accepts connections and holds them open, silent.
struct SilentServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SilentServer {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut held: Vec<TcpStream> = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(300);
            while !stopped.load(Ordering::Relaxed) && Instant::now() < deadline {
                match listener.accept() {
                    Ok((socket, _)) => held.push(socket),
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Self {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for SilentServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Sends SIGSTOP to a server this test started, and SIGCONT when dropped (even on a panic).
struct Stopped<'a>(&'a TestServer);

impl<'a> Stopped<'a> {
    fn stop(server: &'a TestServer) -> Self {
        signal(server, "-STOP");
        Self(server)
    }
}

impl Drop for Stopped<'_> {
    fn drop(&mut self) {
        signal(self.0, "-CONT");
    }
}

fn signal(server: &TestServer, sig: &str) {
    let status = Command::new("kill")
        .arg(sig)
        .arg(server.pid().to_string())
        .status()
        .unwrap();
    assert!(status.success(), "kill {sig} {}", server.pid());
}

#[derive(Debug)]
struct Run {
    code: Option<i32>,
    err: String,
    took: Duration,
}

/// Runs the CLI with its own config in `dir` and only the given `TIPHYS_*` variables,
/// killing it (and failing) if it runs longer than [`KILL_AFTER`].
fn run(dir: &Path, config: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let err_path = dir.join("stderr");
    let mut cmd = Command::new(bin());
    cmd.args(args).arg("--config").arg(config);
    for (var, _) in std::env::vars_os() {
        if var.to_string_lossy().starts_with("TIPHYS_") {
            cmd.env_remove(var);
        }
    }
    let started = Instant::now();
    let mut child = cmd
        .envs(env.iter().copied())
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > KILL_AFTER {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?} still running after {KILL_AFTER:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        code: status.code(),
        err: std::fs::read_to_string(&err_path).unwrap_or_default(),
        took: started.elapsed(),
    }
}

fn assert_unavailable(run: &Run, expected: &str, what: &str) {
    assert_eq!(run.code, Some(UNAVAILABLE), "{what}: {run:?}");
    assert!(
        run.err.contains(expected),
        "{what}: expected {expected:?} in {run:?}"
    );
    assert!(run.took < BOUND, "{what}: took {:?}", run.took);
}

/// What a silent server at `addr` makes the CLI say: over TLS the handshake never
/// completes (the connect timeout); over h2c or HTTP/1.1 the call is never answered.
fn silent_message(addr: &str, plaintext: bool) -> String {
    if plaintext {
        format!("the server at {addr} did not answer within 2s (--request-timeout)")
    } else {
        format!("connecting to {addr} timed out after 1s (--connect-timeout)")
    }
}

#[test]
fn login_and_app_list_give_up_on_a_silent_server() {
    let silent = SilentServer::start();
    let addr = silent.addr.to_string();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    let modes: [&[&str]; 4] = [
        &["--insecure"],
        &["--insecure", "--grpc-web"],
        &["--plaintext"],
        &["--plaintext", "--grpc-web"],
    ];
    for mode in modes {
        let expected = silent_message(&addr, mode.contains(&"--plaintext"));
        let mut login = vec!["login", &addr, "--username", "admin", "--password", "x"];
        login.extend(SHORT);
        login.extend(mode);
        assert_unavailable(&run(dir.path(), &config, &login, &[]), &expected, "login");
        let mut list = vec!["app", "list", "--server", &addr, "--auth-token", "t"];
        list.extend(SHORT);
        list.extend(mode);
        assert_unavailable(&run(dir.path(), &config, &list, &[]), &expected, "app list");
    }
}

#[test]
fn app_list_gives_up_on_a_stopped_server_and_works_once_it_resumes() {
    let (server, _config) = start_server(None);
    let admin = Session::login(&server, "admin", &[]);
    let list = |extra: &[&str]| {
        let mut args = vec!["app", "list", "-o", "name"];
        args.extend(SHORT);
        args.extend(extra);
        run(admin.dir(), &admin.config(), &args, &[])
    };
    {
        let _stopped = Stopped::stop(&server);
        let expected = silent_message(&admin.addr, true);
        for mode in [&[][..], &["--grpc-web"][..]] {
            assert_unavailable(&list(mode), &expected, "app list on a stopped server");
        }
    }
    let resumed = list(&[]);
    assert_eq!(resumed.code, Some(0), "{resumed:?}");
}

#[test]
fn timeouts_come_from_the_environment() {
    let silent = SilentServer::start();
    let addr = silent.addr.to_string();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    let env = [
        ("TIPHYS_CONNECT_TIMEOUT", "1s"),
        ("TIPHYS_REQUEST_TIMEOUT", "2s"),
        ("TIPHYS_SERVER", addr.as_str()),
        ("TIPHYS_AUTH_TOKEN", "t"),
    ];
    for plaintext in [false, true] {
        let mode = if plaintext { "--plaintext" } else { "--insecure" };
        let run = run(dir.path(), &config, &["app", "list", mode], &env);
        assert_unavailable(&run, &silent_message(&addr, plaintext), mode);
    }
    let bad = [("TIPHYS_REQUEST_TIMEOUT", "0"), ("TIPHYS_SERVER", addr.as_str())];
    let run = run(dir.path(), &config, &["app", "list"], &bad);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(run.err.contains("--request-timeout"), "{run:?}");
}

#[test]
fn bad_timeouts_are_refused_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    for (flag, value, why) in [
        ("--request-timeout", "0", "more than 0"),
        ("--connect-timeout", "abc", "invalid duration"),
        ("--connect-timeout", "-1s", "negative"),
    ] {
        let arg = format!("{flag}={value}");
        let args = ["app", "list", "--server", "127.0.0.1:1", &arg];
        let run = run(dir.path(), &config, &args, &[]);
        assert_eq!(run.code, Some(2), "{flag} {value}: {run:?}");
        assert!(
            run.err.contains(flag) && run.err.contains(why),
            "{flag} {value}: {run:?}"
        );
    }
}

/// Server streams are exempt from the request timeout: a quiet watch outlives it.
#[tokio::test]
async fn a_quiet_watch_outlives_the_request_timeout() {
    let (server, _config) = start_server(None);
    let admin = Session::login(&server, "admin", &[]);
    for grpc_web in [false, true] {
        let client = session_client(&admin, grpc_web, Some(Duration::from_secs(1))).await;
        let path = "/application.ApplicationService/Watch";
        let mut stream = tiphys::cli::call::stream(&client, "watch", path, &json!({}))
            .await
            .unwrap();
        // Nothing changes: the stream stays open, quiet, past the 1 s request timeout.
        let quiet = tokio::time::timeout(Duration::from_secs(3), stream.next()).await;
        assert!(
            quiet.is_err(),
            "grpc_web={grpc_web}: {:?}",
            quiet.map(|r| r.map_err(|e| e.to_string()))
        );
        // …while a unary call is still bounded by it (and answered well within it).
        let list = tiphys::cli::call::unary(
            &client,
            "list",
            "/application.ApplicationService/List",
            &json!({}),
        )
        .await;
        assert!(list.is_ok(), "grpc_web={grpc_web}: {:?}", list.err());
    }
}
