//! Reaching the API server: the kubeconfig of `--kubeconfig`, else `KUBECONFIG` or
//! `~/.kube/config`, else the pod's ServiceAccount (kube-rs's inference, as client-go's
//! `clientcmd` does for argocd-server).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, anyhow};

/// How long the start waits for the API server to answer its first request.
const FIRST_ANSWER: Duration = Duration::from_secs(15);

/// What `--kube` was given.
#[derive(Clone, Debug, Default)]
pub struct KubeOptions {
    /// `--kubeconfig`: this file rather than the inferred configuration.
    pub kubeconfig: Option<PathBuf>,
    /// No `--namespace` was given: the server runs in the namespace of the kubeconfig's
    /// context, or the pod's (as argocd-server does).
    pub namespace_of_context: bool,
}

/// A client of one API server, and what messages call it.
#[derive(Clone)]
pub struct Connection {
    pub client: kube::Client,
    /// The configuration the client was built from (for clients that impersonate someone).
    pub config: Box<kube::Config>,
    /// The API server's URL, as messages name it.
    pub url: String,
    /// The namespace of the kubeconfig's context, or the pod's.
    pub default_namespace: String,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// Builds the client and checks that the API server answers: an unreachable one, a bad
    /// kubeconfig or refused credentials stop the start with a message that names them.
    pub async fn open(options: &KubeOptions) -> anyhow::Result<Self> {
        let config = match &options.kubeconfig {
            Some(path) => {
                let file = kube::config::Kubeconfig::read_from(path)
                    .with_context(|| format!("cannot read the kubeconfig {}", path.display()))?;
                kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                    .await
                    .with_context(|| format!("the kubeconfig {} cannot be used", path.display()))?
            }
            None => kube::Config::infer().await.context(
                "no Kubernetes configuration found: give --kubeconfig, set KUBECONFIG, or run in a pod \
                 with a ServiceAccount",
            )?,
        };
        // Boxed: it is kept, and the future below would carry it whole.
        let config = Box::new(config);
        let url = config.cluster_url.to_string();
        let default_namespace = config.default_namespace.clone();
        let client = kube::Client::try_from((*config).clone())
            .with_context(|| format!("cannot build a client of the Kubernetes API server at {url}"))?;
        match tokio::time::timeout(FIRST_ANSWER, client.apiserver_version()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                return Err(anyhow!("the Kubernetes API server at {url} cannot be used: {e}"));
            }
            Err(_) => {
                return Err(anyhow!(
                    "the Kubernetes API server at {url} did not answer within {FIRST_ANSWER:?}"
                ));
            }
        }
        Ok(Self {
            client,
            config,
            url,
            default_namespace,
        })
    }
}
