//! The route label of a request for the per-route metrics: its gRPC method
//! (`/package.Service/Method`) or its REST route template (`/api/v1/applications/{name}`),
//! from a set fixed at startup so the labels stay bounded. Whatever is not in the set is
//! `other`; every UI file is `ui`. A request is labelled by an index: nothing is allocated.

use std::collections::HashMap;
use std::sync::Arc;

use super::protocol::Protocol;
use crate::rpc::Rpc;

/// Paths no route matches: unknown methods, unknown `/api/…` paths, requests refused early.
pub const OTHER: usize = 0;
/// The dashboard and its static files, whatever the path.
pub const UI: usize = 1;

/// gRPC methods served beside the method table.
const EXTRA_GRPC: [&str; 4] = [
    "/grpc.health.v1.Health/Check",
    "/grpc.health.v1.Health/Watch",
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
];

pub struct Routes {
    names: Vec<&'static str>,
    grpc: HashMap<&'static str, usize, foldhash::fast::RandomState>,
    /// The REST routes as axum matches them (the same templates), valued by label index.
    rest: matchit::Router<usize>,
}

impl Routes {
    /// The labels of every gRPC method and REST route the server has.
    pub fn new(rpcs: &[Arc<Rpc>]) -> Self {
        let mut routes = Self {
            names: vec!["other", "ui"],
            grpc: HashMap::default(),
            rest: matchit::Router::new(),
        };
        for path in rpcs.iter().map(|rpc| rpc.path).chain(EXTRA_GRPC) {
            let index = routes.add(path);
            routes.grpc.insert(path, index);
        }
        for (template, label) in crate::api::route_templates(rpcs) {
            let index = routes.add(label);
            // A conflict is the same route under other parameter names: the first label stays.
            let _ = routes.rest.insert(template, index);
        }
        routes
    }

    fn add(&mut self, name: &'static str) -> usize {
        match self.names.iter().position(|n| *n == name) {
            Some(index) => index,
            None => {
                self.names.push(name);
                self.names.len() - 1
            }
        }
    }

    /// How many labels there are (never none: `other` and `ui` always are).
    pub fn count(&self) -> usize {
        self.names.len()
    }

    pub fn name(&self, index: usize) -> &'static str {
        self.names.get(index).copied().unwrap_or("other")
    }

    /// The label of a `protocol` request for `path` (after the root path is stripped).
    pub fn index(&self, protocol: Protocol, path: &str) -> usize {
        match protocol {
            Protocol::Grpc | Protocol::GrpcWeb => self.grpc.get(path).copied().unwrap_or(OTHER),
            Protocol::Rest => self.rest.at(path).map_or(OTHER, |m| *m.value),
            Protocol::Ui => UI,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_methods_and_templates_or_other() {
        let routes = Routes::new(&crate::rpc::table());
        let name = |p, path| routes.name(routes.index(p, path));
        assert_eq!(
            name(Protocol::Grpc, "/version.VersionService/Version"),
            "/version.VersionService/Version"
        );
        assert_eq!(name(Protocol::GrpcWeb, "/no.Such/Method"), "other");
        assert_eq!(
            name(Protocol::Rest, "/api/v1/applications/guestbook"),
            "/api/v1/applications/{name}"
        );
        assert_eq!(name(Protocol::Rest, "/api/version"), "/api/version");
        assert_eq!(name(Protocol::Rest, "/healthz"), "/healthz");
        assert_eq!(name(Protocol::Rest, "/api/v1/nothing/here"), "other");
        assert_eq!(name(Protocol::Ui, "/applications/x"), "ui");
    }
}
