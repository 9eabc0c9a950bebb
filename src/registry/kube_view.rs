//! The kinds an Argo CD installation keeps in Kubernetes (`--kube`): Applications, AppProjects
//! and ApplicationSets, as the argoproj.io/v1alpha1 custom resources that upstream's
//! application-controller reads and writes too (upstream: pkg/apis/application/v1alpha1,
//! server/application/application.go, server/project/project.go); clusters, repositories and
//! credential templates as labelled Secrets (`kube_secrets.rs`); repository certificates and
//! GnuPG keys as the entries of three ConfigMaps (`kube_configmaps.rs`).
//!
//! The view holds them as it holds every kind, fed by one watch per kind (kube-rs's watcher:
//! a list, then a watch that resumes from the last resourceVersion and lists again when the
//! API server no longer has it), so lists, gets and watches are answered from memory. An
//! object's revision is its Kubernetes `resourceVersion` (etcd's mod revision, a number in
//! every API server release), and each kind keeps its own history of events, since the watches
//! of different kinds arrive in no common order.
//!
//! Writes go to the API server, one object per request, with the `resourceVersion` the view
//! had as the precondition: a 409 makes the registry's write loop wait for the watch to catch
//! up and plan again, so a caller's stale `resourceVersion` is still a conflict and nothing is
//! overwritten blindly. A write returns once the watch has brought it into the view (bounded),
//! so the writer's next read sees it. Conditions that span objects (an application's project
//! exists) are checked on the view before the write, not compared at the commit: Kubernetes has
//! no multi-object transaction, and upstream's argocd-server checks them the same way.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt as _;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams, Preconditions};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher;
use serde_json::Value;

use super::argocd_secrets::SecretType;
use super::doc::{Doc, DocRef, Draft};
use super::kind::{Key, Kind};
use super::kube_configmaps::{self, CONFIG_MAP_KINDS, CertMap};
use super::kube_secrets::{self, SECRET_KINDS, SecretFailure, SecretWrite};
use super::watch::{EventType, History};
use super::{Applied, Planned, Registry, RegistryError, State};
use crate::kubernetes::{AppNamespaces, Connection, Resource, Verb, check_crds, store_error};
use crate::schema::{Schema, SchemaError};
use crate::store::StoreError;

/// How long the start waits for each kind's first list.
const FIRST_LIST: Duration = Duration::from_secs(60);
/// How long a write waits for its watch to bring the object into the view.
const OWN_WRITE_WAIT: Duration = Duration::from_secs(5);
/// How long one write waits for the API server's answer. Past it the write is reported as not
/// done, though the API server may still carry it out: the watch then brings it into the view.
const WRITE_ANSWER: Duration = Duration::from_secs(10);
/// How long a write that lost a conflict waits for the view to move before planning again.
const CATCH_UP_WAIT: Duration = Duration::from_millis(500);

/// The custom resources Kubernetes holds, and their kinds.
const CUSTOM_KINDS: [(Kind, Resource); 3] = [
    (Kind::Application, Resource::APPLICATION),
    (Kind::AppProject, Resource::APP_PROJECT),
    (Kind::ApplicationSet, Resource::APPLICATION_SET),
];

/// Where Kubernetes keeps the objects of one kind.
#[derive(Clone, Copy, Debug)]
enum Source {
    Custom(Resource),
    /// Secrets of the control namespace with this `argocd.argoproj.io/secret-type`.
    Secrets(SecretType),
    /// One ConfigMap of the control namespace, each of its entries an object.
    ConfigMap(CertMap),
}

impl Source {
    /// What messages call the objects.
    fn describe(self) -> String {
        match self {
            Source::Custom(resource) => resource.crd_name(),
            Source::Secrets(t) => format!("Secrets labelled {}", kube_secrets::selector(t)),
            Source::ConfigMap(map) => format!("ConfigMap {}", map.name()),
        }
    }

    /// The resource as RBAC names it.
    fn plural(self) -> &'static str {
        match self {
            Source::Custom(resource) => resource.plural,
            Source::Secrets(_) => "secrets",
            Source::ConfigMap(_) => "configmaps",
        }
    }

    fn watch_config(self) -> watcher::Config {
        match self {
            Source::Custom(_) => watcher::Config::default(),
            Source::Secrets(t) => watcher::Config::default().labels(&kube_secrets::selector(t)),
            Source::ConfigMap(map) => {
                watcher::Config::default().fields(&format!("metadata.name={}", map.name()))
            }
        }
    }
}

