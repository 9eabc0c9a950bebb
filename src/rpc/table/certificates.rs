//! `certificate.CertificateService` and `gpgkey.GPGKeyService`.

use std::sync::Arc;

use super::{delete, get, post, rpc};
use crate::rpc::{Body, Rpc, call};
use crate::service::{certificate, gpgkey};

pub fn rpcs() -> Vec<Arc<Rpc>> {
    vec![
        rpc(
            "/certificate.CertificateService/ListCertificates",
            [get("/api/v1/certificates")],
            call(certificate::list),
        ),
        rpc(
            "/certificate.CertificateService/CreateCertificate",
            [post("/api/v1/certificates", Body::Field("certificates"))],
            call(certificate::create),
        ),
        rpc(
            "/certificate.CertificateService/DeleteCertificate",
            [delete("/api/v1/certificates")],
            call(certificate::delete),
        ),
        rpc(
            "/gpgkey.GPGKeyService/List",
            [get("/api/v1/gpgkeys")],
            call(gpgkey::list),
        ),
        rpc(
            "/gpgkey.GPGKeyService/Get",
            [get("/api/v1/gpgkeys/{keyID}")],
            call(gpgkey::get),
        ),
        rpc(
            "/gpgkey.GPGKeyService/Create",
            [post("/api/v1/gpgkeys", Body::Field("publickey"))],
            call(gpgkey::create),
        ),
        rpc(
            "/gpgkey.GPGKeyService/Delete",
            [delete("/api/v1/gpgkeys")],
            call(gpgkey::delete),
        ),
    ]
}
