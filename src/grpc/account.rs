use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::app::App;
use crate::pb::account::account_service_server::AccountService;
use crate::pb::account::{
    Account, AccountsList, CanIRequest, CanIResponse, CreateTokenRequest, CreateTokenResponse,
    DeleteTokenRequest, EmptyResponse, GetAccountRequest, ListAccountRequest, Token, UpdatePasswordRequest,
    UpdatePasswordResponse,
};
use crate::service::account::{self, AccountView, CreateToken, UpdatePassword};

pub struct AccountGrpc {
    pub state: Arc<App>,
}

#[tonic::async_trait]
impl AccountService for AccountGrpc {
    async fn can_i(&self, request: Request<CanIRequest>) -> Result<Response<CanIResponse>, Status> {
        let caller = super::caller(&request);
        let r = request.into_inner();
        let allowed = account::can_i(
            &self.state.rbac,
            &self.state.namespace,
            &caller,
            &r.resource,
            &r.action,
            &r.subresource,
        )?;
        Ok(Response::new(CanIResponse {
            value: if allowed { "yes" } else { "no" }.to_owned(),
        }))
    }

    async fn update_password(
        &self,
        request: Request<UpdatePasswordRequest>,
    ) -> Result<Response<UpdatePasswordResponse>, Status> {
        let caller = super::caller(&request);
        let r = request.into_inner();
        let req = UpdatePassword {
            new_password: r.new_password,
            current_password: r.current_password,
            name: r.name,
        };
        account::update_password(&self.state.sessions, &self.state.rbac, &caller, req).await?;
        Ok(Response::new(UpdatePasswordResponse {}))
    }

    async fn list_accounts(
        &self,
        request: Request<ListAccountRequest>,
    ) -> Result<Response<AccountsList>, Status> {
        let items = account::list(&self.state.sessions, &self.state.rbac, &super::caller(&request))?;
        Ok(Response::new(AccountsList {
            items: items.into_iter().map(Account::from).collect(),
        }))
    }

    async fn get_account(&self, request: Request<GetAccountRequest>) -> Result<Response<Account>, Status> {
        let caller = super::caller(&request);
        let name = request.into_inner().name;
        let view = account::get(&self.state.sessions, &self.state.rbac, &caller, &name)?;
        Ok(Response::new(view.into()))
    }

    async fn create_token(
        &self,
        request: Request<CreateTokenRequest>,
    ) -> Result<Response<CreateTokenResponse>, Status> {
        let caller = super::caller(&request);
        let r = request.into_inner();
        let req = CreateToken {
            name: r.name,
            expires_in: r.expires_in,
            id: r.id,
        };
        let token = account::create_token(&self.state.sessions, &self.state.rbac, &caller, req).await?;
        Ok(Response::new(CreateTokenResponse { token }))
    }

    async fn delete_token(
        &self,
        request: Request<DeleteTokenRequest>,
    ) -> Result<Response<EmptyResponse>, Status> {
        let caller = super::caller(&request);
        let r = request.into_inner();
        account::delete_token(&self.state.sessions, &self.state.rbac, &caller, &r.name, &r.id).await?;
        Ok(Response::new(EmptyResponse {}))
    }
}

impl From<AccountView> for Account {
    fn from(a: AccountView) -> Self {
        Self {
            name: a.name,
            enabled: a.enabled,
            capabilities: a.capabilities,
            tokens: a
                .tokens
                .into_iter()
                .map(|t| Token {
                    id: t.id,
                    issued_at: t.issued_at,
                    expires_at: t.expires_at,
                })
                .collect(),
        }
    }
}
