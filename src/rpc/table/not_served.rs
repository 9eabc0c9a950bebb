//! Upstream services tiphys does not serve at all. Each method is declared with its REST
//! mappings, so that a call of it is authenticated like any other and then refused with
//! `UNIMPLEMENTED` / 501 naming the operation, instead of a bare 404 that reads as a wrong path.
//! (Their messages are not in the schema: nothing here reads a request.)

use std::sync::Arc;

use super::{Route, delete, get, post, unserved};
use crate::rpc::{Body, Rpc};

const NO_CERTIFICATES: &str =
    "tiphys does not contact repositories, so it keeps no repository TLS certificates or SSH known hosts";
const NO_GPG_KEYS: &str = "tiphys does not verify commit signatures, so it keeps no GnuPG keys";

pub fn rpcs() -> Vec<Arc<Rpc>> {
    let none = |path: &'static str, rest: Route, why: &'static str| unserved(path, [rest], why);
    vec![
        none(
            "/certificate.CertificateService/ListCertificates",
            get("/api/v1/certificates"),
            NO_CERTIFICATES,
        ),
        none(
            "/certificate.CertificateService/CreateCertificate",
            post("/api/v1/certificates", Body::Field("certificates")),
            NO_CERTIFICATES,
        ),
        none(
            "/certificate.CertificateService/DeleteCertificate",
            delete("/api/v1/certificates"),
            NO_CERTIFICATES,
        ),
        none("/gpgkey.GPGKeyService/List", get("/api/v1/gpgkeys"), NO_GPG_KEYS),
        none(
            "/gpgkey.GPGKeyService/Get",
            get("/api/v1/gpgkeys/{keyID}"),
            NO_GPG_KEYS,
        ),
        none(
            "/gpgkey.GPGKeyService/Create",
            post("/api/v1/gpgkeys", Body::Field("publickey")),
            NO_GPG_KEYS,
        ),
        none(
            "/gpgkey.GPGKeyService/Delete",
            delete("/api/v1/gpgkeys"),
            NO_GPG_KEYS,
        ),
    ]
}
