//! In-process cost of identifying a caller, per request, without the network:
//! `Authenticator::identify` on the headers of a request with a valid bearer
//! token, against the same request with no token.
//!
//! `cargo run --release --example auth_cost [ITERATIONS]`; with `TIPHYS_ETCD_ENDPOINTS` set
//! (comma-separated) the store is that etcd (under a fresh prefix) instead of a redb file.

use std::sync::Arc;
use std::time::Instant;

use http::HeaderMap;
use tiphys::auth::Channel;
use tiphys::state::{Options, ServerState};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let iterations: u32 = std::env::args().nth(1).map_or(Ok(200_000), |s| s.parse())?;
    let dir = std::env::temp_dir().join(format!("tiphys-auth-cost-{}", std::process::id()));
    let mut options = Options::new(&dir);
    if let Ok(endpoints) = std::env::var("TIPHYS_ETCD_ENDPOINTS") {
        let mut etcd = tiphys::store::EtcdOptions::new(endpoints.split(',').map(str::to_owned).collect());
        etcd.prefix = format!("/tiphys-auth-cost-{}/", std::process::id());
        options.store = tiphys::store::Backend::Etcd(etcd);
    }
    let app = Arc::new(ServerState::open(options).await?);
    app.auth.logins.ensure_initial_admin().await?;
    let token = app.auth.tokens.issue_login("admin");
    let auth = &app.auth.authenticator;
    let ip = std::net::IpAddr::from([127, 0, 0, 1]);
    let mut with_token = HeaderMap::new();
    with_token.insert("authorization", format!("Bearer {token}").parse()?);
    let without = HeaderMap::new();

    let time = async |headers: &HeaderMap| {
        let start = Instant::now();
        for _ in 0..iterations {
            let _ = std::hint::black_box(
                auth.identify(std::hint::black_box(headers), Channel::Http, ip)
                    .await,
            );
        }
        start.elapsed().as_nanos() as f64 / f64::from(iterations)
    };
    for round in 1..=3 {
        let (none, valid) = (time(&without).await, time(&with_token).await);
        println!(
            "round {round}: no token {none:.0} ns, valid bearer token {valid:.0} ns, verification {:.0} ns/request",
            valid - none
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
