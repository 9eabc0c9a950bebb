//! Upstream services tiphys does not serve at all. Each method is declared with its REST
//! mappings, so that a call of it is authenticated like any other and then refused with
//! `UNIMPLEMENTED` / 501 naming the operation, instead of a bare 404 that reads as a wrong path.
//! (Their messages are not in the schema: nothing here reads a request.)

use std::sync::Arc;

use super::{Route, delete, get, post, unserved};
use crate::rpc::{Body, Rpc};

const NO_APPLICATION_SETS: &str = "tiphys does not store or generate ApplicationSets";

pub fn rpcs() -> Vec<Arc<Rpc>> {
    let none = |path: &'static str, rest: Route, why: &'static str| unserved(path, [rest], why);
    vec![
        none(
            "/applicationset.ApplicationSetService/Get",
            get("/api/v1/applicationsets/{name}"),
            NO_APPLICATION_SETS,
        ),
        none(
            "/applicationset.ApplicationSetService/Generate",
            post("/api/v1/applicationsets/generate", Body::All),
            NO_APPLICATION_SETS,
        ),
        none(
            "/applicationset.ApplicationSetService/List",
            get("/api/v1/applicationsets"),
            NO_APPLICATION_SETS,
        ),
        none(
            "/applicationset.ApplicationSetService/Create",
            post("/api/v1/applicationsets", Body::Field("applicationset")),
            NO_APPLICATION_SETS,
        ),
        none(
            "/applicationset.ApplicationSetService/Delete",
            delete("/api/v1/applicationsets/{name}"),
            NO_APPLICATION_SETS,
        ),
        none(
            "/applicationset.ApplicationSetService/ResourceTree",
            get("/api/v1/applicationsets/{name}/resource-tree"),
            NO_APPLICATION_SETS,
        ),
        none(
            "/applicationset.ApplicationSetService/ListResourceEvents",
            get("/api/v1/applicationsets/{name}/events"),
            NO_APPLICATION_SETS,
        ),
        none(
            "/applicationset.ApplicationSetService/Watch",
            get("/api/v1/stream/applicationsets"),
            NO_APPLICATION_SETS,
        ),
    ]
}
