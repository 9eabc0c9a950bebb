//! The application state every use case receives, and how it is opened. It sits below the
//! services and above what it composes (configuration, authentication, RBAC, the registry),
//! so the server and the in-process tests build it the same way. No globals: tests run
//! several in one process.

pub mod drain;
pub mod projects;
pub mod stream_slots;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::auth::{Auth, AuthOptions, LoginLimits};
use crate::config::ConfigWatch;
use crate::oidc::Oidc;
use crate::rbac::Rbac;
use crate::registry::{Registry, SecretsKeys};
use crate::store::{Backend, Store};

/// What opening the state needs: where things are and how they are named.
#[derive(Clone, Debug)]
pub struct Options {
    /// Where the generated secrets live (and the store, unless `store` says etcd).
    pub data_dir: PathBuf,
    /// The store everything lives on.
    pub store: Backend,
    /// `--kube`: applications, projects and application sets live on this installation.
    pub kube: Option<crate::kubernetes::KubeOptions>,
    /// `--redis`: Argo CD's Redis (`host:port`), where logouts are shared with argocd-server.
    pub redis: Option<String>,
    /// Argo CD's ConfigMaps and Secret; `None`: defaults.
    pub config_dir: Option<PathBuf>,
    /// The namespace the server runs in.
    pub namespace: String,
    /// `--application-namespaces`: where else Applications are served.
    pub app_namespaces: crate::kubernetes::AppNamespaces,
    /// `--url`, used when `argocd-cm` has no `url`.
    pub url: Option<String>,
    /// The UI's base href: the path of session cookies.
    pub basehref: String,
    pub login_limits: LoginLimits,
    /// `--secrets-key-file`: the keys sealing credentials at rest (else the server key's).
    pub secrets_key_file: Option<PathBuf>,
    /// Streams (watches) one caller may hold open at once.
    pub max_streams_per_caller: usize,
    /// How repositories are read.
    pub repos: crate::gitrepo::Limits,
    /// `--cluster-*`: how destination clusters are contacted; `None`: they are not.
    pub clusters: Option<crate::clusters::Limits>,
    /// `--repo-server*`: Argo CD's repo server; `None`: none.
    pub repo_server: Option<crate::reposerver::Config>,
    /// What time-keeping parts of the state (rate limits) read; tests may pause it.
    pub clock: crate::clock::Clock,
}

impl Options {
    /// Defaults for a server whose data lives in `data_dir` (tests, tools).
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        let data_dir = data_dir.into();
        Self {
            store: Backend::File(data_dir.clone()),
            kube: None,
            redis: None,
            config_dir: None,
            namespace: "argocd".to_owned(),
            app_namespaces: crate::kubernetes::AppNamespaces::default(),
            url: None,
            basehref: "/".to_owned(),
            login_limits: LoginLimits::default(),
            secrets_key_file: None,
            max_streams_per_caller: stream_slots::DEFAULT_PER_CALLER as usize,
            // Tools and in-process tests contact no repository.
            repos: crate::gitrepo::Limits {
                enabled: false,
                ..crate::gitrepo::Limits::new(data_dir.join("repo-cache"))
            },
            // ... and no cluster.
            clusters: None,
            repo_server: None,
            clock: crate::clock::Clock::system(),
            data_dir,
        }
    }
}

