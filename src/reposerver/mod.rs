//! A client of Argo CD's repo server (`repository.RepoServerService`, upstream's
//! reposerver/apiclient), which renders manifests and reads revision metadata where
//! argocd-server asks it to. Requests and replies are JSON converted by the API schema
//! (`proto/repository/reposerver.proto`), so the use cases build them as they build every
//! other message. Only this module talks to the repo server.
//!
//! Every call is bounded by `--repo-server-timeout-seconds`; a repo server that cannot be
//! reached is `Unavailable`, naming its address; its own refusals keep their gRPC code.

mod tls;

use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use tonic::transport::Channel;

use crate::error::AppError;
use crate::schema::Schema;
use crate::schema::codec::RawCodec;

/// `--repo-server*`: where the repo server is and how it is reached.
#[derive(Debug, Clone)]
pub struct Config {
    /// `host:port`.
    pub address: String,
    /// `--repo-server-plaintext`: no TLS.
    pub plaintext: bool,
    /// `--repo-server-strict-tls`: its certificate is checked against the CA of
    /// `argocd-repo-server-tls` (`ca_files`); otherwise any certificate is accepted, as
    /// upstream's default.
    pub strict_tls: bool,
    /// The certificates a strict check trusts (upstream's mounted `tls.crt` and `ca.crt`);
    /// those that do not exist are skipped.
    pub ca_files: Vec<std::path::PathBuf>,
    /// The bound on each call; zero: upstream's "no bound" is not kept, a minute is.
    pub timeout: Duration,
}

/// A method of the repo server, with the message types it takes and gives.
#[derive(Clone, Copy)]
pub struct Method {
    pub path: &'static str,
    pub input: &'static str,
    pub output: &'static str,
}

pub const GENERATE_MANIFEST: Method = Method {
    path: "/repository.RepoServerService/GenerateManifest",
    input: "repository.ManifestRequest",
    output: "repository.ManifestResponse",
};
pub const GENERATE_MANIFEST_WITH_FILES: Method = Method {
    path: "/repository.RepoServerService/GenerateManifestWithFiles",
    input: "repository.ManifestRequestWithFiles",
    output: "repository.ManifestResponse",
};
pub const GET_REVISION_METADATA: Method = Method {
    path: "/repository.RepoServerService/GetRevisionMetadata",
    input: "repository.RepoServerRevisionMetadataRequest",
    output: "github.com.argoproj.argo_cd.v3.pkg.apis.application.v1alpha1.RevisionMetadata",
};
pub const GET_OCI_METADATA: Method = Method {
    path: "/repository.RepoServerService/GetOCIMetadata",
    input: "repository.RepoServerRevisionChartDetailsRequest",
    output: "github.com.argoproj.argo_cd.v3.pkg.apis.application.v1alpha1.OCIMetadata",
};

/// The largest reply accepted (upstream's MaxGRPCMessageSize default, 100 MiB).
const MAX_REPLY: usize = 100 << 20;

pub struct RepoServer {
    channel: Channel,
    address: String,
    timeout: Duration,
}

impl RepoServer {
    /// A client of the repo server `config` names. Connects on first use (and again after
    /// a lost connection), so a repo server that is down only fails the calls that need it.
    pub fn new(config: &Config) -> anyhow::Result<Self> {
        let timeout = if config.timeout.is_zero() {
            Duration::from_secs(60)
        } else {
            config.timeout
        };
        let channel = tls::channel(config, timeout)?;
        Ok(Self {
            channel,
            address: config.address.clone(),
            timeout,
        })
    }

    /// `host:port`, as messages name it.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The largest upload a call may carry, in bytes (the repo server's own limit).
    pub fn max_message_bytes() -> usize {
        MAX_REPLY
    }

