use tonic::{Request, Response, Status};

use crate::pb::version::VersionMessage;
use crate::pb::version::version_service_server::VersionService;
use crate::service::version::{VersionInfo, version};

pub struct VersionGrpc;

#[tonic::async_trait]
impl VersionService for VersionGrpc {
    async fn version(&self, request: Request<()>) -> Result<Response<VersionMessage>, Status> {
        Ok(Response::new(version(&super::caller(&request).principal).into()))
    }
}

impl From<VersionInfo> for VersionMessage {
    fn from(v: VersionInfo) -> Self {
        Self {
            version: v.version,
            build_date: v.build_date,
            git_commit: v.git_commit,
            git_tag: v.git_tag,
            git_tree_state: v.git_tree_state,
            go_version: v.go_version,
            compiler: v.compiler,
            platform: v.platform,
            extra_build_info: v.extra_build_info,
            ..Self::default()
        }
    }
}
