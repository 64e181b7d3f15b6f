//! The worker: claims jobs, runs them, records their outcome.
//!
//! Services, one per file, each driven by the shared shutdown tokens:
//! [`producer`] (claim loop) → [`buffer`] (claimed ahead, per-queue limits) → [`executor`] (one
//! task per job) → [`completer`] (batched, token-guarded completion, carried in the next claim's
//! transaction when one is due), beside [`lease`] (batched heartbeats), [`maintenance`] (leader
//! election, reaper, pruner), [`scheduler`] (periodic jobs, woken at each tick) and [`stats`]
//! (per-minute counters for `mysqlq-cli stats`). They
//! write through [`write`] (retried writes, error text) and hand jobs back through [`release`].
//! They run on a thread of their own, handlers on the application's runtime ([`threads`]).
//! The public face is [`config`] (settings), [`builder`] (start) and [`handle`] (shutdown);
//! [`inline`] runs jobs one at a time in the caller's task for `mysqlq::testing`.

mod buffer;
mod builder;
mod completer;
mod config;
mod deferred;
mod events;
mod executor;
mod flush;
mod handle;
mod inline;
mod lag;
mod lease;
mod maintenance;
mod outcome;
mod producer;
mod rate;
mod receipts;
#[cfg(feature = "redis")]
mod redis;
mod release;
mod scheduler;
mod stats;
mod threads;
mod workflow;
mod write;

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::MySqlPool;
use tokio::sync::{Notify, Semaphore, broadcast};
use tokio_util::sync::CancellationToken;

use crate::context::Extensions;
use crate::metrics::Metrics;
use crate::store::Owned;
use crate::{JobContext, JobId, Registry};

pub use builder::{Worker, WorkerBuilder};
pub use config::{Config, RESERVED_CONNECTIONS};
pub use events::WorkerEvent;
pub use handle::{ShutdownReport, WorkerHandle};
pub(crate) use inline::{Inline, Ran};

/// One claim of one job: the job's id and the token of the claim that gave it. Every map entry,
/// removal, cancellation and write is keyed by both, so a stale report about an earlier claim
/// of the same job never touches a later one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub(crate) id: JobId,
    pub(crate) token: Arc<str>,
}

impl Key {
    pub(crate) fn owned(&self) -> Owned {
        Owned {
            id: self.id,
            token: self.token.to_string(),
        }
    }
}

/// Where a held job is in its life inside this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Claimed, handler not started yet.
    Claimed,
    /// The handler is running.
    Running,
    /// The handler returned; its outcome is being written.
    Finishing,
}

/// A job this process holds.
pub(crate) struct InFlight {
    pub(crate) ctx: JobContext,
    pub(crate) abort: Option<tokio::task::AbortHandle>,
    pub(crate) phase: Phase,
    /// The lease is valid at least until `lease_from + lease`: the moment the last statement
    /// that set it (the claim or a heartbeat) was sent.
    pub(crate) lease_from: tokio::time::Instant,
    /// What the hooks see of this run (set when the handler starts, when there are hooks): whoever
    /// takes a `Finishing` entry out because an operator cancelled the job tells the hooks with it.
    pub(crate) run: Option<Arc<crate::hooks::JobRun>>,
}

