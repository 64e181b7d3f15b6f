//! SIGINT and SIGTERM, listened for from the moment a [`Stop`] is made: a signal that arrives
//! while the command is busy (reading the database, printing) is kept until it is awaited.
//! (`tokio::signal::ctrl_c()` registers only when first polled, and a listener made anew for
//! each wait misses a signal that arrives between two waits.)

#[cfg(not(unix))]
use std::future::Future;
#[cfg(not(unix))]
use std::pin::Pin;

/// A registered listener for SIGINT and SIGTERM (Ctrl-C elsewhere).
pub(crate) struct Stop {
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(not(unix))]
    ctrl_c: Pin<Box<dyn Future<Output = std::io::Result<()>> + Send>>,
}

impl Stop {
    /// Registers the listeners now. Must be called inside the tokio runtime.
    pub(crate) fn new() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Self {
                int: signal(SignalKind::interrupt()).ok(),
                term: signal(SignalKind::terminate()).ok(),
            }
        }
        #[cfg(not(unix))]
        {
            Self {
                ctrl_c: Box::pin(tokio::signal::ctrl_c()),
            }
        }
    }

    /// Completes at the next signal (or one that arrived since the last call).
    pub(crate) async fn recv(&mut self) {
        #[cfg(unix)]
        {
            tokio::select! {
                () = recv(self.int.as_mut()) => {}
                () = recv(self.term.as_mut()) => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = (&mut self.ctrl_c).await;
            self.ctrl_c = Box::pin(tokio::signal::ctrl_c());
        }
    }
}

/// The next signal of `s`; never, for a listener that could not be registered.
#[cfg(unix)]
async fn recv(s: Option<&mut tokio::signal::unix::Signal>) {
    if let Some(s) = s
        && s.recv().await.is_some()
    {
        return;
    }
    std::future::pending::<()>().await;
}