pub struct ServerState {
    /// Argo CD's configuration, reloaded while the server runs.
    pub config: Arc<ConfigWatch>,
    /// Accounts, logins, tokens, sessions: who a caller is.
    pub auth: Auth,
    pub rbac: Rbac,
    /// Applications, projects, clusters, repositories.
    pub registry: Arc<Registry>,
    /// The namespace the server runs in: where applications live by default.
    pub namespace: String,
    /// The other namespaces whose applications are served (`--application-namespaces`).
    pub app_namespaces: crate::kubernetes::AppNamespaces,
    /// `--url`, used when `argocd-cm` has no `url`.
    pub url_flag: Option<String>,
    /// The UI's base href: the path of session cookies.
    pub basehref: String,
    /// Single sign-on (idle unless `oidc.config` is set).
    pub oidc: Arc<Oidc>,
    /// Shutdown as the use cases see it: `/healthz`, open streams.
    pub drain: drain::Drain,
    /// Open streams per caller.
    pub streams: Arc<stream_slots::StreamSlots>,
    /// Reads repositories: refs, commits, Helm indexes, connection states.
    pub repos: Arc<crate::gitrepo::Client>,
    /// Contacts destination clusters (connection states); `None` with `--cluster-access off`.
    pub clusters: Option<Arc<crate::clusters::Clusters>>,
    /// What the application-controller keeps in `--redis` (trees, managed resources, cluster
    /// info); `None` without `--redis`.
    pub controller_cache: Option<Arc<crate::controller_cache::ControllerCache>>,
    /// Argo CD's repo server (`--repo-server`), which renders manifests; `None`: tiphys
    /// renders plain directories itself and refuses the rest.
    pub repo_server: Option<Arc<crate::reposerver::RepoServer>>,
    /// The API server of the installation (`--kube`), where its objects and the applications'
    /// events are kept; `None` on the embedded store and etcd.
    pub kube: Option<kube::Client>,
    /// The time use cases stamp what they write with (a restart's `restartedAt`).
    pub clock: crate::clock::Clock,
    /// The applications' indexes for pages, filters and facets: made by the first query that
    /// asks for one, so that a server whose clients never do holds none.
    catalog: std::sync::Mutex<Option<Arc<crate::catalog::Catalog>>>,
}

/// The keys sealing credentials at rest: those of `--secrets-key-file` (the first seals), then
/// the server key in force under `settings` (which seals when no file is given). A server
/// generates its key on the first start (`may_generate`); a tool only reads it.
pub async fn secrets_keys(
    store: &dyn Store,
    settings: &crate::config::Settings,
    file: Option<&Path>,
    may_generate: bool,
) -> anyhow::Result<SecretsKeys> {
    let file_keys = match file {
        Some(path) => SecretsKeys::read_file(path).map_err(|e| anyhow::anyhow!(e))?,
        None => Vec::new(),
    };
    let generated = match settings.server_secret_key {
        Some(_) => None,
        None if may_generate => Some(crate::auth::keys::generated_key(store).await?),
        None => crate::auth::keys::stored_generated_key(store).await?,
    };
    let server_key = settings.server_secret_key.as_deref().or(generated.as_deref());
    Ok(SecretsKeys::of(file_keys, server_key.map(str::as_bytes)))
}