/// Every kind Kubernetes holds, and where (certificates in two ConfigMaps).
fn sources() -> impl Iterator<Item = (Kind, Source)> {
    CUSTOM_KINDS
        .into_iter()
        .map(|(k, r)| (k, Source::Custom(r)))
        .chain(SECRET_KINDS.into_iter().map(|(k, t)| (k, Source::Secrets(t))))
        .chain(
            CONFIG_MAP_KINDS
                .into_iter()
                .map(|(k, m)| (k, Source::ConfigMap(m))),
        )
}

fn source_of(kind: Kind) -> Option<Source> {
    sources().find(|(k, _)| *k == kind).map(|(_, s)| s)
}

/// The kinds that live in the enabled application namespaces too.
const WATCHED_EVERYWHERE: [Resource; 2] = [Resource::APPLICATION, Resource::APPLICATION_SET];

/// How the registry reaches the kinds Kubernetes holds.
pub(super) struct KubeSide {
    connection: Connection,
    /// The control namespace: where the watched objects live.
    namespace: String,
    /// `--application-namespaces`: when any is enabled, Applications and ApplicationSets are
    /// watched cluster-wide and those of the namespaces not enabled are dropped as they arrive
    /// (upstream's argocd-server serves both kinds in the same namespaces).
    app_namespaces: AppNamespaces,
    /// Bumped whenever a watch changes the view: what a write that lost a conflict waits for.
    moved: tokio::sync::watch::Sender<u64>,
}

/// A kind Kubernetes holds, as the view has it.
pub(super) struct KubeKind {
    /// The highest `resourceVersion` its watch delivered.
    pub rv: u64,
    pub history: History,
}

impl KubeSide {
    pub(super) fn holds(kind: Kind) -> bool {
        source_of(kind).is_some()
    }

    /// Whether the view takes in `kind` from `namespace`: Applications and ApplicationSets only
    /// from the control namespace and the enabled ones, everything else from the control
    /// namespace (a cluster-wide watch delivers only those two kinds from elsewhere).
    fn serves(&self, kind: Kind, namespace: &str) -> bool {
        !matches!(kind, Kind::Application | Kind::ApplicationSet)
            || self.app_namespaces.enabled(namespace, &self.namespace)
    }

    /// Where Applications and ApplicationSets are watched: cluster-wide once a namespace besides
    /// the control namespace is enabled (as upstream's informers), else the control namespace.
    fn watches_all(&self, source: Source) -> bool {
        matches!(source, Source::Custom(r) if WATCHED_EVERYWHERE.contains(&r))
            && !self.app_namespaces.is_empty()
    }

    /// The watch of `source`.
    fn watch_api(&self, source: Source) -> Api<DynamicObject> {
        match source {
            Source::Custom(resource) if self.watches_all(source) => {
                Api::all_with(self.connection.client.clone(), &resource.api_resource())
            }
            _ => self.api(source, &self.namespace),
        }
    }

    /// `source` in `namespace` (a write goes to its object's namespace).
    fn api(&self, source: Source, namespace: &str) -> Api<DynamicObject> {
        match source {
            Source::Custom(resource) => resource.api(&self.connection, namespace),
            Source::Secrets(_) => Api::namespaced_with(
                self.connection.client.clone(),
                namespace,
                &kube_secrets::secret_resource(),
            ),
            Source::ConfigMap(_) => Api::namespaced_with(
                self.connection.client.clone(),
                namespace,
                &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
            ),
        }
    }

    fn error(&self, err: kube::Error, verb: Verb, source: Source) -> StoreError {
        self.error_in(err, verb, source, &self.namespace)
    }

    fn error_in(&self, err: kube::Error, verb: Verb, source: Source, namespace: &str) -> StoreError {
        store_error(err, &self.connection, verb, source.plural(), namespace)
    }

