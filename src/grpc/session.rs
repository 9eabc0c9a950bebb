use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::app::App;
use crate::pb::session::session_service_server::SessionService;
use crate::pb::session::{
    GetUserInfoRequest, GetUserInfoResponse, SessionCreateRequest, SessionDeleteRequest, SessionResponse,
};
use crate::service::session;

pub struct SessionGrpc {
    pub state: Arc<App>,
}

#[tonic::async_trait]
impl SessionService for SessionGrpc {
    async fn get_user_info(
        &self,
        request: Request<GetUserInfoRequest>,
    ) -> Result<Response<GetUserInfoResponse>, Status> {
        let info = session::user_info(&super::caller(&request), &self.state.rbac);
        Ok(Response::new(GetUserInfoResponse {
            logged_in: info.logged_in,
            username: info.username,
            iss: info.iss,
            groups: info.groups,
        }))
    }

    async fn create(
        &self,
        request: Request<SessionCreateRequest>,
    ) -> Result<Response<SessionResponse>, Status> {
        let caller = super::caller(&request);
        let req = request.into_inner();
        let token = session::create(
            &self.state.sessions,
            &caller,
            &req.username,
            &req.password,
            &req.token,
        )
        .await?;
        Ok(Response::new(SessionResponse { token }))
    }

    async fn delete(
        &self,
        request: Request<SessionDeleteRequest>,
    ) -> Result<Response<SessionResponse>, Status> {
        session::delete(&self.state.sessions, &super::caller(&request)).await?;
        Ok(Response::new(SessionResponse::default()))
    }
}
