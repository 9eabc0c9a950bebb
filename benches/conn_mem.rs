//! Where an idle connection's memory goes: runs `tiphys server` in this process under dhat's
//! heap profiler (every allocation with its call stack) and writes `dhat-heap.json` when the
//! server stops. Open connections against it, then stop it with SIGTERM; the peak (`t-gmax`)
//! is the moment the most connections were open.
//!
//! `cargo run --example conn_mem -- server --insecure --port 0 --data-dir DIR --ready-file DIR/ready.json`

use clap::Parser as _;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

#[derive(clap::Parser)]
struct Flags {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Subcommand)]
enum Cmd {
    Server(Box<tiphys::server::config::ServerArgs>),
}

fn main() -> anyhow::Result<()> {
    let _profiler = dhat::Profiler::new_heap();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let Cmd::Server(args) = Flags::parse().cmd;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async move {
        let server = tiphys::server::Server::bind(&args).await?;
        server.serve(tiphys::server::shutdown::on_signal()).await
    })
}
