//! Settings from the installation (`--kube` without `--config-dir`): `argocd-cm` and
//! `argocd-rbac-cm` (ConfigMaps) and `argocd-secret` (a Secret) in the control namespace, read
//! as upstream's settings manager reads them (util/settings/settings.go: by name, through
//! informers), and followed through watches. Each object becomes the same [`Input`] a mounted
//! volume gives (one entry per key), so that parsing, validation and "a bad change keeps the
//! last good one" are the config dir's, unchanged.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use futures_util::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

use super::{ARGOCD_CM, ARGOCD_RBAC_CM, ARGOCD_SECRET, ConfigWatch, Input, Inputs, Settings, build};
use crate::kubernetes::{Connection, Verb, store_error};

/// How the settings objects are reached.
#[derive(Clone)]
pub(super) struct KubeSettings {
    connection: Connection,
    namespace: String,
}

/// The three objects in [`Inputs`] order, and whether each is a Secret.
const OBJECTS: [(&str, bool); 3] = [(ARGOCD_CM, false), (ARGOCD_RBAC_CM, false), (ARGOCD_SECRET, true)];

impl ConfigWatch {
    /// The settings of the installation `connection` reaches, in `namespace`. A missing object
    /// means its defaults, as upstream; a bad one, or one this server may not read, stops the
    /// start with a message that names it.
    ///
    /// First, what upstream's first start writes is written when missing (`kube_init.rs`):
    /// `server.secretkey` and the initial admin password, stamped with `now` (RFC 3339).
    pub async fn from_kube(connection: &Connection, namespace: &str, now: &str) -> anyhow::Result<Arc<Self>> {
        super::kube_init::initialize(connection, namespace, now).await?;
        let kube = KubeSettings {
            connection: connection.clone(),
            namespace: namespace.to_owned(),
        };
        let mut inputs = Vec::with_capacity(OBJECTS.len());
        for (name, secret) in OBJECTS {
            inputs.push(kube.read(name, secret).await?);
        }
        let inputs = Inputs(
            inputs
                .try_into()
                .map_err(|_| anyhow::anyhow!("three objects read"))?,
        );
        let settings = build(&inputs, None)?;
        Ok(Arc::new(Self::assemble(None, Some(kube), settings, Ok(inputs))))
    }
}

impl KubeSettings {
    /// Object `name` as it is now.
    pub(super) async fn read(&self, name: &str, secret: bool) -> anyhow::Result<Input> {
        let failed = |e: kube::Error| {
            let resource = if secret { "secrets" } else { "configmaps" };
            anyhow::anyhow!(
                "cannot read {name}: {}",
                store_error(e, &self.connection, Verb::Get, resource, &self.namespace)
            )
        };
        let client = self.connection.client.clone();
        Ok(if secret {
            let api: Api<Secret> = Api::namespaced(client, &self.namespace);
            api.get_opt(name)
                .await
                .map_err(failed)?
                .map_or(Input::Absent, |s| self.of_secret(name, &s))
        } else {
            let api: Api<ConfigMap> = Api::namespaced(client, &self.namespace);
            api.get_opt(name)
                .await
                .map_err(failed)?
                .map_or(Input::Absent, |c| self.of_config_map(name, &c))
        })
    }

    /// Sets keys of `argocd-secret` (`None`: removes the key), as upstream's settings manager
    /// saves an account there (util/settings/accounts.go saveAccount). A merge patch touches
    /// only these keys, so a concurrent change of others is not lost.
    pub(super) async fn patch_secret(&self, keys: &BTreeMap<String, Option<String>>) -> anyhow::Result<()> {
        use base64::Engine as _;
        let data: serde_json::Map<String, serde_json::Value> = keys
            .iter()
            .map(|(k, v)| {
                let v = v.as_ref().map_or(serde_json::Value::Null, |v| {
                    serde_json::Value::from(base64::engine::general_purpose::STANDARD.encode(v))
                });
                (k.clone(), v)
            })
            .collect();
        let api: Api<Secret> = Api::namespaced(self.connection.client.clone(), &self.namespace);
        let patch = serde_json::json!({ "data": data });
        api.patch(ARGOCD_SECRET, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot write {ARGOCD_SECRET}: {}",
                    store_error(e, &self.connection, Verb::Update, "secrets", &self.namespace)
                )
            })?;
        Ok(())
    }

    /// Where messages say a key of object `name` is.
    fn origin(&self, kind: &str, name: &str) -> PathBuf {
        PathBuf::from(format!("{kind} {}/{name}", self.namespace))
    }

    fn of_config_map(&self, name: &str, cm: &ConfigMap) -> Input {
        let mut files: Vec<(String, Vec<u8>)> = cm
            .data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
            .chain(
                cm.binary_data
                    .iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), v.0.clone())),
            )
            .collect();
        files.sort();
        Input::Volume {
            path: self.origin("configmap", name),
            files,
        }
    }

    fn of_secret(&self, name: &str, secret: &Secret) -> Input {
        let mut files: Vec<(String, Vec<u8>)> = secret
            .data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect();
        files.sort();
        Input::Volume {
            path: self.origin("secret", name),
            files,
        }
    }
}

