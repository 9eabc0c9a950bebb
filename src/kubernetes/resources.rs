//! Argo CD's custom resources (argoproj.io/v1alpha1) as the API server serves them, and the
//! start's check that their CustomResourceDefinitions are installed.

use anyhow::anyhow;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::ApiResource;

use super::Connection;
use super::errors::{Verb, store_error};

pub const GROUP: &str = "argoproj.io";
pub const VERSION: &str = "v1alpha1";

/// One custom resource of Argo CD's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resource {
    pub kind: &'static str,
    pub plural: &'static str,
}

impl Resource {
    pub const APPLICATION: Resource = Resource {
        kind: "Application",
        plural: "applications",
    };
    pub const APP_PROJECT: Resource = Resource {
        kind: "AppProject",
        plural: "appprojects",
    };
    pub const APPLICATION_SET: Resource = Resource {
        kind: "ApplicationSet",
        plural: "applicationsets",
    };

    /// What kube-rs addresses the resource by.
    pub fn api_resource(self) -> ApiResource {
        ApiResource {
            group: GROUP.to_owned(),
            version: VERSION.to_owned(),
            api_version: format!("{GROUP}/{VERSION}"),
            kind: self.kind.to_owned(),
            plural: self.plural.to_owned(),
        }
    }

    /// The CustomResourceDefinition's name: `applications.argoproj.io`.
    pub fn crd_name(self) -> String {
        format!("{}.{GROUP}", self.plural)
    }

    /// The resource in `namespace`.
    pub fn api(self, connection: &Connection, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(connection.client.clone(), namespace, &self.api_resource())
    }
}

/// Fails, naming every missing one, unless the API server serves each of `resources` in
/// `namespace` (a list of at most one object each: a 404 means the CRD is not installed).
pub async fn check_crds(
    connection: &Connection,
    namespace: &str,
    resources: &[Resource],
) -> anyhow::Result<()> {
    let mut missing = Vec::new();
    for &resource in resources {
        match resource
            .api(connection, namespace)
            .list_metadata(&ListParams::default().limit(1))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => missing.push(resource.crd_name()),
            Err(e) => {
                return Err(anyhow!(
                    "{}",
                    store_error(e, connection, Verb::List, resource.plural, namespace)
                ));
            }
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(anyhow!(
        "the Kubernetes API server at {} does not serve {}: install Argo CD's CustomResourceDefinitions \
         (its manifests/crds) first",
        connection.url,
        missing.join(", ")
    ))
}
