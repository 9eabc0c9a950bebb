//! The Kubernetes side of tiphys (`--kube`): the connection to the API server of an Argo CD
//! installation, and Argo CD's own resources on it. The registry serves them from memory,
//! fed by watches (`registry/kube.rs`); this module knows how to reach them and how to name
//! what went wrong.

mod app_namespaces;
pub mod cluster_auth;
mod connect;
mod errors;
mod resources;

pub use self::app_namespaces::AppNamespaces;
pub use self::connect::{Connection, KubeOptions};
pub use self::errors::{Verb, store_error};
pub use self::resources::{Resource, check_crds};