/// One watched object's news: its new state (`Absent` once deleted).
struct News {
    index: usize,
    input: Input,
}

/// Follows the three objects until `cancel`: each change is built into settings, prepared and
/// published; a bad one is reported and the last good settings stay.
pub(super) async fn follow<F, Fut>(
    watch: Arc<ConfigWatch>,
    kube: KubeSettings,
    cancel: CancellationToken,
    prepare: F,
) where
    F: Fn(Arc<Settings>) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let kube = Arc::new(kube);
    let mut streams = Vec::new();
    for (index, (name, secret)) in OBJECTS.into_iter().enumerate() {
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let client = kube.connection.client.clone();
        let k = Arc::clone(&kube);
        let stream = if secret {
            watcher(Api::<Secret>::namespaced(client, &kube.namespace), config)
                .default_backoff()
                .map(move |e| step(index, name, e, |s| k.of_secret(name, s)))
                .boxed()
        } else {
            watcher(Api::<ConfigMap>::namespaced(client, &kube.namespace), config)
                .default_backoff()
                .map(move |e| step(index, name, e, |c| k.of_config_map(name, c)))
                .boxed()
        };
        streams.push(stream);
    }
    let mut events = futures_util::stream::select_all(streams);
    let mut listed: [Option<Input>; 3] = [None, None, None];
    loop {
        let event = tokio::select! {
            () = cancel.cancelled() => return,
            event = events.next() => event,
        };
        let Some(event) = event else { return };
        let news = match event {
            Some(Step::Now(news)) => news,
            Some(Step::Relist(index)) => {
                listed[index] = None;
                continue;
            }
            Some(Step::Listed(index, input)) => {
                listed[index] = Some(input);
                continue;
            }
            Some(Step::ListDone(index)) => News {
                index,
                input: listed[index].take().unwrap_or(Input::Absent),
            },
            None => continue,
        };
        let next = {
            let mut seen = watch
                .last_seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let Ok(current) = &*seen else {
                continue;
            };
            if current.0[news.index] == news.input {
                continue;
            }
            let mut inputs = current.clone();
            inputs.0[news.index] = news.input;
            *seen = Ok(inputs.clone());
            drop(seen);
            watch.consider(Ok(inputs), &format!("namespace {}", kube.namespace))
        };
        if let Ok(Some(next)) = next {
            let next = Arc::new(next);
            prepare(Arc::clone(&next)).await;
            watch.publish(next);
        }
    }
}

/// What one watch event means for the settings.
enum Step {
    /// The object is now this.
    Now(News),
    /// The watch lists again: what follows until [`Step::ListDone`] is the whole truth.
    Relist(usize),
    Listed(usize, Input),
    ListDone(usize),
}

fn step<K>(
    index: usize,
    name: &str,
    event: Result<watcher::Event<K>, watcher::Error>,
    input: impl Fn(&K) -> Input,
) -> Option<Step> {
    match event {
        Ok(watcher::Event::Apply(object)) => Some(Step::Now(News {
            index,
            input: input(&object),
        })),
        Ok(watcher::Event::Delete(_)) => Some(Step::Now(News {
            index,
            input: Input::Absent,
        })),
        Ok(watcher::Event::Init) => Some(Step::Relist(index)),
        Ok(watcher::Event::InitApply(object)) => Some(Step::Listed(index, input(&object))),
        Ok(watcher::Event::InitDone) => Some(Step::ListDone(index)),
        Err(e) => {
            tracing::warn!(
                "the watch of {name} failed (it resumes by itself; the settings in force stay): {e}"
            );
            None
        }
    }
}