    /// Sends one planned change; the object as the API server wrote it (`None`: deleted, or
    /// being deleted once its finalizers are done).
    async fn write(&self, resource: Resource, plan: Planned) -> Result<Option<DynamicObject>, RegistryError> {
        let source = Source::Custom(resource);
        let namespace = plan.key.namespace.clone();
        let api = self.api(source, &namespace);
        let name = plan.key.name.clone();
        Ok(match (&plan.draft, &plan.current) {
            (Some(draft), None) => {
                let object = object_of(resource, draft, None)?;
                match api.create(&PostParams::default(), &object).await {
                    Err(kube::Error::Api(status)) if status.code == 409 => {
                        return Err(RegistryError::AlreadyExists(plan.key));
                    }
                    other => Some(other.map_err(|e| self.error_in(e, Verb::Create, source, &namespace))?),
                }
            }
            (Some(draft), Some(current)) => {
                let object = object_of(resource, draft, Some(current.rv))?;
                match api.replace(&name, &PostParams::default(), &object).await {
                    Err(kube::Error::Api(status)) if status.code == 404 => {
                        return Err(RegistryError::NotFound(plan.key));
                    }
                    other => Some(other.map_err(|e| self.error_in(e, Verb::Update, source, &namespace))?),
                }
            }
            (None, Some(current)) => {
                let params = DeleteParams {
                    preconditions: Some(Preconditions {
                        resource_version: Some(current.rv.to_string()),
                        uid: None,
                    }),
                    ..DeleteParams::default()
                };
                match api.delete(&name, &params).await {
                    Err(kube::Error::Api(status)) if status.code == 404 => {
                        return Err(RegistryError::NotFound(plan.key));
                    }
                    // A deletion that finalizers hold back goes on in the background: the
                    // object stays, with a deletionTimestamp, until the controller is done.
                    other => {
                        other.map_err(|e| self.error_in(e, Verb::Delete, source, &namespace))?;
                        None
                    }
                }
            }
            (None, None) => return Err(RegistryError::NotFound(plan.key)),
        })
    }

    /// Sends the planned change of a kind kept in Secrets.
    async fn write_secret(
        &self,
        source: Source,
        planned: Vec<Planned>,
    ) -> Result<Option<DynamicObject>, RegistryError> {
        let write = SecretWrite::of(planned).map_err(|why| invalid_write(&why))?;
        kube_secrets::write_secret(&self.api(source, &self.namespace), write)
            .await
            .map_err(|failure| match failure {
                SecretFailure::Api(e, verb) => self.error(e, verb, source).into(),
                SecretFailure::Registry(e) => e,
            })
    }
}

impl Registry {
    /// [`Registry::open`] for an installation: applications, projects and application sets are
    /// Kubernetes's (watched from `namespace`), everything else the store's. Fails, naming
    /// them, when a CustomResourceDefinition is missing or a first list does not arrive.
    pub async fn open_on_kube(
        store: Arc<dyn crate::store::Store>,
        keys: Arc<super::SecretsKeys>,
        connection: Connection,
        namespace: &str,
        app_namespaces: AppNamespaces,
    ) -> anyhow::Result<Arc<Self>> {
        Self::require_kube_kinds(&connection, namespace, &app_namespaces).await?;
        let side = KubeSide {
            connection,
            namespace: namespace.to_owned(),
            app_namespaces,
            moved: tokio::sync::watch::Sender::new(0),
        };
        let registry = Self::open_with(store, keys, Some(side)).await?;
        let mut ready = Vec::new();
        for (kind, source) in sources() {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let task = tokio::spawn(run_watch(Arc::downgrade(&registry), kind, source, tx));
            registry.adopt(task.abort_handle());
            ready.push((source, rx));
        }
        for (source, rx) in ready {
            match tokio::time::timeout(FIRST_LIST, rx).await {
                Ok(Ok(())) => {}
                _ => anyhow::bail!(
                    "the first list of {} from the Kubernetes API server did not arrive within {FIRST_LIST:?}",
                    source.describe()
                ),
            }
        }
        Ok(registry)
    }

    /// Fails, naming every missing one, unless the API server serves the custom resources
    /// the registry holds there, and naming the verb, unless this server may list its Secrets:
    /// the first thing a start on an installation checks. With `app_namespaces` it must also
    /// list and watch Applications and ApplicationSets cluster-wide.
    pub async fn require_kube_kinds(
        connection: &Connection,
        namespace: &str,
        app_namespaces: &AppNamespaces,
    ) -> anyhow::Result<()> {
        let resources: Vec<Resource> = CUSTOM_KINDS.iter().map(|(_, r)| *r).collect();
        check_crds(connection, namespace, &resources).await?;
        for resource in WATCHED_EVERYWHERE.iter().filter(|_| !app_namespaces.is_empty()) {
            let objects: Api<DynamicObject> =
                Api::all_with(connection.client.clone(), &resource.api_resource());
            let params = kube::api::ListParams::default().limit(1);
            let plural = resource.plural;
            objects
                .list_metadata(&params)
                .await
                .map_err(|e| anyhow::anyhow!("{}", store_error(e, connection, Verb::List, plural, "")))?;
            // A watch is its own verb to RBAC: ask for one that ends at once.
            let watch = kube::api::WatchParams::default().timeout(1);
            // Refused at once, or granted: the stream itself is not needed.
            let _granted = objects
                .watch_metadata(&watch, "0")
                .await
                .map_err(|e| anyhow::anyhow!("{}", store_error(e, connection, Verb::Watch, plural, "")))?;
        }
        let secrets: Api<DynamicObject> = Api::namespaced_with(
            connection.client.clone(),
            namespace,
            &kube_secrets::secret_resource(),
        );
        let params = kube::api::ListParams::default()
            .labels(&kube_secrets::selector(SecretType::Cluster))
            .limit(1);
        secrets.list_metadata(&params).await.map_err(|e| {
            anyhow::anyhow!("{}", store_error(e, connection, Verb::List, "secrets", namespace))
        })?;
        Ok(())
    }

