//! The method table of the resource APIs. Each RPC is described once, by its gRPC path, its
//! REST mappings and its use case; the gRPC adapter (`grpc::dynamic`) and the REST adapter
//! (`api::dynamic`) are both built from this table, and messages are converted by the schema
//! (`crate::schema`). Use cases receive the request in its JSON form, deserialized into their
//! own request type, and answer with a [`Reply`].

mod table;

use std::future::Future;
use std::sync::Arc;

use futures_util::StreamExt as _;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use self::table::table;
use crate::error::AppError;
use crate::service::{Ctx, Reply, UseCase};

/// How the REST body maps into the request message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// No body (GET, DELETE).
    None,
    /// The body is the whole request message.
    All,
    /// The body is this one field of the request message; the rest comes from path and query.
    Field(&'static str),
}

pub struct Route {
    pub method: http::Method,
    /// An axum path template; `{a.b}` fills the dotted field `a.b` of the request.
    pub path: &'static str,
    pub body: Body,
}

/// How a use case reads its request's JSON (into its own request type): the first step of a
/// call, and the only one that needs no state, so it can be fuzzed on its own.
pub type ReadFn = fn(Value) -> Result<(), AppError>;

pub enum Handler {
    /// The use case, and how it reads its request.
    Call(Arc<UseCase>, ReadFn),
    /// Not served by tiphys, with the reason given to the caller.
    Unimplemented(&'static str),
}

pub struct Rpc {
    /// `/package.Service/Method`.
    pub path: &'static str,
    pub rest: Vec<Route>,
    pub handler: Handler,
    /// The method's descriptor in the schema, looked up once; `None`: not in the schema
    /// (answered `UNIMPLEMENTED`, and a unit test fails).
    pub method: Option<prost_reflect::MethodDescriptor>,
}

impl Rpc {
    /// The answer to a call of a method tiphys does not serve: a caller without a session is
    /// refused first, as for any method (so the answer tells nothing to an unknown caller), and
    /// everyone else learns which operation is not served and why.
    pub fn unserved(&self, caller: &crate::principal::Caller, why: &str) -> AppError {
        match caller.require() {
            Err(refused) => refused,
            Ok(_) => AppError::Unimplemented(format!(
                "{} is not served by tiphys: {why}",
                self.path.trim_start_matches('/')
            )),
        }
    }
}

/// A use case as a table handler: the request's JSON is read into `Req` (a bad one is an
/// `INVALID_ARGUMENT` that names the field).
pub fn call<Req, F, Fut>(f: F) -> Handler
where
    Req: DeserializeOwned + Send + 'static,
    F: Fn(Ctx, Req) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Reply, AppError>> + Send + 'static,
{
    let f = Arc::new(f);
    let call: Arc<UseCase> = Arc::new(move |ctx, json| {
        let f = Arc::clone(&f);
        Box::pin(async move {
            let req = read::<Req>(json)?;
            // Read your writes on every replica: the view first catches up with the store
            // (unless it did beside the caller's identification).
            if !ctx.fenced {
                ctx.app.registry.fresh().await?;
            }
            let app = Arc::clone(&ctx.app);
            let subject = ctx.caller.principal.subject().to_owned();
            match f(ctx, req).await? {
                // Every stream, whatever its transport, counts against its caller's allowance
                // while open, and ends when the server ends streams.
                Reply::Stream(stream) => {
                    let slot = app.streams.take(&subject)?;
                    let stream = stream.map(move |item| {
                        let _held = &slot;
                        item
                    });
                    Ok(Reply::Stream(app.drain.bound(stream, shutting_down)))
                }
                reply => Ok(reply),
            }
        })
    });
    Handler::Call(call, |json| read::<Req>(json).map(drop))
}

fn read<Req: DeserializeOwned>(json: Value) -> Result<Req, AppError> {
    serde_json::from_value::<Req>(json)
        .map_err(|e| AppError::InvalidArgument(format!("invalid request: {e}")))
}

fn shutting_down() -> AppError {
    AppError::Unavailable(crate::state::drain::SHUTTING_DOWN.to_owned())
}

pub fn route(method: http::Method, path: &'static str, body: Body) -> Route {
    Route { method, path, body }
}