/// State shared by the services of one worker.
pub(crate) struct Shared {
    /// The application's runtime: handlers and hooks run there ([`threads`]).
    pub(crate) app: tokio::runtime::Handle,
    /// The services' runtime, on the worker's own thread ([`threads`]).
    pub(crate) services: tokio::runtime::Handle,
    /// The application's pool: handlers use it through [`JobContext::pool`].
    pub(crate) pool: MySqlPool,
    /// The worker's own pool: claims, completions, heartbeats, maintenance, statistics.
    pub(crate) db: MySqlPool,
    pub(crate) config: Config,
    pub(crate) registry: Registry,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) worker_id: String,
    /// This process's identity among workers (leader lease): `worker_id#random`.
    pub(crate) instance: String,
    pub(crate) extensions: Arc<Extensions>,
    /// Running slots of the worker (`concurrency`).
    pub(crate) slots: Arc<Semaphore>,
    /// Room to claim ahead (prefetch) and per-queue limits ([`buffer`]).
    pub(crate) lanes: buffer::Lanes,
    /// Which queues have rate keys to serve ([`rate`]).
    pub(crate) rate: rate::RateState,
    pub(crate) in_flight: Mutex<HashMap<Key, InFlight>>,
    /// Cancelled when shutdown starts: no more claims.
    pub(crate) stop_fetching: CancellationToken,
    /// Cancelled when everything has drained: heartbeats, maintenance, completer stop.
    pub(crate) stop_services: CancellationToken,
    pub(crate) slot_freed: Notify,
    /// A claim loop found work after an idle round: the claim loops parked while idle join in.
    pub(crate) work_seen: Notify,
    /// This worker's completions released workflow steps into its queues: one idle claim loop
    /// (not every loop of the process, see [`crate::wake`]) claims them.
    pub(crate) steps_released: Notify,
    pub(crate) stopping: AtomicBool,
    /// Set when jobs were stopped because no heartbeat could renew their lease; no claims until
    /// the database answers again.
    pub(crate) lease_unconfirmed: AtomicBool,
    pub(crate) completer: Arc<completer::Completer>,
    /// Wakes the workflow sweep ([`workflow`]): a step's failure or cancel was recorded.
    pub(crate) workflow_wake: Notify,
    pub(crate) periodic: Vec<crate::Periodic>,
    /// The global hooks at start, then the builder's.
    pub(crate) hooks: crate::hooks::Hooks,
    pub(crate) events: broadcast::Sender<WorkerEvent>,
    /// Told of every claim whose end this process wrote to MySQL, or found written by someone
    /// else (lost, cancelled by an operator): the Redis transport acknowledges its stream entry
    /// then, and only then. `None` without the transport.
    pub(crate) settled: Option<tokio::sync::mpsc::UnboundedSender<Key>>,
}

impl Shared {
    pub(crate) fn in_flight(&self) -> std::sync::MutexGuard<'_, HashMap<Key, InFlight>> {
        self.in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Tells subscribers (tests, `WorkerHandle::events`) what happened.
    pub(crate) fn emit(&self, event: WorkerEvent) {
        let _ = self.events.send(event);
    }

    /// MySQL has the outcome of this claim (see [`Shared::settled`]).
    pub(crate) fn settled(&self, key: &Key) {
        if let Some(tx) = &self.settled {
            let _ = tx.send(key.clone());
        }
    }

    /// Tells the hooks' `on_cancelled` that an operator's cancel is the outcome of this run. Called
    /// by whoever removed the run's entry once its handler had returned (see [`InFlight::run`]),
    /// so that it is called once per run, whichever service learnt of the cancel.
    pub(crate) fn operator_cancelled(&self, run: Option<Arc<crate::hooks::JobRun>>) {
        if let Some(run) = run {
            let hooks = self.hooks.clone();
            self.app.spawn(async move {
                hooks
                    .cancelled(&run, &crate::CancelReason::Cancelled.to_string())
                    .await;
            });
        }
    }

    /// Runs a hook (the application's code) on the application's runtime and waits for it; a
    /// hook that panics is logged.
    pub(crate) async fn hook(&self, fut: impl std::future::Future<Output = ()> + Send + 'static) {
        if threads::on(&self.app, fut).await.is_none() {
            tracing::error!(worker = %self.worker_id, "a hook panicked (or the application's runtime stopped)");
        }
    }

    /// Removes the entry of exactly this claim, if it is still there.
    pub(crate) fn forget(&self, key: &Key) -> Option<InFlight> {
        let removed = self.in_flight().remove(key);
        if removed.is_some() {
            self.slot_freed.notify_waiters();
        }
        removed
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("worker_id", &self.worker_id)
            .finish_non_exhaustive()
    }
}

/// Random number in `[0, 1)` for jitter.
pub(crate) fn unit_random() -> f64 {
    fastrand::f64()
}

/// Waits `d` unless `token` is cancelled first; `false` if cancelled.
pub(crate) async fn sleep_or_cancel(d: Duration, token: &CancellationToken) -> bool {
    tokio::select! {
        () = tokio::time::sleep(d) => true,
        () = token.cancelled() => false,
    }
}
