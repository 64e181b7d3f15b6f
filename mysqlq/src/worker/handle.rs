//! A running worker: [`WorkerHandle`] (id, metrics, events) and its two-phase shutdown.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use tokio_util::sync::CancellationToken;

use super::threads::ServiceThread;
use super::{Phase, Shared, WorkerEvent, release, stats};
use crate::Error;
use crate::metrics::Metrics;

/// How long a shutdown waits, past its grace, for the fetchers' last statements to return (a
/// claim, a take, the relay's hand-back, each bounded by its own timeouts well below this).
const FETCHERS_LIMIT: Duration = Duration::from_secs(15);

/// What a graceful shutdown did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Jobs that finished within the grace period.
    pub finished: usize,
    /// Jobs handed back to `pending` without consuming their attempt: claimed but not started
    /// when shutdown began, or cancelled at the deadline.
    pub released: usize,
}

/// A running worker.
#[derive(Debug)]
#[must_use = "dropping the handle leaves the worker running until the runtime stops; call shutdown"]
pub struct WorkerHandle {
    pub(super) shared: Arc<Shared>,
    pub(super) producers: Vec<JoinHandle<()>>,
    pub(super) services: Vec<JoinHandle<()>>,
    /// The thread the services run on; stopped once the shutdown is done.
    pub(super) thread: ServiceThread,
}

impl WorkerHandle {
    /// The worker's id (`locked_by`).
    pub fn id(&self) -> &str {
        &self.shared.worker_id
    }

    /// The worker's metrics.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.shared.metrics.clone()
    }

    /// What the worker does, as it happens (River's test signals): claims, starts, outcomes,
    /// lost leases, releases, reaping, leadership. Made for tests that wait for an event
    /// instead of sleeping; a receiver that falls more than a few thousand events behind
    /// misses the oldest ones (`RecvError::Lagged`).
    pub fn events(&self) -> broadcast::Receiver<WorkerEvent> {
        self.shared.events.subscribe()
    }

    /// Waits for SIGINT or SIGTERM, then shuts down gracefully; a second SIGINT or SIGTERM
    /// during the grace period stops at once (running jobs are cancelled and released).
    pub async fn run_until_signal(self) -> Result<ShutdownReport, Error> {
        // One registration for both signals: a second signal that arrives while the first is
        // being handled is kept, not lost between two listeners.
        let mut signals = StopSignals::new();
        signals.recv().await;
        let running = self.shared.in_flight().len();
        tracing::warn!(
            worker = %self.shared.worker_id,
            running,
            grace = %crate::backoff::format_duration(self.shared.config.shutdown_timeout),
            "signal received: no more claims; waiting for running jobs up to the grace period \
             (send SIGINT or SIGTERM again to stop now and release them)"
        );
        self.shutdown_with(async move {
            signals.recv().await;
            tracing::warn!("second signal: stopping now, releasing running jobs");
        })
        .await
    }

    /// Graceful shutdown: stop claiming → release jobs claimed but not started at once → let
    /// running jobs finish for the shutdown timeout → cancel the rest and release them to
    /// `pending` without consuming their attempt. Every job this worker held is completed,
    /// rescheduled or released when this returns (or, if the database cannot be reached, left
    /// to its lease).
    pub async fn shutdown(self) -> Result<ShutdownReport, Error> {
        self.shutdown_with(std::future::pending()).await
    }

    /// [`shutdown`](Self::shutdown) that ends the grace period as soon as `force` completes
    /// (a second signal, an orchestrator's deadline).
    pub async fn shutdown_with(
        self,
        force: impl Future<Output = ()> + Send,
    ) -> Result<ShutdownReport, Error> {
        let Self {
            shared,
            producers,
            services,
            thread,
        } = self;
        // The shutdown runs on the services' thread (its writes use the worker's pool, which
        // lives there); `force` is watched here.
        let forced = CancellationToken::new();
        let mut drain = thread
            .handle()
            .spawn(drain(shared, producers, services, forced.clone()));
        let joined = tokio::select! {
            r = &mut drain => r,
            () = force => {
                forced.cancel();
                drain.await
            }
        };
        thread.stop();
        joined.map_err(|e| Error::Config(format!("the worker's shutdown did not finish: {e}")))
    }
}

