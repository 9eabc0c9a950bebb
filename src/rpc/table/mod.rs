//! Every RPC the server answers, with its REST mappings (grpc-gateway's, from upstream's
//! `google.api.http` options) and its use case: the one place a gRPC method or a REST path is
//! declared. One file per service.

mod accounts;
mod applications;
mod applicationsets;
mod certificates;
mod clusters;
mod notifications;
mod projects;
mod repositories;
mod sessions;

use std::sync::Arc;

use http::Method;

use super::{Body, Handler, Route, Rpc};

/// The whole table.
pub fn table() -> Vec<Arc<Rpc>> {
    // (Every served method is in the schema: `every_served_method_is_in_the_schema` below.)
    let mut rpcs = Vec::new();
    rpcs.extend(sessions::rpcs());
    rpcs.extend(accounts::rpcs());
    rpcs.extend(applications::rpcs());
    rpcs.extend(applicationsets::rpcs());
    rpcs.extend(projects::rpcs());
    rpcs.extend(clusters::rpcs());
    rpcs.extend(repositories::rpcs());
    rpcs.extend(notifications::rpcs());
    rpcs.extend(certificates::rpcs());
    rpcs
}

fn rpc<const N: usize>(path: &'static str, rest: [Route; N], handler: Handler) -> Arc<Rpc> {
    // Every method with a REST mapping other than GET changes something: each call is audited.
    let mutates = rest.iter().any(|r| r.method != Method::GET);
    Arc::new(Rpc {
        path,
        rest: rest.into(),
        handler: match handler {
            Handler::Call(call, read) => Handler::Call(crate::audit::audited(path, mutates, call), read),
            unserved => unserved,
        },
        method: crate::schema::Schema::get().method(path),
    })
}

/// A method not served, with the reason the caller is given.
fn unserved<const N: usize>(path: &'static str, rest: [Route; N], why: &'static str) -> Arc<Rpc> {
    rpc(path, rest, Handler::Unimplemented(why))
}

fn get(path: &'static str) -> Route {
    Route {
        method: Method::GET,
        path,
        body: Body::None,
    }
}

fn delete(path: &'static str) -> Route {
    Route {
        method: Method::DELETE,
        path,
        body: Body::None,
    }
}

fn post(path: &'static str, body: Body) -> Route {
    Route {
        method: Method::POST,
        path,
        body,
    }
}

fn put(path: &'static str, body: Body) -> Route {
    Route {
        method: Method::PUT,
        path,
        body,
    }
}

fn patch(path: &'static str, body: Body) -> Route {
    Route {
        method: Method::PATCH,
        path,
        body,
    }
}

#[cfg(test)]
mod tests {
    use crate::rpc::Handler;

    #[test]
    fn every_served_method_is_in_the_schema() {
        for rpc in super::table() {
            if let Handler::Call(..) = rpc.handler {
                assert!(rpc.method.is_some(), "{} is not in the schema", rpc.path);
            }
        }
    }

    /// Each of Argo CD's operations is served or declared not served, with upstream's REST
    /// mapping: none is a bare 404.
    #[test]
    fn every_upstream_operation_is_in_the_table() {
        let table = super::table();
        let mut missing = Vec::new();
        for line in include_str!("upstream-operations.txt").lines() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let mut parts = line.split(' ');
            let (Some(path), Some(verb), Some(template)) = (parts.next(), parts.next(), parts.next()) else {
                panic!("malformed line {line:?}");
            };
            // Upstream's deprecated aliases (RepositoryService/List beside ListRepositories)
            // share their REST path with the method that replaced them.
            let method = table.iter().any(|rpc| rpc.path == path);
            let route = table
                .iter()
                .flat_map(|rpc| &rpc.rest)
                .any(|r| r.method.as_str() == verb && r.path == template);
            let declared = method && route;
            if !declared {
                missing.push(line);
            }
        }
        assert!(missing.is_empty(), "not in the method table: {missing:#?}");
    }

    #[test]
    fn every_rest_route_is_declared_once() {
        let mut seen = std::collections::HashSet::new();
        for rpc in super::table() {
            for route in &rpc.rest {
                assert!(
                    seen.insert((route.method.clone(), route.path)),
                    "{} {}",
                    route.method,
                    route.path
                );
            }
        }
    }
}
