//! Every RPC the server answers, with its REST mappings (grpc-gateway's, from upstream's
//! `google.api.http` options) and its use case: the one place a gRPC method or a REST path is
//! declared. One file per service.

mod accounts;
mod applications;
mod clusters;
mod projects;
mod repositories;
mod sessions;

use std::sync::Arc;

use http::Method;

use super::{Body, Handler, Route, Rpc};

/// The whole table.
pub fn table() -> Vec<Arc<Rpc>> {
    let mut rpcs = Vec::new();
    rpcs.extend(sessions::rpcs());
    rpcs.extend(accounts::rpcs());
    rpcs.extend(applications::rpcs());
    rpcs.extend(projects::rpcs());
    rpcs.extend(clusters::rpcs());
    rpcs.extend(repositories::rpcs());
    rpcs
}

fn rpc<const N: usize>(path: &'static str, rest: [Route; N], handler: Handler) -> Arc<Rpc> {
    Arc::new(Rpc {
        path,
        rest: rest.into(),
        handler,
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
