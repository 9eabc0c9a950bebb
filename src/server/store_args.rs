//! Which store a server or an admin command opens: the data dir's redb file by default, or a
//! prefix of an etcd cluster with `--etcd-endpoints`. One set of flags, shared by `tiphys
//! server` and every `tiphys admin` command that reads the store.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, anyhow};

use super::config::parse_duration;
use crate::store::{Backend, EtcdOptions, etcd::DEFAULT_PREFIX};

#[derive(clap::Args, Debug, Clone)]
pub struct StoreArgs {
    /// Keep the state in etcd (comma-separated client URLs of its members) instead of the data
    /// dir's file; replicas on the same endpoints and prefix share it. The data dir then keeps
    /// only what is per replica (the generated TLS certificate).
    #[arg(
        long,
        env = "TIPHYS_ETCD_ENDPOINTS",
        value_delimiter = ',',
        value_name = "URL"
    )]
    pub etcd_endpoints: Vec<String>,
    /// Every key lives under this prefix, apart from other users of the same etcd.
    #[arg(long, env = "TIPHYS_ETCD_PREFIX", default_value = DEFAULT_PREFIX, value_name = "PREFIX")]
    pub etcd_prefix: String,
    /// PEM file of the CA that signed the etcd members' certificates [default: the system's].
    #[arg(long, env = "TIPHYS_ETCD_CACERT", value_name = "FILE")]
    pub etcd_cacert: Option<PathBuf>,
    /// PEM client certificate for etcd (with --etcd-key).
    #[arg(long, env = "TIPHYS_ETCD_CERT", value_name = "FILE", requires = "etcd_key")]
    pub etcd_cert: Option<PathBuf>,
    /// PEM private key of --etcd-cert.
    #[arg(long, env = "TIPHYS_ETCD_KEY", value_name = "FILE", requires = "etcd_cert")]
    pub etcd_key: Option<PathBuf>,
    /// etcd user (etcd's own authentication; with --etcd-password-file).
    #[arg(long, env = "TIPHYS_ETCD_USERNAME", requires = "etcd_password_file")]
    pub etcd_username: Option<String>,
    /// File holding the etcd user's password (one line).
    #[arg(
        long,
        env = "TIPHYS_ETCD_PASSWORD_FILE",
        value_name = "FILE",
        requires = "etcd_username"
    )]
    pub etcd_password_file: Option<PathBuf>,
    /// How long to wait for an etcd member to answer at start, and per new connection.
    #[arg(long, env = "TIPHYS_ETCD_DIAL_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub etcd_dial_timeout: Duration,
    /// Keys sealing the credentials of clusters, repositories and credential templates at rest,
    /// one per line (at least 32 characters each, e.g. `openssl rand -base64 32`): the first
    /// seals, all open, so a rotation lists the new key first and the old after it until
    /// `tiphys admin rotate-secrets-key` has re-sealed everything [default: a key derived from
    /// the server key].
    #[arg(long, env = "TIPHYS_SECRETS_KEY_FILE", value_name = "FILE")]
    pub secrets_key_file: Option<PathBuf>,
    /// Serve an Argo CD installation: applications, projects and application sets are its
    /// custom resources on the Kubernetes API server (of --kubeconfig, KUBECONFIG or the pod's
    /// ServiceAccount), which upstream's application-controller syncs.
    #[arg(long, env = "TIPHYS_KUBE")]
    pub kube: bool,
    /// The kubeconfig of --kube [default: KUBECONFIG, ~/.kube/config, or the pod's ServiceAccount].
    #[arg(long, env = "TIPHYS_KUBECONFIG", value_name = "FILE", requires = "kube")]
    pub kubeconfig: Option<PathBuf>,
    /// The limit of one etcd call, retries across members included.
    #[arg(long, env = "TIPHYS_ETCD_REQUEST_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub etcd_request_timeout: Duration,
}