    /// Writes one planned change of a kind Kubernetes holds, on the condition that the object
    /// is still at the revision the view had; returns once the view has it (bounded).
    pub(super) async fn commit_kube(
        &self,
        planned: Vec<Planned>,
    ) -> Result<Vec<Option<DocRef>>, RegistryError> {
        let side = self
            .kube
            .as_ref()
            .ok_or_else(|| invalid_write("no Kubernetes connection"))?;
        let kind = planned
            .first()
            .map(|p| p.key.kind)
            .ok_or_else(|| invalid_write("nothing to write"))?;
        let source = source_of(kind).ok_or_else(|| invalid_write("not a Kubernetes kind"))?;
        if let Source::ConfigMap(_) = source {
            return self.commit_config_maps(side, kind, &planned).await;
        }
        let key = planned
            .iter()
            .find(|p| p.draft.is_some())
            .unwrap_or(&planned[0])
            .key
            .clone();
        // Which answers are the new state: a move (a deletion and a creation under one Secret)
        // answers `None` for the URL it left.
        let shape: Vec<bool> = planned.iter().map(|p| p.draft.is_some()).collect();
        let leaving: Vec<(Key, u64)> = planned
            .iter()
            .filter(|p| p.draft.is_none())
            .filter_map(|p| p.current.as_ref().map(|c| (p.key.clone(), c.rv)))
            .collect();
        let write = async {
            match source {
                Source::Custom(resource) => {
                    let [plan] = <[Planned; 1]>::try_from(planned)
                        .map_err(|_| invalid_write("a write to Kubernetes changes one object at a time"))?;
                    side.write(resource, plan).await
                }
                Source::Secrets(_) => side.write_secret(source, planned).await,
                Source::ConfigMap(_) => Err(invalid_write("ConfigMaps are written by commit_config_maps")),
            }
        };
        let written = tokio::time::timeout(WRITE_ANSWER, write).await.map_err(|_| {
            StoreError::Unavailable(format!(
                "the Kubernetes API server at {} did not answer within {WRITE_ANSWER:?} (the write of \
                     {key} may still take effect)",
                side.connection.url
            ))
        })??;
        let doc = match written {
            Some(object) if shape.contains(&true) => {
                let doc = doc_of(kind, object).map_err(|err| RegistryError::Invalid { key, err })?;
                self.wait_for_kube(kind, doc.rv).await;
                Some(doc)
            }
            // Deleted, or a Secret no longer labelled: gone once the watch says so.
            _ => None,
        };
        for (key, rv) in leaving {
            self.wait_for_kube_leave(&key, rv).await;
        }
        Ok(shape
            .into_iter()
            .map(|new| if new { doc.clone() } else { None })
            .collect())
    }