    /// A unary call: `request` (JSON of `method.input`) in, JSON of `method.output` out.
    pub async fn call(&self, method: Method, request: &Value) -> Result<Value, AppError> {
        let schema = Schema::get();
        let bytes = encode(method.input, request)?;
        let mut grpc = self.grpc();
        let call = async {
            grpc.ready().await.map_err(|e| self.unreachable(&e))?;
            let path = http::uri::PathAndQuery::from_static(method.path);
            grpc.unary(self.request(Bytes::from(bytes)), path, RawCodec)
                .await
                .map_err(|status| self.refused(&status))
        };
        let reply = self.bounded(call).await?;
        decode(schema, method.output, reply.get_ref())
    }

    /// A client-streaming call: each of `messages` (JSON of `method.input`, or bytes already
    /// encoded) in turn, then the one reply.
    pub async fn call_streaming(&self, method: Method, messages: Vec<Bytes>) -> Result<Value, AppError> {
        let mut grpc = self.grpc();
        let call = async {
            grpc.ready().await.map_err(|e| self.unreachable(&e))?;
            let path = http::uri::PathAndQuery::from_static(method.path);
            let stream = futures_util::stream::iter(messages);
            grpc.client_streaming(self.request(stream), path, RawCodec)
                .await
                .map_err(|status| self.refused(&status))
        };
        let reply = self.bounded(call).await?;
        decode(Schema::get(), method.output, reply.get_ref())
    }

    fn grpc(&self) -> tonic::client::Grpc<Channel> {
        tonic::client::Grpc::new(self.channel.clone())
            .max_decoding_message_size(MAX_REPLY)
            .max_encoding_message_size(MAX_REPLY)
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(self.timeout);
        request
    }

    async fn bounded<T>(&self, call: impl Future<Output = Result<T, AppError>>) -> Result<T, AppError> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(result) => result,
            Err(_) => Err(AppError::Unavailable(format!(
                "the repo server at {} did not answer within {}s (--repo-server-timeout-seconds)",
                self.address,
                self.timeout.as_secs()
            ))),
        }
    }

    fn unreachable(&self, err: &(dyn std::error::Error + 'static)) -> AppError {
        AppError::Unavailable(format!(
            "the repo server at {} cannot be reached: {}",
            self.address,
            crate::error::with_causes(err)
        ))
    }

    /// A failed call: a connection that could not be made or was lost is `Unavailable`
    /// naming the repo server; anything the repo server answered keeps its code.
    fn refused(&self, status: &tonic::Status) -> AppError {
        let transport = std::error::Error::source(status)
            .is_some_and(|source| source.downcast_ref::<tonic::transport::Error>().is_some());
        if transport || status.code() == tonic::Code::Unavailable {
            return AppError::Unavailable(format!(
                "the repo server at {} cannot be reached: {}",
                self.address,
                crate::error::with_causes(status)
            ));
        }
        if status.code() == tonic::Code::DeadlineExceeded {
            return AppError::Unavailable(format!(
                "the repo server at {} did not answer within {}s (--repo-server-timeout-seconds)",
                self.address,
                self.timeout.as_secs()
            ));
        }
        match status.code() {
            // About tiphys's own standing with the repo server, not the caller's: never a
            // denial of the caller (those are the authorizer's, and audited).
            code @ (tonic::Code::PermissionDenied | tonic::Code::Unauthenticated) => AppError::peer(
                code,
                format!(
                    "the repo server at {} refused tiphys: {}",
                    self.address,
                    status.message()
                ),
            ),
            code => AppError::peer(code, status.message().to_owned()),
        }
    }
}

/// `json` as the message `name` of the schema.
pub fn encode(name: &str, json: &Value) -> Result<Vec<u8>, AppError> {
    let schema = Schema::get();
    let desc = schema.message(name).map_err(|e| AppError::Internal(e.into()))?;
    schema
        .encode(&desc, json)
        .map_err(|e| AppError::Internal(e.into()))
}

fn decode(schema: &Schema, name: &str, bytes: &[u8]) -> Result<Value, AppError> {
    let desc = schema.message(name).map_err(|e| AppError::Internal(e.into()))?;
    schema
        .decode(&desc, bytes)
        .map_err(|e| AppError::Internal(anyhow::anyhow!("the repo server's {name}: {e}")))
}