impl ServerState {
    /// Opens the store (the data dir's file, one server per data dir, or etcd, shared by
    /// replicas) and everything that lives on it. Every error names what is wrong.
    pub async fn open(mut options: Options) -> anyhow::Result<Self> {
        let connection = match &options.kube {
            Some(kube) => {
                let connection = crate::kubernetes::Connection::open(kube).await?;
                if kube.namespace_of_context {
                    options.namespace = connection.default_namespace.clone();
                }
                // Before anything is written there (settings on a first start).
                Registry::require_kube_kinds(&connection, &options.namespace, &options.app_namespaces)
                    .await?;
                Some(connection)
            }
            None => None,
        };
        // On an installation its own ConfigMaps and Secret, unless a config dir is given.
        let config = match (&connection, &options.config_dir) {
            (Some(connection), None) => {
                let now = crate::schema::time::now_string();
                ConfigWatch::from_kube(connection, &options.namespace, &now).await?
            }
            _ => ConfigWatch::new(options.config_dir.clone())?,
        };
        let store: Arc<dyn Store> = options.store.open().await?;
        let keys = secrets_keys(
            &*store,
            &config.current(),
            options.secrets_key_file.as_deref(),
            true,
        )
        .await?;
        if options.secrets_key_file.is_none()
            && !options.store.is_exclusive()
            && config.current().server_secret_key.is_none()
        {
            tracing::warn!(
                "credentials at rest are sealed under the generated server key, which etcd holds too: \
                 give --secrets-key-file (or server.secretkey in argocd-secret) to keep them from etcd's readers"
            );
        }
        let keys = Arc::new(keys);
        let in_cluster = connection.as_ref().map(|c| c.client.clone());
        let in_cluster_config = connection.as_ref().map(|c| c.config.clone());
        let reviewer = connection.clone();
        let registry = match connection {
            Some(connection) => {
                Registry::open_on_kube(
                    Arc::clone(&store),
                    Arc::clone(&keys),
                    connection,
                    &options.namespace,
                    options.app_namespaces.clone(),
                )
                .await?
            }
            None => Registry::open(Arc::clone(&store), Arc::clone(&keys)).await?,
        };
        let sealed = registry.sealed().await?;
        if sealed.stale() > 0 {
            tracing::warn!(
                clear = sealed.clear,
                other_key = sealed.other_key,
                "{} stored records hold credentials in clear or sealed under an older key: run \
                 `tiphys admin rotate-secrets-key` to seal them under the key in force",
                sealed.stale()
            );
        }
        projects::ensure_default_project(&registry, &options.namespace)
            .await
            .map_err(|e| anyhow::anyhow!("cannot create the default project: {e}"))?;
        let projects = Arc::new(projects::RegistryProjects::new(
            Arc::clone(&registry),
            &options.namespace,
        ));
        let oidc = Arc::new(Oidc::new(
            Arc::clone(&config),
            Arc::clone(&store),
            options.clock.clone(),
        ));
        let auth = Auth::open(
            // Token checks read through the registry's fence (`registry::fence`).
            registry.fencing_store(),
            Arc::clone(&config),
            AuthOptions {
                data_dir: options.store.is_exclusive().then(|| options.data_dir.clone()),
                exclusive: options.store.is_exclusive(),
                limits: options.login_limits,
                // Project role tokens are checked against the projects they name.
                projects: Arc::clone(&projects) as _,
                oidc: Some(Arc::clone(&oidc)),
                secrets: keys,
                redis: options.redis.clone(),
                clock: options.clock.clone(),
                kube: reviewer,
            },
        )
        .await?;
        let rbac = Rbac::new(Arc::clone(&config) as _, projects);
        let controller_cache = match &options.redis {
            Some(addr) => Some(Arc::new(crate::controller_cache::ControllerCache::new(addr)?)),
            None => None,
        };
        let repo_server = match &options.repo_server {
            Some(config) => Some(Arc::new(crate::reposerver::RepoServer::new(config)?)),
            None => None,
        };
        Ok(Self {
            config,
            auth,
            rbac,
            registry,
            namespace: options.namespace,
            app_namespaces: options.app_namespaces,
            url_flag: options.url,
            basehref: options.basehref,
            oidc,
            drain: drain::Drain::default(),
            streams: stream_slots::StreamSlots::new(options.max_streams_per_caller),
            repos: Arc::new(crate::gitrepo::Client::new(options.repos)),
            clusters: options.clusters.map(|limits| {
                Arc::new(
                    crate::clusters::Clusters::new(limits, in_cluster.clone())
                        .with_in_cluster_config(in_cluster_config.clone()),
                )
            }),
            controller_cache,
            repo_server,
            kube: in_cluster,
            clock: options.clock,
            catalog: std::sync::Mutex::default(),
        })
    }

    /// Readies the state for a new configuration before it takes effect: authentication
    /// (accounts' records, the signing key) and the keys sealing credentials at rest.
    pub async fn prepare_config(&self, next: &crate::config::Settings) {
        if let Err(err) = self.auth.prepare_config(next).await {
            tracing::error!(
                error = format!("{err:#}"),
                "cannot apply the new configuration to accounts"
            );
        }
        let server_key = self.auth.server_key_of(next);
        if self.registry.server_key_changed(server_key.as_bytes()) {
            tracing::warn!(
                "server.secretkey changed: credentials at rest are re-sealed under the new key \
                 (give --secrets-key-file to keep them apart from the server key)"
            );
        }
    }

    /// The external URL: `url` from `argocd-cm`, else `--url`.
    /// The applications' catalog, made on first use with RBAC objects by `object_of` (the
    /// service layer's rule).
    pub fn catalog(
        &self,
        object_of: impl FnOnce() -> crate::catalog::ObjectOf,
    ) -> Result<Arc<crate::catalog::Catalog>, crate::error::AppError> {
        let mut held = self
            .catalog
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(catalog) = held.as_ref() {
            return Ok(Arc::clone(catalog));
        }
        let catalog = crate::catalog::Catalog::open(Arc::clone(&self.registry), object_of())
            .map_err(|e| crate::error::AppError::Unavailable(format!("the application catalog: {e}")))?;
        *held = Some(Arc::clone(&catalog));
        Ok(catalog)
    }

    pub fn url(&self) -> String {
        self.config
            .current()
            .url
            .clone()
            .or_else(|| self.url_flag.clone())
            .unwrap_or_default()
    }
}
