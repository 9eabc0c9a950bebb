//! Exec credential providers: a cluster Secret's `execProviderConfig` (or `awsAuthConfig`,
//! which upstream turns into `argocd-k8s-auth aws ...`) names a program whose output, an
//! ExecCredential, holds the token or client certificate to call the cluster with.
//!
//! kube-rs can run such a program itself, but it runs it with `std::process::Command::output`
//! on the calling thread with no time bound: one provider that hangs would hold a runtime
//! thread and every check of that cluster forever. So tiphys runs it here, as client-go's exec
//! plugin runner does (k8s.io/client-go/plugin/pkg/client/auth/exec/exec.go) with these
//! differences, each deliberate:
//! - the run is bounded in time and the program killed at the bound;
//! - its output is bounded in size;
//! - it never reads a terminal (upstream sets `InteractiveMode: Never` for clusters too).
//!
//! The program is started directly, never through a shell, with tiphys's environment plus the
//! configured variables, and `KUBERNETES_EXEC_INFO` describing the request. Its credential is
//! reused until its `expirationTimestamp` (forever when it gives none), or until the cluster
//! refuses it.

use std::collections::{BTreeMap, HashMap};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use serde::Deserialize;
use tokio::io::AsyncReadExt as _;

/// The ExecCredential versions client-go accepts.
const API_VERSIONS: &[&str] = &[
    "client.authentication.k8s.io/v1",
    "client.authentication.k8s.io/v1beta1",
];

/// A provider's output at most: an ExecCredential is a few kilobytes.
const MAX_OUTPUT: u64 = 1024 * 1024;

/// What a provider's standard error may add to a message.
const STDERR_SHOWN: usize = 300;

/// A credential is renewed this long before it expires, so no call starts with one that
/// lapses in flight.
const RENEW_BEFORE: Duration = Duration::from_secs(5);

/// The program to run, as the cluster Secret's `execProviderConfig` gives it.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq, Hash)]
#[serde(default, rename_all = "camelCase")]
pub struct ExecConfig {
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub api_version: String,
    pub install_hint: String,
}

impl ExecConfig {
    /// What upstream runs for an `awsAuthConfig` (`Cluster.RawRestConfig` in
    /// pkg/apis/application/v1alpha1/types.go).
    pub fn aws(cluster_name: &str, role_arn: &str, profile: &str) -> Self {
        let mut args = vec![
            "aws".to_owned(),
            "--cluster-name".to_owned(),
            cluster_name.to_owned(),
        ];
        if !role_arn.is_empty() {
            args.extend(["--role-arn".to_owned(), role_arn.to_owned()]);
        }
        if !profile.is_empty() {
            args.extend(["--profile".to_owned(), profile.to_owned()]);
        }
        Self {
            command: "argocd-k8s-auth".to_owned(),
            args,
            api_version: "client.authentication.k8s.io/v1beta1".to_owned(),
            ..Self::default()
        }
    }
}

/// What a provider gave: a token or a client certificate, and until when.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    pub token: Option<String>,
    /// PEM.
    pub client_certificate: Option<String>,
    /// PEM.
    pub client_key: Option<String>,
    pub expires: Option<jiff::Timestamp>,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("client_certificate", &self.client_certificate.is_some())
            .field("expires", &self.expires)
            .finish_non_exhaustive()
    }
}

impl Credential {
    fn fresh_at(&self, now: jiff::Timestamp) -> bool {
        let renew = jiff::SignedDuration::try_from(RENEW_BEFORE).unwrap_or_default();
        self.expires.is_none_or(|at| now < at - renew)
    }
}

/// Why a provider gave no credential. Messages name the program, never its output's secrets.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ExecError {
    #[error("the exec provider {command:?} cannot be started: {why}{hint}")]
    Start {
        command: String,
        why: String,
        hint: String,
    },
    #[error("the exec provider {command:?} did not finish within {bound:?}")]
    Timeout { command: String, bound: Duration },
    #[error("the exec provider {command:?} failed ({status}){stderr}")]
    Failed {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("the exec provider {command:?} printed no valid ExecCredential: {why}")]
    Invalid { command: String, why: String },
}

/// Credentials given by providers, by their configuration.
#[derive(Debug)]
pub struct ExecCache {
    bound: Duration,
    credentials: Mutex<HashMap<ExecConfig, Credential>>,
}

impl ExecCache {
    /// Providers' runs are bounded by `bound`.
    pub fn new(bound: Duration) -> Self {
        Self {
            bound,
            credentials: Mutex::new(HashMap::new()),
        }
    }

