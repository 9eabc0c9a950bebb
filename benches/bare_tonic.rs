//! A bare tonic server with the same `version.VersionService/Version` handler as tiphys, used by
//! `benches/run.sh` as the "no multiplexing" baseline: one tonic `Server` on its own port, TLS
//! through rustls (tonic's `tls-ring`), no REST, no gRPC-Web, no per-request dispatch.
//!
//! ```sh
//! cargo build --release --example bare_tonic
//! target/release/examples/bare_tonic --addr 127.0.0.1:9443 --cert crt.pem --key key.pem
//! target/release/examples/bare_tonic --addr 127.0.0.1:9080 --plaintext
//! target/release/examples/bare_tonic --addr 127.0.0.1:9444 --cert crt.pem --key key.pem --grpc-web
//! ```
//!
//! `--grpc-web` adds tonic-web's `GrpcWebLayer` (and HTTP/1.1), the same layer tiphys uses, so the
//! cost of gRPC-Web itself can be told apart from the cost of tiphys's dispatch.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Parser;
use tiphys::pb::version::VersionMessage;
use tiphys::pb::version::version_service_server::{VersionService, VersionServiceServer};
use tiphys::principal::Principal;
use tonic::transport::{Identity, Server, ServerTlsConfig};
use tonic::{Request, Response, Status};

#[derive(Debug, Parser)]
#[command(about = "Bare tonic server with tiphys's Version handler (benchmark baseline)")]
struct Args {
    /// Listen address (loopback only for benchmarks).
    #[arg(long, default_value = "127.0.0.1:9443")]
    addr: SocketAddr,
    /// PEM certificate chain (TLS mode).
    #[arg(long)]
    cert: Option<PathBuf>,
    /// PEM private key (TLS mode).
    #[arg(long)]
    key: Option<PathBuf>,
    /// Serve plaintext h2c instead of TLS.
    #[arg(long)]
    plaintext: bool,
    /// Also serve gRPC-Web (tonic-web's GrpcWebLayer, HTTP/1.1 accepted).
    #[arg(long)]
    grpc_web: bool,
}

#[derive(Debug)]
struct Version;

#[tonic::async_trait]
impl VersionService for Version {
    async fn version(&self, _request: Request<()>) -> Result<Response<VersionMessage>, Status> {
        // The same use case as tiphys's (`service::version`), with tonic's generated types
        // instead of tiphys's method table. Benchmark clients send no token, so tiphys sees
        // them as anonymous too.
        let info = tiphys::service::version::info(&Principal::Anonymous);
        Ok(Response::new(VersionMessage {
            version: info.version,
            build_date: info.build_date,
            git_commit: info.git_commit,
            git_tag: info.git_tag,
            git_tree_state: info.git_tree_state,
            go_version: info.go_version,
            compiler: info.compiler,
            platform: info.platform,
            extra_build_info: info.extra_build_info,
            ..VersionMessage::default()
        }))
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let mut builder = Server::builder();
    let mode = if args.plaintext {
        "plaintext"
    } else {
        let (Some(cert), Some(key)) = (&args.cert, &args.key) else {
            bail!("TLS mode needs --cert and --key (or pass --plaintext)");
        };
        let cert_pem = std::fs::read(cert).with_context(|| format!("reading {}", cert.display()))?;
        let key_pem = std::fs::read(key).with_context(|| format!("reading {}", key.display()))?;
        let tls = ServerTlsConfig::new().identity(Identity::from_pem(cert_pem, key_pem));
        builder = builder.tls_config(tls).context("configuring TLS")?;
        "tls"
    };
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .with_context(|| format!("binding {}", args.addr))?;
    let local = listener.local_addr()?;
    println!(
        "bare_tonic listening on {local} {mode} grpc-web={}",
        args.grpc_web
    );
    // TCP_NODELAY as tonic's own `serve` sets it by default (and as tiphys, Go and nginx do):
    // `serve_with_incoming` ignores the builder's setting, so the incoming stream sets it.
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    // Stop on Ctrl-C / SIGINT; run.sh stops it by PID with SIGTERM (default action).
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let service = VersionServiceServer::new(Version);
    if args.grpc_web {
        builder
            .accept_http1(true)
            .layer(tonic_web::GrpcWebLayer::new())
            .add_service(service)
            .serve_with_incoming_shutdown(incoming, shutdown)
            .await
    } else {
        builder
            .add_service(service)
            .serve_with_incoming_shutdown(incoming, shutdown)
            .await
    }
    .context("serving")?;
    Ok(())
}