    /// Writes planned changes of objects kept in ConfigMaps, one ConfigMap after the other (a
    /// deletion of every certificate touches two: as upstream, the second may fail after the
    /// first was written); returns once the view has them (bounded).
    async fn commit_config_maps(
        &self,
        side: &KubeSide,
        kind: Kind,
        planned: &[Planned],
    ) -> Result<Vec<Option<DocRef>>, RegistryError> {
        let mut answers = vec![None; planned.len()];
        let mut maps: Vec<CertMap> = Vec::new();
        for map in planned.iter().filter_map(|p| CertMap::holding(&p.key)) {
            if !maps.contains(&map) {
                maps.push(map);
            }
        }
        let api: Api<k8s_openapi::api::core::v1::ConfigMap> =
            Api::namespaced(side.connection.client.clone(), &side.namespace);
        for map in maps {
            let source = Source::ConfigMap(map);
            let mine: Vec<(usize, &Planned)> = planned
                .iter()
                .enumerate()
                .filter(|(_, p)| CertMap::holding(&p.key) == Some(map))
                .collect();
            let plans: Vec<&Planned> = mine.iter().map(|(_, p)| *p).collect();
            let written = tokio::time::timeout(WRITE_ANSWER, kube_configmaps::write(&api, map, &plans))
                .await
                .map_err(|_| {
                    StoreError::Unavailable(format!(
                        "the Kubernetes API server at {} did not answer within {WRITE_ANSWER:?} (the \
                         write of ConfigMap {} may still take effect)",
                        side.connection.url,
                        map.name()
                    ))
                })?
                .map_err(|failure| match failure {
                    SecretFailure::Api(e, verb) => RegistryError::from(side.error(e, verb, source)),
                    SecretFailure::Registry(e) => e,
                })?;
            let rv = kube_configmaps::rv_of(&written.metadata);
            let docs = map.docs(&written.data.unwrap_or_default(), rv);
            self.wait_for_kube(kind, rv).await;
            for (i, plan) in mine {
                if plan.draft.is_some() {
                    answers[i] = docs.iter().find(|d| d.key == plan.key).cloned();
                } else if let Some(current) = &plan.current {
                    self.wait_for_kube_leave(&plan.key, current.rv).await;
                }
            }
        }
        Ok(answers)
    }

    /// Takes what ConfigMap `map` now holds (`None`: it is gone) into the view, at revision
    /// `at`: only the entries that changed, appeared or went away become events.
    fn config_map_now(&self, kind: Kind, map: CertMap, object: Option<&DynamicObject>, at: u64) {
        let docs = object.map_or_else(Vec::new, |o| map.docs(&kube_configmaps::data_of(o), at));
        let (changes, at) = {
            let state = self.read();
            let held = state.docs.get(&kind);
            let listed: HashSet<&Key> = docs.iter().map(|d| &d.key).collect();
            let mut changes: Vec<(Key, Option<DocRef>)> = held
                .into_iter()
                .flat_map(BTreeMap::values)
                .filter(|doc| CertMap::holding(&doc.key) == Some(map) && !listed.contains(&doc.key))
                .map(|doc| (doc.key.clone(), None))
                .collect();
            for doc in &docs {
                let slot = (doc.key.namespace.clone(), doc.key.name.clone());
                if held
                    .and_then(|m| m.get(&slot))
                    .is_none_or(|current| current.value() != doc.value())
                {
                    changes.push((doc.key.clone(), Some(Arc::clone(doc))));
                }
            }
            (changes, at.max(state.kube.get(&kind).map_or(0, |k| k.rv)))
        };
        self.publish_kube(kind, changes, at);
    }

    /// After a lost conflict: waits (briefly) for a watch to change the view.
    pub(super) async fn kube_catch_up(&self) {
        if let Some(side) = &self.kube {
            let mut moved = side.moved.subscribe();
            let _ = tokio::time::timeout(CATCH_UP_WAIT, moved.changed()).await;
        }
    }

    /// Waits (bounded) until the watch of `kind` has delivered revision `rv`.
    pub(super) async fn wait_for_kube(&self, kind: Kind, rv: u64) {
        let Some(side) = &self.kube else {
            return;
        };
        let mut moved = side.moved.subscribe();
        let reached = async {
            while self.read().kube.get(&kind).is_none_or(|k| k.rv < rv) {
                if moved.changed().await.is_err() {
                    return;
                }
            }
        };
        if tokio::time::timeout(OWN_WRITE_WAIT, reached).await.is_err() {
            tracing::warn!(
                "the watch of {kind} has not brought this server's own write at resourceVersion {rv} \
                 within {OWN_WRITE_WAIT:?}"
            );
        }
    }

    /// Waits (bounded) until the view no longer has `key` at revision `rv`: deleted, moved,
    /// or marked for deletion while finalizers hold it.
    async fn wait_for_kube_leave(&self, key: &Key, rv: u64) {
        let Some(side) = &self.kube else {
            return;
        };
        let mut moved = side.moved.subscribe();
        let left = async {
            while self.get(key).is_some_and(|doc| doc.rv == rv) {
                if moved.changed().await.is_err() {
                    return;
                }
            }
        };
        if tokio::time::timeout(OWN_WRITE_WAIT, left).await.is_err() {
            tracing::warn!(
                "the watch has not brought this server's own deletion of {key} within {OWN_WRITE_WAIT:?}"
            );
        }
    }