impl StoreArgs {
    /// The store these flags select; `data_dir` holds the redb file when no etcd is given.
    /// Files named by the flags are read here, so a bad one is reported before anything starts.
    pub fn backend(&self, data_dir: &Path) -> anyhow::Result<Backend> {
        if self.kube && !self.etcd_endpoints.is_empty() {
            return Err(anyhow!(
                "--kube and --etcd-endpoints name two places for the same objects: give one of them"
            ));
        }
        let endpoints: Vec<String> = self
            .etcd_endpoints
            .iter()
            .map(|e| e.trim().to_owned())
            .filter(|e| !e.is_empty())
            .collect();
        if endpoints.is_empty() {
            let given = [
                self.etcd_cacert.is_some(),
                self.etcd_cert.is_some(),
                self.etcd_username.is_some(),
                self.etcd_prefix != DEFAULT_PREFIX,
            ];
            if given.iter().any(|g| *g) {
                return Err(anyhow!("the --etcd-* options need --etcd-endpoints"));
            }
            return Ok(Backend::File(data_dir.to_path_buf()));
        }
        if self.etcd_dial_timeout.is_zero() || self.etcd_request_timeout.is_zero() {
            return Err(anyhow!(
                "--etcd-dial-timeout and --etcd-request-timeout must be above 0"
            ));
        }
        let mut options = EtcdOptions::new(endpoints);
        options.prefix = prefix(&self.etcd_prefix)?;
        options.ca_cert = self.etcd_cacert.clone();
        options.client_cert = self.etcd_cert.clone();
        options.client_key = self.etcd_key.clone();
        options.username = self.etcd_username.clone();
        options.password = match &self.etcd_password_file {
            Some(path) => Some(read_password(path)?),
            None => None,
        };
        options.dial_timeout = self.etcd_dial_timeout;
        options.request_timeout = self.etcd_request_timeout;
        Ok(Backend::Etcd(options))
    }
}

/// A prefix always ends with `/`: `/tiphys` must not also cover `/tiphys-staging/…`.
fn prefix(raw: &str) -> anyhow::Result<String> {
    let raw = raw.trim();
    if raw.is_empty() || raw == "/" {
        return Err(anyhow!(
            "--etcd-prefix must name a key prefix of its own, such as {DEFAULT_PREFIX}"
        ));
    }
    Ok(if raw.ends_with('/') {
        raw.to_owned()
    } else {
        format!("{raw}/")
    })
}

fn read_password(path: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read --etcd-password-file {}", path.display()))?;
    let password = text.trim_end_matches(['\r', '\n']);
    if password.is_empty() {
        return Err(anyhow!("--etcd-password-file {} is empty", path.display()));
    }
    Ok(password.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        store: StoreArgs,
    }

    fn parse(args: &[&str]) -> Result<StoreArgs, clap::Error> {
        use clap::Parser as _;
        let argv = std::iter::once("t").chain(args.iter().copied());
        Cli::try_parse_from(argv).map(|c| c.store)
    }

    #[test]
    fn without_endpoints_the_data_dir_file_is_used() {
        let backend = parse(&[]).unwrap().backend(Path::new("/d")).unwrap();
        assert!(matches!(backend, Backend::File(dir) if dir == Path::new("/d")));
        let err = parse(&["--etcd-prefix", "/x/"]).unwrap().backend(Path::new("/d"));
        assert!(err.unwrap_err().to_string().contains("--etcd-endpoints"));
    }

    #[test]
    fn endpoints_select_etcd_with_its_options() {
        let args = parse(&[
            "--etcd-endpoints",
            "http://127.0.0.1:1,http://127.0.0.1:2",
            "--etcd-prefix",
            "/team-a",
            "--etcd-request-timeout",
            "1m30s",
        ])
        .unwrap();
        let Backend::Etcd(options) = args.backend(Path::new("/d")).unwrap() else {
            panic!("not etcd");
        };
        assert_eq!(options.endpoints, ["http://127.0.0.1:1", "http://127.0.0.1:2"]);
        assert_eq!(options.prefix, "/team-a/");
        assert_eq!(options.request_timeout, Duration::from_secs(90));
        assert_eq!(options.dial_timeout, Duration::from_secs(5));
    }

    #[test]
    fn a_certificate_needs_its_key_and_a_user_its_password() {
        assert!(parse(&["--etcd-endpoints", "https://h:1", "--etcd-cert", "c.pem"]).is_err());
        assert!(parse(&["--etcd-endpoints", "http://h:1", "--etcd-username", "u"]).is_err());
    }

    #[test]
    fn an_unreadable_password_file_is_named() {
        let args = parse(&[
            "--etcd-endpoints",
            "http://h:1",
            "--etcd-username",
            "u",
            "--etcd-password-file",
            "/nonexistent/tiphys-etcd-password",
        ])
        .unwrap();
        let err = format!("{:#}", args.backend(Path::new("/d")).unwrap_err());
        assert!(err.contains("/nonexistent/tiphys-etcd-password"), "{err}");
    }
}
