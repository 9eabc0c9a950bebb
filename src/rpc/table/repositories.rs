//! `repository.RepositoryService` and `repocreds.RepoCredsService`.

use std::sync::Arc;

use super::{delete, get, post, put, rpc, unserved};
use crate::rpc::{Body, Rpc, call};
use crate::service::repository as repo;
use crate::service::repository::browse;
use crate::service::repository::creds as repocreds;

const NO_OCI: &str = "tiphys does not read OCI registries: their tags come from a repo server";
const NO_WRITE_VALIDATION: &str = "tiphys does not contact repositories, so it cannot check write access: \
     add the write repository without validation (CreateWriteRepository, POST /api/v1/write-repositories)";

/// RepositoryService, then RepoCredsService. The deprecated twins (`List`, `Create`, `Update`,
/// `Delete`) share their REST paths with the current methods, which serve them over REST.
/// Write repositories and write credential templates (`write-repositories`, `write-repocreds`)
/// are served as their read-only twins are, from their own registry.
pub fn rpcs() -> Vec<Arc<Rpc>> {
    vec![
        rpc(
            "/repository.RepositoryService/List",
            [],
            call(repo::list_repositories),
        ),
        rpc(
            "/repository.RepositoryService/ListRepositories",
            [get("/api/v1/repositories")],
            call(repo::list_repositories),
        ),
        rpc(
            "/repository.RepositoryService/Get",
            [get("/api/v1/repositories/{repo}")],
            call(repo::get_repository),
        ),
        rpc("/repository.RepositoryService/Create", [], call(repo::create)),
        rpc(
            "/repository.RepositoryService/CreateRepository",
            [post("/api/v1/repositories", Body::Field("repo"))],
            call(repo::create),
        ),
        rpc("/repository.RepositoryService/Update", [], call(repo::update)),
        rpc(
            "/repository.RepositoryService/UpdateRepository",
            [put("/api/v1/repositories/{repo.repo}", Body::Field("repo"))],
            call(repo::update),
        ),
        rpc("/repository.RepositoryService/Delete", [], call(repo::delete)),
        rpc(
            "/repository.RepositoryService/DeleteRepository",
            [delete("/api/v1/repositories/{repo}")],
            call(repo::delete),
        ),
        rpc(
            "/repository.RepositoryService/ValidateAccess",
            [post("/api/v1/repositories/{repo}/validate", Body::Field("repo"))],
            call(browse::validate_access),
        ),
        rpc(
            "/repository.RepositoryService/ListRefs",
            [get("/api/v1/repositories/{repo}/refs")],
            call(browse::list_refs),
        ),
        unserved(
            "/repository.RepositoryService/ListOCITags",
            [get("/api/v1/repositories/{repo}/oci-tags")],
            NO_OCI,
        ),
        rpc(
            "/repository.RepositoryService/ListApps",
            [get("/api/v1/repositories/{repo}/apps")],
            call(browse::list_apps),
        ),
        rpc(
            "/repository.RepositoryService/GetAppDetails",
            [post(
                "/api/v1/repositories/{source.repoURL}/appdetails",
                Body::All,
            )],
            call(browse::app_details),
        ),
        rpc(
            "/repository.RepositoryService/GetHelmCharts",
            [get("/api/v1/repositories/{repo}/helmcharts")],
            call(browse::helm_charts),
        ),
        rpc(
            "/repository.RepositoryService/ListWriteRepositories",
            [get("/api/v1/write-repositories")],
            call(repo::list_write_repositories),
        ),
        rpc(
            "/repository.RepositoryService/GetWrite",
            [get("/api/v1/write-repositories/{repo}")],
            call(repo::get_write_repository),
        ),
        rpc(
            "/repository.RepositoryService/CreateWriteRepository",
            [post("/api/v1/write-repositories", Body::Field("repo"))],
            call(repo::create_write),
        ),
        rpc(
            "/repository.RepositoryService/UpdateWriteRepository",
            [put("/api/v1/write-repositories/{repo.repo}", Body::Field("repo"))],
            call(repo::update_write),
        ),
        rpc(
            "/repository.RepositoryService/DeleteWriteRepository",
            [delete("/api/v1/write-repositories/{repo}")],
            call(repo::delete_write),
        ),
        unserved(
            "/repository.RepositoryService/ValidateWriteAccess",
            [post(
                "/api/v1/write-repositories/{repo}/validate",
                Body::Field("repo"),
            )],
            NO_WRITE_VALIDATION,
        ),
        rpc(
            "/repocreds.RepoCredsService/ListRepositoryCredentials",
            [get("/api/v1/repocreds")],
            call(repocreds::list_creds),
        ),
        rpc(
            "/repocreds.RepoCredsService/CreateRepositoryCredentials",
            [post("/api/v1/repocreds", Body::Field("creds"))],
            call(repocreds::create),
        ),
        rpc(
            "/repocreds.RepoCredsService/UpdateRepositoryCredentials",
            [put("/api/v1/repocreds/{creds.url}", Body::Field("creds"))],
            call(repocreds::update),
        ),
        rpc(
            "/repocreds.RepoCredsService/DeleteRepositoryCredentials",
            [delete("/api/v1/repocreds/{url}")],
            call(repocreds::delete),
        ),
        rpc(
            "/repocreds.RepoCredsService/ListWriteRepositoryCredentials",
            [get("/api/v1/write-repocreds")],
            call(repocreds::list_write_creds),
        ),
        rpc(
            "/repocreds.RepoCredsService/CreateWriteRepositoryCredentials",
            [post("/api/v1/write-repocreds", Body::Field("creds"))],
            call(repocreds::create_write),
        ),
        rpc(
            "/repocreds.RepoCredsService/UpdateWriteRepositoryCredentials",
            [put("/api/v1/write-repocreds/{creds.url}", Body::Field("creds"))],
            call(repocreds::update_write),
        ),
        rpc(
            "/repocreds.RepoCredsService/DeleteWriteRepositoryCredentials",
            [delete("/api/v1/write-repocreds/{url}")],
            call(repocreds::delete_write),
        ),
    ]
}