/// The shutdown's work (see [`WorkerHandle::shutdown`]); `force` ends the grace period.
async fn drain(
    shared: Arc<Shared>,
    producers: Vec<JoinHandle<()>>,
    services: Vec<JoinHandle<()>>,
    force: CancellationToken,
) -> ShutdownReport {
    let s = &shared;
    s.stopping.store(true, Ordering::SeqCst);
    s.stop_fetching.cancel();
    let running_at_start = s.in_flight().len();
    let deadline = tokio::time::Instant::now() + s.config.shutdown_timeout;
    let mut released = 0;
    let mut producers = producers;
    // Phase 1: release what has not started; wait for running jobs (their outcomes are
    // written by their own tasks) and for a claim in flight to come back.
    loop {
        producers.retain(|p| !p.is_finished());
        released += release::release_where(s, |f| f.phase == Phase::Claimed).await;
        if (s.in_flight().is_empty() && producers.is_empty())
            || tokio::time::Instant::now() >= deadline
        {
            break;
        }
        tokio::select! {
            () = s.slot_freed.notified() => {}
            () = tokio::time::sleep_until(deadline) => {}
            () = tokio::time::sleep(Duration::from_millis(20)) => {}
            () = force.cancelled() => break,
        }
    }
    // Phase 2: cancel what is left and hand it back. The fetchers are not aborted: each
    // ends on its own once the statement it has in flight returns (a claim, a take, the
    // relay handing back what it holds), and what that statement claimed is released with
    // the rest. Aborting one mid-statement would leave the rows it claimed to their lease
    // (the relay's is a minute) and its connection in the middle of a reply.
    released += release::release_where(s, |f| f.phase != Phase::Finishing).await;
    let fetchers_by = tokio::time::Instant::now() + FETCHERS_LIMIT;
    while !producers.is_empty() {
        producers.retain(|p| !p.is_finished());
        if producers.is_empty() {
            break;
        }
        if tokio::time::Instant::now() >= fetchers_by {
            tracing::warn!(
                worker = %s.worker_id,
                "a claim still had not returned {}s into the shutdown; abandoning it (what it claimed comes back with its lease)",
                FETCHERS_LIMIT.as_secs()
            );
            for p in &producers {
                p.abort();
            }
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    released += release::release_where(s, |f| f.phase != Phase::Finishing).await;
    // Outcomes already being written get a moment to land.
    let settle = tokio::time::Instant::now() + Duration::from_secs(5);
    while !s.in_flight().is_empty() && tokio::time::Instant::now() < settle {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    s.stop_services.cancel();
    for t in producers.into_iter().chain(services) {
        let _ = t.await;
    }
    stats::unregister_worker(s).await;
    let report = ShutdownReport {
        finished: running_at_start.saturating_sub(released),
        released,
    };
    tracing::info!(worker = %s.worker_id, finished = report.finished, released = report.released, "worker stopped");
    // Every service has ended, so every connection should be back; a connection still out
    // (a task left behind) must not hold the shutdown forever: the pool goes with the worker.
    if tokio::time::timeout(Duration::from_secs(5), s.db.close())
        .await
        .is_err()
    {
        tracing::warn!(
            worker = %s.worker_id,
            "a connection of the worker's pool was not handed back within 5 s of the shutdown; not waiting for it"
        );
    }
    report
}

/// SIGINT and SIGTERM (Ctrl-C elsewhere), listened for from the moment it is made.
struct StopSignals {
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
}

impl StopSignals {
    fn new() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Self {
                int: signal(SignalKind::interrupt()).ok(),
                term: signal(SignalKind::terminate()).ok(),
            }
        }
        #[cfg(not(unix))]
        Self {}
    }

    async fn recv(&mut self) {
        #[cfg(unix)]
        {
            async fn one(s: Option<&mut tokio::signal::unix::Signal>) {
                if let Some(s) = s
                    && s.recv().await.is_some()
                {
                    return;
                }
                std::future::pending::<()>().await;
            }
            tokio::select! {
                () = one(self.int.as_mut()) => {}
                () = one(self.term.as_mut()) => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
