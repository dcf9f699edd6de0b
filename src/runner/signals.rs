//! The stop signals every errand process honours: SIGTERM (the kubelet, a supervisor, `kill`) and Ctrl-C.

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// Resolves when SIGTERM or SIGINT (Ctrl-C) arrives. When SIGTERM cannot be watched, Ctrl-C
/// still can.
pub async fn stop_signal() {
    let mut terminate = signal(SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = async {
            match terminate.as_mut() {
                Some(terminate) => { terminate.recv().await; }
                None => std::future::pending::<()>().await,
            }
        } => {}
    }
}

/// A token cancelled by the first [`stop_signal`], so that a stopped run still stops its
/// agent and saves what it left.
pub fn cancel_on_stop_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        stop_signal().await;
        tracing::info!("stop requested; stopping the agent and saving what it left");
        cancel.cancel();
    });
    token
}
