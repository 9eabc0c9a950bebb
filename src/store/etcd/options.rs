//! How to reach etcd: endpoints, key prefix, TLS material, credentials and timeouts, turned
//! into the client's connect options.

use std::path::PathBuf;
use std::time::Duration;

use etcd_client::ConnectOptions;

use super::tls::Material;
use crate::store::StoreError;

pub const DEFAULT_PREFIX: &str = "/tiphys/";

/// HTTP/2 pings on idle connections, so that a member that vanished without closing its
/// connections (a partition, a powered-off host) is noticed. etcd answers pings more frequent
/// than its `--grpc-keepalive-min-time` (5 s by default) with GOAWAY.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Clone)]
pub struct EtcdOptions {
    /// Client URLs (`http://host:port`, `https://host:port`) of one or more members.
    pub endpoints: Vec<String>,
    /// Every key of this store lives under it; other users of the same etcd keep out of it.
    pub prefix: String,
    /// PEM file of the CA that signed the members' certificates (else the system's roots).
    pub ca_cert: Option<PathBuf>,
    /// PEM files of a client certificate and its key, for members that require one.
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
    /// etcd's own authentication (the caller reads the password from a file).
    pub username: Option<String>,
    pub password: Option<String>,
    /// How long `connect` waits for a member to answer, and each new connection's limit.
    pub dial_timeout: Duration,
    /// The limit of one request, and of the retries of one call across members.
    pub request_timeout: Duration,
}

impl EtcdOptions {
    pub fn new(endpoints: Vec<String>) -> Self {
        Self {
            endpoints,
            prefix: DEFAULT_PREFIX.to_owned(),
            ca_cert: None,
            client_cert: None,
            client_key: None,
            username: None,
            password: None,
            dial_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
        }
    }

    /// The endpoints as a message names them.
    pub(super) fn endpoint_list(&self) -> String {
        self.endpoints.join(", ")
    }

    fn uses_tls(&self) -> bool {
        self.ca_cert.is_some()
            || self.client_cert.is_some()
            || self.endpoints.iter().any(|e| e.starts_with("https://"))
    }

    /// The client's connect options, and the TLS files (read and checked) when TLS is used.
    pub(super) fn connect_options(&self) -> Result<(ConnectOptions, Option<Material>), StoreError> {
        if self.endpoints.is_empty() {
            return Err(StoreError::Invalid("no etcd endpoint given".to_owned()));
        }
        let tls = self.tls()?;
        let mut options = ConnectOptions::new()
            .with_connect_timeout(self.dial_timeout)
            .with_timeout(self.request_timeout)
            .with_keep_alive(KEEPALIVE_INTERVAL, self.dial_timeout)
            // A member cut off from the leader refuses at once (and a watch on it is cancelled)
            // rather than hanging, so the call moves on to another member.
            .with_require_leader(true);
        match (&self.username, &self.password) {
            (Some(user), Some(password)) => {
                options = options
                    .with_user(user.as_str(), password.as_str())
                    .with_auto_token_refresh(true);
            }
            (None, None) => {}
            _ => {
                return Err(StoreError::Invalid(
                    "etcd authentication needs both a username and a password".to_owned(),
                ));
            }
        }
        if let Some(tls) = &tls {
            options = options.with_tls(tls.tls_options());
        }
        Ok((options, tls))
    }

    fn tls(&self) -> Result<Option<Material>, StoreError> {
        if !self.uses_tls() {
            return Ok(None);
        }
        if self.endpoints.iter().any(|e| e.starts_with("http://")) {
            return Err(StoreError::Invalid(format!(
                "etcd TLS options need https:// endpoints, not {}",
                self.endpoint_list()
            )));
        }
        let client = match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => Some((cert.as_path(), key.as_path())),
            (None, None) => None,
            _ => {
                return Err(StoreError::Invalid(
                    "an etcd client certificate needs both the certificate and its key".to_owned(),
                ));
            }
        };
        Material::load(&self.endpoint_list(), self.ca_cert.as_deref(), client).map(Some)
    }
}

impl std::fmt::Debug for EtcdOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdOptions")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.prefix)
            .field("ca_cert", &self.ca_cert)
            .field("client_cert", &self.client_cert)
            .field("client_key", &self.client_key)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("dial_timeout", &self.dial_timeout)
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}
