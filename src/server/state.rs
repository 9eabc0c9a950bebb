//! State shared by every handler. No globals: tests run several servers in one process.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::auth::sessions::Sessions;
use crate::rbac::Rbac;
use crate::registry::Registry;

pub struct AppState {
    pub sessions: Arc<Sessions>,
    pub rbac: Rbac,
    /// Applications, projects, clusters, repositories.
    pub registry: Arc<Registry>,
    /// The namespace the server runs in: where applications live by default.
    pub namespace: String,
    /// `--url`, used when `argocd-cm` has no `url`.
    pub url_flag: Option<String>,
    /// The UI's base href: the path of session cookies.
    pub basehref: String,
    /// Single sign-on (idle unless `oidc.config` is set).
    pub oidc: Arc<crate::oidc::Oidc>,
    /// False once shutdown has begun: `/healthz` then answers 503.
    serving: AtomicBool,
}

impl AppState {
    pub fn new(
        sessions: Arc<Sessions>,
        rbac: Rbac,
        registry: Arc<Registry>,
        namespace: String,
        url_flag: Option<String>,
        basehref: String,
        oidc: Arc<crate::oidc::Oidc>,
    ) -> Self {
        Self {
            sessions,
            rbac,
            registry,
            namespace,
            url_flag,
            basehref,
            oidc,
            serving: AtomicBool::new(true),
        }
    }

    /// The external URL: `url` from `argocd-cm`, else `--url`.
    pub fn url(&self) -> String {
        self.sessions
            .settings()
            .url
            .clone()
            .or_else(|| self.url_flag.clone())
            .unwrap_or_default()
    }

    pub fn is_serving(&self) -> bool {
        self.serving.load(Ordering::Acquire)
    }

    pub fn stop_serving(&self) {
        self.serving.store(false, Ordering::Release);
    }
}
