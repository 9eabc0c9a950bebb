//! SIGINT or SIGTERM → the tokens the server drains on: the first signal begins the
//! shutdown, a second one hurries it (an operator who presses Ctrl-C twice, or a supervisor
//! that signals again, does not want to wait out `--shutdown-delay`).

use tokio_util::sync::CancellationToken;

#[derive(Clone, Default)]
pub struct Shutdown {
    /// Begin shutting down.
    pub begin: CancellationToken,
    /// Skip what is left of the shutdown delay.
    pub hurry: CancellationToken,
}

/// Must be called inside the runtime. The handlers are installed before this returns, so a
/// signal that comes early is not the default action (an abrupt exit).
pub fn on_signal() -> Shutdown {
    let shutdown = Shutdown::default();
    let trigger = shutdown.clone();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) {
            (Ok(mut int), Ok(mut term)) => {
                tokio::spawn(async move {
                    for token in [&trigger.begin, &trigger.hurry] {
                        tokio::select! {
                            _ = int.recv() => tracing::info!("SIGINT received"),
                            _ = term.recv() => tracing::info!("SIGTERM received"),
                        }
                        token.cancel();
                    }
                });
            }
            (Err(err), _) | (_, Err(err)) => {
                tracing::warn!(error = %err, "cannot watch SIGINT/SIGTERM; only Ctrl-C stops the server");
                tokio::spawn(on_ctrl_c(trigger));
            }
        }
    }
    #[cfg(not(unix))]
    tokio::spawn(on_ctrl_c(trigger));
    shutdown
}

async fn on_ctrl_c(trigger: Shutdown) {
    for token in [&trigger.begin, &trigger.hurry] {
        if tokio::signal::ctrl_c().await.is_err() {
            return;
        }
        tracing::info!("signal received");
        token.cancel();
    }
}