    /// Publishes changes of `kind` a watch delivered, at revision `at`.
    fn publish_kube(&self, kind: Kind, changes: Vec<(Key, Option<DocRef>)>, at: u64) {
        let mut state = self.write_state();
        let mut applied = Vec::with_capacity(changes.len());
        for (key, doc) in changes {
            let slot = (key.namespace.clone(), key.name.clone());
            let current = state.docs.get(&kind).and_then(|m| m.get(&slot)).cloned();
            let change = match (doc, current) {
                (Some(doc), current) => {
                    if current.as_ref().is_some_and(|c| c.rv >= doc.rv) {
                        continue;
                    }
                    let event = if current.is_some() {
                        EventType::Modified
                    } else {
                        EventType::Added
                    };
                    doc.encode_proto()
                        .map(|proto| Applied::written(key.clone(), doc, event, proto))
                        .map_err(|e| e.to_string())
                }
                (None, Some(current)) => {
                    Applied::deleted(key.clone(), &current, at).map_err(|e| e.to_string())
                }
                (None, None) => continue,
            };
            match change {
                Ok(change) => applied.push(change),
                Err(why) => tracing::warn!("{key} from Kubernetes is not served: {why}"),
            }
        }
        state.apply(applied, at);
        if let Some(k) = state.kube.get_mut(&kind) {
            k.rv = k.rv.max(at);
        }
        drop(state);
        if let Some(side) = &self.kube {
            side.moved.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Replaces what the view has of `kind` with a fresh list (the watch started or had to list
    /// again): what changed, appeared or went away becomes events at the list's revision.
    fn relisted(&self, kind: Kind, docs: Vec<DocRef>) {
        let listed: HashSet<&Key> = docs.iter().map(|d| &d.key).collect();
        let (gone, at) = {
            let state = self.read();
            let gone: Vec<_> = state
                .docs
                .get(&kind)
                .into_iter()
                .flat_map(BTreeMap::values)
                .filter(|doc| !listed.contains(&doc.key))
                .map(|doc| (doc.key.clone(), None))
                .collect();
            let listed_at = docs.iter().map(|d| d.rv).max().unwrap_or(0);
            (gone, listed_at.max(state.kube.get(&kind).map_or(0, |k| k.rv)))
        };
        let mut changes = gone;
        changes.extend(docs.into_iter().map(|doc| (doc.key.clone(), Some(doc))));
        self.publish_kube(kind, changes, at);
    }
}

impl Registry {
    /// The key of the object a deleted Kubernetes object was: a custom resource's name, or the
    /// URL of the object a Secret declared (found by the Secret's name when what it held last no
    /// longer decodes).
    fn key_of_deleted(&self, kind: Kind, source: Source, object: &DynamicObject) -> Option<Key> {
        let name = object.metadata.name.as_deref().unwrap_or_default();
        match source {
            Source::Custom(_) => Some(Key::new(
                kind,
                object.metadata.namespace.as_deref().unwrap_or_default(),
                name,
            )),
            Source::Secrets(_) => {
                kube_secrets::key_of_secret(kind, object).or_else(|| self.declared_by(kind, name))
            }
            Source::ConfigMap(_) => None,
        }
    }

    /// The key of the object of `kind` the view has from Secret `name`. Secrets are few and
    /// change rarely, so a scan is enough.
    fn declared_by(&self, kind: Kind, name: &str) -> Option<Key> {
        let state = self.read();
        state
            .docs
            .get(&kind)?
            .values()
            .find(|doc| {
                doc.value()
                    .get(super::argocd_secrets::SECRET_NAME)
                    .and_then(Value::as_str)
                    == Some(name)
            })
            .map(|doc| doc.key.clone())
    }
}

impl State {
    /// Makes the kinds Kubernetes holds start empty (their watches fill them): whatever the
    /// store holds of them is not served.
    pub(super) fn hand_to_kube(&mut self) {
        for (kind, _) in sources() {
            if let Some(stale) = self.docs.remove(&kind).filter(|m| !m.is_empty()) {
                tracing::warn!(
                    "{} {kind} in the data dir are not served: with --kube, Kubernetes holds them",
                    stale.len()
                );
            }
            self.kube.insert(
                kind,
                KubeKind {
                    rv: 0,
                    history: History::new(0),
                },
            );
        }
    }

    /// Takes over what `old` has of the kinds Kubernetes holds (a reload of the store's kinds).
    pub(super) fn keep_kube_of(&mut self, old: &mut State) {
        self.kube = std::mem::take(&mut old.kube);
        for kind in self.kube.keys() {
            match old.docs.remove(kind) {
                Some(docs) => self.docs.insert(*kind, docs),
                None => self.docs.remove(kind),
            };
        }
    }

    /// The revision lists of `kind` are current at.
    pub(super) fn rv_of(&self, kind: Kind) -> u64 {
        self.kube.get(&kind).map_or(self.rv, |k| k.rv)
    }

    /// The history watches of `kind` resume from.
    pub(super) fn history_of(&self, kind: Kind) -> &History {
        self.kube.get(&kind).map_or(&self.history, |k| &k.history)
    }

    pub(super) fn history_of_mut(&mut self, kind: Kind) -> &mut History {
        match self.kube.get_mut(&kind) {
            Some(k) => &mut k.history,
            None => &mut self.history,
        }
    }
}

fn invalid_write(why: &str) -> RegistryError {
    RegistryError::Store(StoreError::Invalid(why.to_owned()))
}

/// Follows `kind` until the registry is dropped; says `ready` after the first full list.
async fn run_watch(
    registry: Weak<Registry>,
    kind: Kind,
    source: Source,
    ready: tokio::sync::oneshot::Sender<()>,
) {
    let api = {
        let Some(view) = registry.upgrade() else {
            return;
        };
        let Some(side) = &view.kube else {
            return;
        };
        side.watch_api(source)
    };
    if let Source::ConfigMap(map) = source {
        return follow_config_map(registry, kind, map, api, ready).await;
    }
    let mut ready = Some(ready);
    let mut listing: Option<Vec<DocRef>> = None;
    let mut events = watcher(api, source.watch_config()).default_backoff().boxed();
    while let Some(event) = events.next().await {
        let Some(view) = registry.upgrade() else {
            return;
        };
        match event {
            Ok(watcher::Event::Init) => listing = Some(Vec::new()),
            Ok(watcher::Event::InitApply(object)) => {
                if let (Some(list), Some(doc)) = (listing.as_mut(), view.taken_in(kind, object)) {
                    list.push(doc);
                }
            }
            Ok(watcher::Event::InitDone) => {
                view.relisted(kind, listing.take().unwrap_or_default());
                view.set_kube_following(true);
                if let Some(ready) = ready.take() {
                    let _ = ready.send(());
                }
            }
            Ok(watcher::Event::Apply(object)) => {
                let name = object.metadata.name.clone().unwrap_or_default();
                if let Some(doc) = view.taken_in(kind, object) {
                    let at = doc.rv;
                    let mut changes = Vec::with_capacity(2);
                    // A Secret that now declares another URL: the object moved.
                    if let Source::Secrets(_) = source
                        && let Some(old) = view.declared_by(kind, &name).filter(|old| *old != doc.key)
                    {
                        changes.push((old, None));
                    }
                    changes.push((doc.key.clone(), Some(doc)));
                    view.publish_kube(kind, changes, at);
                }
            }
            Ok(watcher::Event::Delete(object)) => {
                let Some(key) = view.key_of_deleted(kind, source, &object) else {
                    continue;
                };
                if !view
                    .kube
                    .as_ref()
                    .is_some_and(|side| side.serves(kind, &key.namespace))
                {
                    continue;
                }
                let at = object
                    .metadata
                    .resource_version
                    .as_deref()
                    .and_then(|rv| rv.parse().ok())
                    .unwrap_or(0);
                view.publish_kube(kind, vec![(key, None)], at);
            }
            Err(e) => {
                view.set_kube_following(false);
                tracing::warn!(
                    "the watch of {} on the Kubernetes API server failed (it resumes by itself): {e}",
                    source.describe()
                );
            }
        }
    }
}

/// [`run_watch`] of a ConfigMap whose entries are objects of `kind`: each event is the whole
/// ConfigMap, so each is taken in as a list of its entries.
async fn follow_config_map(
    registry: Weak<Registry>,
    kind: Kind,
    map: CertMap,
    api: Api<DynamicObject>,
    ready: tokio::sync::oneshot::Sender<()>,
) {
    let mut ready = Some(ready);
    let mut listing: Option<Option<DynamicObject>> = None;
    let mut events = watcher(api, Source::ConfigMap(map).watch_config())
        .default_backoff()
        .boxed();
    while let Some(event) = events.next().await {
        let Some(view) = registry.upgrade() else {
            return;
        };
        match event {
            Ok(watcher::Event::Init) => listing = Some(None),
            Ok(watcher::Event::InitApply(object)) => listing = Some(Some(object)),
            Ok(watcher::Event::InitDone) => {
                let object = listing.take().flatten();
                let at = object.as_ref().map_or(0, |o| kube_configmaps::rv_of(&o.metadata));
                view.config_map_now(kind, map, object.as_ref(), at);
                view.set_kube_following(true);
                if let Some(ready) = ready.take() {
                    let _ = ready.send(());
                }
            }
            Ok(watcher::Event::Apply(object)) => {
                let at = kube_configmaps::rv_of(&object.metadata);
                view.config_map_now(kind, map, Some(&object), at);
            }
            Ok(watcher::Event::Delete(object)) => {
                view.config_map_now(kind, map, None, kube_configmaps::rv_of(&object.metadata));
            }
            Err(e) => {
                view.set_kube_following(false);
                tracing::warn!(
                    "the watch of ConfigMap {} on the Kubernetes API server failed (it resumes by itself): {e}",
                    map.name()
                );
            }
        }
    }
}

impl Registry {
    /// The document of a watched object the view serves; `None` for an Application of a
    /// namespace not enabled (never served, so not even decoded) or one that does not decode.
    fn taken_in(&self, kind: Kind, object: DynamicObject) -> Option<DocRef> {
        let namespace = object.metadata.namespace.as_deref().unwrap_or_default();
        if !self
            .kube
            .as_ref()
            .is_some_and(|side| side.serves(kind, namespace))
        {
            return None;
        }
        decoded(kind, object)
    }
}

/// The document of `object`, or `None` (reported) when it does not decode: one bad object
/// does not keep the others from being served.
fn decoded(kind: Kind, object: DynamicObject) -> Option<DocRef> {
    let name = format!(
        "{}/{}",
        object.metadata.namespace.as_deref().unwrap_or_default(),
        object.metadata.name.as_deref().unwrap_or_default()
    );
    match doc_of(kind, object) {
        Ok(doc) => Some(doc),
        Err(err) => {
            tracing::warn!("{kind} {name} from Kubernetes does not decode and is not served: {err}");
            None
        }
    }
}

/// The view's document of an object from Kubernetes (a Secret's: `kube_secrets.rs`).
pub(super) fn doc_of(kind: Kind, object: DynamicObject) -> Result<DocRef, SchemaError> {
    match source_of(kind) {
        Some(Source::Secrets(_)) => kube_secrets::doc_of_secret(kind, object),
        _ => custom_doc(kind, object),
    }
}

/// The view's document of a custom resource: its JSON in the schema's canonical form (what
/// tiphys's own store holds), at its `resourceVersion`. `managedFields` are left out: they are
/// the API server's bookkeeping, and a replace without them keeps them.
fn custom_doc(kind: Kind, object: DynamicObject) -> Result<DocRef, SchemaError> {
    let key = Key::new(
        kind,
        object.metadata.namespace.as_deref().unwrap_or_default(),
        object.metadata.name.as_deref().unwrap_or_default(),
    );
    let rv: u64 = object
        .metadata
        .resource_version
        .as_deref()
        .unwrap_or_default()
        .parse()
        .map_err(|_| SchemaError::new("metadata.resourceVersion", "not a number"))?;
    let mut value =
        serde_json::to_value(&object).map_err(|e| SchemaError::new("", format!("cannot be read: {e}")))?;
    if let Some(map) = value.as_object_mut() {
        map.remove("apiVersion");
        map.remove("kind");
        if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
    }
    let schema = Schema::get();
    let desc = schema.message(kind.message())?;
    let canonical = schema.to_json(&schema.from_json(&desc, &value)?);
    let draft = Draft::new(key, &canonical)?;
    Ok(Arc::new(Doc::at(&draft, rv)?))
}

/// The custom resource of a draft: replacing revision `rv` (its precondition), or created
/// (`None`: the API server sets uid, creationTimestamp and generation).
fn object_of(resource: Resource, draft: &Draft, rv: Option<u64>) -> Result<DynamicObject, RegistryError> {
    let invalid = |e: serde_json::Error| RegistryError::Invalid {
        key: draft.key.clone(),
        err: SchemaError::new("", e.to_string()),
    };
    let mut value: Value = serde_json::from_slice(&draft.json).map_err(invalid)?;
    if let Some(map) = value.as_object_mut() {
        map.insert(
            "apiVersion".to_owned(),
            Value::String(resource.api_resource().api_version),
        );
        map.insert("kind".to_owned(), Value::String(resource.kind.to_owned()));
        if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            match rv {
                Some(rv) => {
                    meta.insert("resourceVersion".to_owned(), Value::String(rv.to_string()));
                }
                None => {
                    for field in ["resourceVersion", "uid", "creationTimestamp", "generation"] {
                        meta.remove(field);
                    }
                }
            }
        }
    }
    serde_json::from_value(value).map_err(invalid)
}