    /// The provider's credential: the one it gave last while still fresh at `now`, else a new
    /// one from a run.
    pub async fn credential(
        &self,
        config: &ExecConfig,
        now: jiff::Timestamp,
    ) -> Result<Credential, ExecError> {
        if let Some(found) = lock(&self.credentials).get(config).filter(|c| c.fresh_at(now)) {
            return Ok(found.clone());
        }
        let credential = run(config, self.bound).await?;
        let mut credentials = lock(&self.credentials);
        if credentials.len() >= 10_000 {
            credentials.clear();
        }
        credentials.insert(config.clone(), credential.clone());
        Ok(credential)
    }

    /// Drops the provider's credential (the cluster refused it): the next call runs it again.
    pub fn forget(&self, config: &ExecConfig) {
        lock(&self.credentials).remove(config);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs the provider once, within `bound`.
async fn run(config: &ExecConfig, bound: Duration) -> Result<Credential, ExecError> {
    let command = config.command.clone();
    if command.is_empty() {
        return Err(ExecError::Start {
            command,
            why: "no command is configured".to_owned(),
            hint: String::new(),
        });
    }
    let api_version = if config.api_version.is_empty() {
        "client.authentication.k8s.io/v1beta1"
    } else {
        config.api_version.as_str()
    };
    if !API_VERSIONS.contains(&api_version) {
        return Err(ExecError::Invalid {
            command,
            why: format!(
                "apiVersion {api_version:?} is not supported; use one of {}",
                API_VERSIONS.join(", ")
            ),
        });
    }
    let info = serde_json::json!({
        "apiVersion": api_version,
        "kind": "ExecCredential",
        "spec": {"interactive": false},
    });
    let mut child = tokio::process::Command::new(&config.command)
        .args(&config.args)
        .envs(&config.env)
        .env("KUBERNETES_EXEC_INFO", info.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| ExecError::Start {
            command: command.clone(),
            why: e.to_string(),
            hint: if config.install_hint.is_empty() {
                String::new()
            } else {
                format!(" ({})", config.install_hint)
            },
        })?;
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        unreachable!("both pipes were asked for");
    };
    let outcome = tokio::time::timeout(bound, async {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let (mut stdout, mut stderr) = (stdout.take(MAX_OUTPUT), stderr.take(MAX_OUTPUT));
        let (read_out, read_err) = tokio::join!(stdout.read_to_end(&mut out), stderr.read_to_end(&mut err));
        let status = child.wait().await;
        (read_out.and(read_err).and(status), out, err)
    })
    .await;
    // On the bound, dropping the future drops the child, which kill_on_drop ends.
    let Ok((status, out, err)) = outcome else {
        return Err(ExecError::Timeout { command, bound });
    };
    let status = status.map_err(|e| ExecError::Failed {
        command: command.clone(),
        status: e.to_string(),
        stderr: String::new(),
    })?;
    if !status.success() {
        let stderr = String::from_utf8_lossy(&err);
        let stderr = stderr.trim();
        let shown: String = stderr.chars().take(STDERR_SHOWN).collect();
        return Err(ExecError::Failed {
            command,
            status: status.to_string(),
            stderr: if shown.is_empty() {
                String::new()
            } else {
                format!(": {shown}")
            },
        });
    }
    parse(&out, api_version).map_err(|why| ExecError::Invalid { command, why })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExecCredentialOut {
    api_version: Option<String>,
    kind: Option<String>,
    status: Option<StatusOut>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StatusOut {
    expiration_timestamp: Option<String>,
    token: Option<String>,
    client_certificate_data: Option<String>,
    client_key_data: Option<String>,
}

/// Reads a provider's output as client-go does: the kind and version asked for, a status
/// with a token or a certificate and key, both or neither of the latter.
fn parse(out: &[u8], api_version: &str) -> Result<Credential, String> {
    // Never quote the output: it may hold a token.
    let read: ExecCredentialOut =
        serde_json::from_slice(out).map_err(|e| format!("its output is not ExecCredential JSON ({e})"))?;
    if read.kind.as_deref() != Some("ExecCredential") {
        return Err(format!(
            "kind is {:?}, not \"ExecCredential\"",
            read.kind.unwrap_or_default()
        ));
    }
    if read.api_version.as_deref() != Some(api_version) {
        return Err(format!(
            "apiVersion is {:?}, not the {api_version:?} asked for",
            read.api_version.unwrap_or_default()
        ));
    }
    let status = read.status.ok_or("it has no status")?;
    let nonempty = |s: Option<String>| s.filter(|s| !s.is_empty());
    let credential = Credential {
        token: nonempty(status.token),
        client_certificate: nonempty(status.client_certificate_data),
        client_key: nonempty(status.client_key_data),
        expires: match status.expiration_timestamp.filter(|s| !s.is_empty()) {
            Some(text) => Some(
                text.parse()
                    .map_err(|e| format!("expirationTimestamp {text:?} is not an RFC 3339 time ({e})"))?,
            ),
            None => None,
        },
    };
    if credential.client_certificate.is_some() != credential.client_key.is_some() {
        return Err(
            "it gives a client certificate without its key, or a key without its certificate".to_owned(),
        );
    }
    if credential.token.is_none() && credential.client_certificate.is_none() {
        return Err("its status has neither a token nor a client certificate".to_owned());
    }
    Ok(credential)
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = "client.authentication.k8s.io/v1";

    #[test]
    fn outputs_are_read_as_client_go_reads_them() {
        let ok = br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",
            "status":{"token":"t0k","expirationTimestamp":"2030-01-01T00:00:00Z"}}"#;
        let c = parse(ok, V1).unwrap();
        assert_eq!(c.token.as_deref(), Some("t0k"));
        assert_eq!(c.expires, Some("2030-01-01T00:00:00Z".parse().unwrap()));
        assert!(!format!("{c:?}").contains("t0k"), "Debug hides the token");
        for (bad, why) in [
            (&b"not json"[..], "not ExecCredential JSON"),
            (br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"Pod","status":{"token":"x"}}"#, "kind is"),
            (br#"{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"x"}}"#, "apiVersion is"),
            (br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential"}"#, "no status"),
            (br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{}}"#, "neither a token"),
            (br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"clientCertificateData":"x"}}"#, "without its key"),
            (br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"x","expirationTimestamp":"soon"}}"#, "not an RFC 3339"),
        ] {
            let err = parse(bad, V1).unwrap_err();
            assert!(err.contains(why), "{err}");
            assert!(!err.contains("\"x\""), "the output is not quoted: {err}");
        }
    }

    #[test]
    fn a_credential_is_renewed_before_it_expires() {
        let at: jiff::Timestamp = "2030-01-01T00:00:00Z".parse().unwrap();
        let c = Credential {
            token: Some("t".to_owned()),
            client_certificate: None,
            client_key: None,
            expires: Some(at),
        };
        assert!(c.fresh_at(at - jiff::SignedDuration::from_secs(6)));
        assert!(!c.fresh_at(at - jiff::SignedDuration::from_secs(4)));
        assert!(Credential { expires: None, ..c }.fresh_at(at));
    }

    #[test]
    fn aws_is_argocd_k8s_auth_as_upstream_runs_it() {
        let c = ExecConfig::aws("prod", "arn:aws:iam::1:role/x", "");
        assert_eq!(c.command, "argocd-k8s-auth");
        assert_eq!(
            c.args,
            [
                "aws",
                "--cluster-name",
                "prod",
                "--role-arn",
                "arn:aws:iam::1:role/x"
            ]
        );
    }

    #[tokio::test]
    async fn a_real_program_is_run_bounded_and_its_failures_named() {
        let cache = ExecCache::new(Duration::from_millis(500));
        let sh = |script: &str| ExecConfig {
            command: "sh".to_owned(),
            args: vec!["-c".to_owned(), script.to_owned()],
            api_version: V1.to_owned(),
            ..ExecConfig::default()
        };
        let now = jiff::Timestamp::now();
        let printed = sh(
            r#"printf '{"apiVersion":"%s","kind":"ExecCredential","status":{"token":"%s"}}' "$(echo $KUBERNETES_EXEC_INFO | sed 's/.*apiVersion":"\([^"]*\)".*/\1/')" "$TOKEN""#,
        );
        let with_env = ExecConfig {
            env: [("TOKEN".to_owned(), "from-env".to_owned())].into(),
            ..printed
        };
        let c = cache.credential(&with_env, now).await.unwrap();
        assert_eq!(
            c.token.as_deref(),
            Some("from-env"),
            "env and KUBERNETES_EXEC_INFO reach it"
        );
        let started = std::time::Instant::now();
        let err = cache.credential(&sh("sleep 30"), now).await.unwrap_err();
        assert!(matches!(err, ExecError::Timeout { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
        let err = cache
            .credential(&sh("echo nope >&2; exit 3"), now)
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("exit status: 3") && err.to_string().contains("nope"),
            "{err}"
        );
        let missing = ExecConfig {
            command: "tiphys-no-such-provider".to_owned(),
            install_hint: "install it from the vendor".to_owned(),
            ..ExecConfig::default()
        };
        let err = cache.credential(&missing, now).await.unwrap_err();
        assert!(err.to_string().contains("install it from the vendor"), "{err}");
    }
}
