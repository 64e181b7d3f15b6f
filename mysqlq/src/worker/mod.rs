//! The worker: claims jobs, runs them, records their outcome.
//!
//! Services, one per file, each driven by the shared shutdown tokens:
//! [`producer`] (claim loop) → [`executor`] (one task per job) → [`completer`] (batched,
//! token-guarded completion), beside [`lease`] (batched heartbeats), [`maintenance`] (leader
//! election, reaper, pruner) and [`stats`] (per-minute counters for `mysqlq-cli stats`).

mod completer;
mod executor;
mod lease;
mod maintenance;
mod producer;
mod scheduler;
mod stats;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use sqlx::MySqlPool;
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::context::Extensions;
use crate::metrics::Metrics;
use crate::{Error, JobContext, JobId, Registry};

/// Connections the worker itself uses at most at once with the default single claim loop:
/// claim, completer, heartbeat, maintenance (one more per extra claim loop).
pub const RESERVED_CONNECTIONS: u32 = 4;

/// Worker settings. Every field has a documented default (`DEFAULT_*`).
#[derive(Debug, Clone)]
pub struct Config {
    /// Queues to claim from. Default: the queues of the registered jobs.
    pub queues: Vec<String>,
    /// Jobs running at once. Default [`Config::DEFAULT_CONCURRENCY`].
    pub concurrency: usize,
    /// Most jobs per claim. Default [`Config::DEFAULT_BATCH_SIZE`].
    pub batch_size: u32,
    /// Claim loops running side by side, sharing the slots, so that one claim's round trips
    /// and commit overlap another's. Each idle claim loop polls once per idle interval.
    /// Default [`Config::DEFAULT_CLAIMERS`].
    pub claimers: usize,
    /// Lease taken on claim and renewed by heartbeats. Default [`Config::DEFAULT_LEASE`].
    pub lease: Duration,
    /// Interval between heartbeats. Default: a third of the lease.
    pub heartbeat_interval: Option<Duration>,
    /// Shortest idle wait between claims. Default [`Config::DEFAULT_POLL_FLOOR`].
    pub poll_floor: Duration,
    /// Longest idle wait between claims. Default [`Config::DEFAULT_POLL_CEILING`].
    pub poll_ceiling: Duration,
    /// How long running jobs may finish after shutdown starts. Default
    /// [`Config::DEFAULT_SHUTDOWN_TIMEOUT`].
    pub shutdown_timeout: Duration,
    /// Per-attempt timeout for jobs that set none. Default [`Config::DEFAULT_JOB_TIMEOUT`].
    pub job_timeout: Duration,
    /// How often the leader reaps expired leases and prunes. Default
    /// [`Config::DEFAULT_MAINTENANCE_INTERVAL`].
    pub maintenance_interval: Duration,
    /// Leader lease; a dead leader is replaced after at most this long. Default
    /// [`Config::DEFAULT_LEADER_TTL`].
    pub leader_ttl: Duration,
    /// Age after which completed (and cancelled) rows are pruned. Default
    /// [`Config::DEFAULT_COMPLETED_RETENTION`].
    pub completed_retention: Duration,
    /// Age after which failed rows are pruned. Default [`Config::DEFAULT_FAILED_RETENTION`].
    pub failed_retention: Duration,
    /// How often counters are flushed to the statistics tables. Default
    /// [`Config::DEFAULT_STATS_INTERVAL`].
    pub stats_interval: Duration,
}

impl Config {
    /// 16 jobs at once.
    pub const DEFAULT_CONCURRENCY: usize = 16;
    /// Up to 100 jobs per claim (never more than the free slots).
    pub const DEFAULT_BATCH_SIZE: u32 = 100;
    /// One claim loop: with slot gathering it claims full batches, which beats more loops
    /// claiming smaller ones (measured with `mysqlq-cli bench`, see BENCHMARKS.md).
    pub const DEFAULT_CLAIMERS: usize = 1;
    /// A 60-second lease.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);
    /// 5 ms after work was seen.
    pub const DEFAULT_POLL_FLOOR: Duration = Duration::from_millis(5);
    /// 1 s when the queue stays empty (jittered down by up to a quarter).
    pub const DEFAULT_POLL_CEILING: Duration = Duration::from_secs(1);
    /// 30 s of grace at shutdown.
    pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
    /// 30 minutes per attempt.
    pub const DEFAULT_JOB_TIMEOUT: Duration = Duration::from_secs(30 * 60);
    /// Maintenance every 5 s.
    pub const DEFAULT_MAINTENANCE_INTERVAL: Duration = Duration::from_secs(5);
    /// A 15-second leader lease.
    pub const DEFAULT_LEADER_TTL: Duration = Duration::from_secs(15);
    /// Completed rows kept 1 day.
    pub const DEFAULT_COMPLETED_RETENTION: Duration = Duration::from_secs(24 * 3600);
    /// Failed rows kept 30 days.
    pub const DEFAULT_FAILED_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);
    /// Statistics flushed every 5 s.
    pub const DEFAULT_STATS_INTERVAL: Duration = Duration::from_secs(5);

    fn heartbeat(&self) -> Duration {
        self.heartbeat_interval.unwrap_or(self.lease / 3)
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            queues: Vec::new(),
            concurrency: Self::DEFAULT_CONCURRENCY,
            batch_size: Self::DEFAULT_BATCH_SIZE,
            claimers: Self::DEFAULT_CLAIMERS,
            lease: Self::DEFAULT_LEASE,
            heartbeat_interval: None,
            poll_floor: Self::DEFAULT_POLL_FLOOR,
            poll_ceiling: Self::DEFAULT_POLL_CEILING,
            shutdown_timeout: Self::DEFAULT_SHUTDOWN_TIMEOUT,
            job_timeout: Self::DEFAULT_JOB_TIMEOUT,
            maintenance_interval: Self::DEFAULT_MAINTENANCE_INTERVAL,
            leader_ttl: Self::DEFAULT_LEADER_TTL,
            completed_retention: Self::DEFAULT_COMPLETED_RETENTION,
            failed_retention: Self::DEFAULT_FAILED_RETENTION,
            stats_interval: Self::DEFAULT_STATS_INTERVAL,
        }
    }
}

/// Entry point: `Worker::builder(pool)…start()`.
#[derive(Debug)]
pub struct Worker;

impl Worker {
    /// A builder with the default [`Config`] and every `#[job]` of the binary.
    pub fn builder(pool: MySqlPool) -> WorkerBuilder {
        WorkerBuilder {
            pool,
            config: Config::default(),
            registry: None,
            extensions: Extensions::default(),
            worker_id: None,
            periodic: Vec::new(),
        }
    }

    /// A pool size for a worker of `concurrency`: the reserved connections plus one per job up
    /// to 16, for handlers that borrow a connection through [`JobContext::pool`].
    pub fn recommended_pool_size(concurrency: usize) -> u32 {
        RESERVED_CONNECTIONS + u32::try_from(concurrency.min(16)).unwrap_or(16)
    }
}

/// Configures and starts a worker.
#[derive(Debug)]
#[must_use = "a builder does nothing until `start`"]
pub struct WorkerBuilder {
    pool: MySqlPool,
    config: Config,
    registry: Option<Registry>,
    extensions: Extensions,
    worker_id: Option<String>,
    periodic: Vec<crate::Periodic>,
}

impl WorkerBuilder {
    /// The jobs this worker can run (default: [`Registry::from_inventory`]).
    pub fn registry(mut self, registry: Registry) -> Self {
        self.registry = Some(registry);
        self
    }

    /// Claims only from these queues.
    pub fn queues<I, S>(mut self, queues: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.config.queues = queues.into_iter().map(Into::into).collect();
        self
    }

    /// Jobs running at once.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.config.concurrency = n;
        self
    }

    /// Most jobs per claim.
    pub fn batch_size(mut self, n: u32) -> Self {
        self.config.batch_size = n;
        self
    }

    /// Claim loops running side by side (default 1).
    pub fn claimers(mut self, n: usize) -> Self {
        self.config.claimers = n;
        self
    }

    /// Lease length.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.config.lease = lease;
        self
    }

    /// Heartbeat interval (default: a third of the lease).
    pub fn heartbeat_interval(mut self, every: Duration) -> Self {
        self.config.heartbeat_interval = Some(every);
        self
    }

    /// Idle poll floor and ceiling.
    pub fn poll_interval(mut self, floor: Duration, ceiling: Duration) -> Self {
        self.config.poll_floor = floor;
        self.config.poll_ceiling = ceiling;
        self
    }

    /// Grace period at shutdown.
    pub fn shutdown_timeout(mut self, grace: Duration) -> Self {
        self.config.shutdown_timeout = grace;
        self
    }

    /// Timeout of jobs that set none.
    pub fn job_timeout(mut self, timeout: Duration) -> Self {
        self.config.job_timeout = timeout;
        self
    }

    /// Leader maintenance interval and leader lease.
    pub fn maintenance(mut self, interval: Duration, leader_ttl: Duration) -> Self {
        self.config.maintenance_interval = interval;
        self.config.leader_ttl = leader_ttl;
        self
    }

    /// Retention of completed/cancelled and of failed rows.
    pub fn retention(mut self, completed: Duration, failed: Duration) -> Self {
        self.config.completed_retention = completed;
        self.config.failed_retention = failed;
        self
    }

    /// Statistics flush interval.
    pub fn stats_interval(mut self, every: Duration) -> Self {
        self.config.stats_interval = every;
        self
    }

    /// Replaces the whole configuration.
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    /// A value every job can read with [`JobContext::state`].
    pub fn state<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.extensions.insert(value);
        self
    }

    /// Adds a periodic job (besides those declared with `#[job(cron = "...")]`). Every worker
    /// that declares a schedule runs the scheduler each maintenance round; the ledger makes each
    /// tick exactly-once however many do.
    pub fn periodic(mut self, periodic: crate::Periodic) -> Self {
        self.periodic.push(periodic);
        self
    }

    /// The worker's id in `locked_by` (default `host:pid:random`).
    pub fn worker_id(mut self, id: impl Into<String>) -> Self {
        self.worker_id = Some(id.into());
        self
    }

    /// Checks the settings, the server and the schema, then starts the services.
    pub async fn start(self) -> Result<WorkerHandle, Error> {
        let registry = match self.registry {
            Some(r) => r,
            None => Registry::from_inventory()?,
        };
        let mut config = self.config;
        if config.queues.is_empty() {
            config.queues = registry.queues().into_iter().map(str::to_owned).collect();
        }
        validate(&config, &self.pool)?;
        {
            let mut conn = self.pool.acquire().await?;
            crate::store::server::detect(&mut conn).await?;
            crate::migrate::check_schema(&mut conn).await?;
        }
        let worker_id = self.worker_id.unwrap_or_else(default_worker_id);
        let mut periodic = registry.periodic()?;
        periodic.extend(self.periodic);
        let shared = Arc::new(Shared {
            pool: self.pool,
            slots: Arc::new(Semaphore::new(config.concurrency)),
            config,
            registry,
            metrics: Arc::new(Metrics::new(&worker_id)),
            worker_id,
            extensions: Arc::new(self.extensions),
            in_flight: Mutex::new(HashMap::new()),
            stop_fetching: CancellationToken::new(),
            stop_services: CancellationToken::new(),
            slot_freed: Notify::new(),
            stopping: AtomicBool::new(false),
            completer: completer::Completer::new(),
            periodic,
        });
        stats::register_worker(&shared).await?;
        let mut tasks: Vec<JoinHandle<()>> = (0..shared.config.claimers)
            .map(|i| tokio::spawn(producer::run(shared.clone(), i)))
            .collect();
        tasks.extend([
            tokio::spawn(completer::run(shared.clone())),
            tokio::spawn(lease::run(shared.clone())),
            tokio::spawn(maintenance::run(shared.clone())),
            tokio::spawn(stats::run(shared.clone())),
        ]);
        tracing::info!(
            worker = %shared.worker_id,
            queues = ?shared.config.queues,
            concurrency = shared.config.concurrency,
            jobs = shared.registry.len(),
            "worker started"
        );
        Ok(WorkerHandle { shared, tasks })
    }
}

fn validate(c: &Config, pool: &MySqlPool) -> Result<(), Error> {
    let bad = |msg: String| Err(Error::Config(msg));
    if c.queues.is_empty() {
        return bad("no queue to work: register jobs with #[job] (and link them into this binary) or name queues".into());
    }
    for q in &c.queues {
        crate::validate_queue_name(q)?;
    }
    if c.concurrency == 0 || c.concurrency > 10_000 {
        return bad(format!(
            "concurrency {} must be between 1 and 10000",
            c.concurrency
        ));
    }
    if c.claimers == 0 || c.claimers > 16 {
        return bad(format!("claimers {} must be between 1 and 16", c.claimers));
    }
    if c.batch_size == 0 || c.batch_size > 5_000 {
        return bad(format!(
            "batch size {} must be between 1 and 5000",
            c.batch_size
        ));
    }
    if c.lease < Duration::from_millis(500) {
        return bad(format!("lease {:?} is too short: at least 500ms", c.lease));
    }
    if c.heartbeat() >= c.lease {
        return bad(format!(
            "heartbeat interval {:?} must be shorter than the lease {:?}",
            c.heartbeat(),
            c.lease
        ));
    }
    if c.poll_floor.is_zero() || c.poll_floor > c.poll_ceiling {
        return bad(format!(
            "poll floor {:?} must be above zero and at most the ceiling {:?}",
            c.poll_floor, c.poll_ceiling
        ));
    }
    if c.leader_ttl <= c.maintenance_interval {
        return bad(format!(
            "leader lease {:?} must be longer than the maintenance interval {:?}",
            c.leader_ttl, c.maintenance_interval
        ));
    }
    let max = pool.options().get_max_connections();
    let reserved = u32::try_from(c.claimers)
        .unwrap_or(u32::MAX)
        .saturating_add(3);
    if max < reserved {
        return bad(format!(
            "the pool allows {max} connections but the worker needs {reserved} for itself \
             (claims, completer, heartbeat, maintenance); size it with Worker::recommended_pool_size({})",
            c.concurrency
        ));
    }
    Ok(())
}

fn default_worker_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".to_owned());
    format!("{host}:{}:{:04x}", std::process::id(), fastrand::u16(..))
}

/// A job this process holds.
pub(crate) struct InFlight {
    pub(crate) token: Arc<str>,
    pub(crate) ctx: JobContext,
    pub(crate) abort: Option<tokio::task::AbortHandle>,
    /// The handler returned; its outcome is being written.
    pub(crate) finished: bool,
}

/// State shared by the services of one worker.
pub(crate) struct Shared {
    pub(crate) pool: MySqlPool,
    pub(crate) config: Config,
    pub(crate) registry: Registry,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) worker_id: String,
    pub(crate) extensions: Arc<Extensions>,
    pub(crate) slots: Arc<Semaphore>,
    pub(crate) in_flight: Mutex<HashMap<JobId, InFlight>>,
    /// Cancelled when shutdown starts: no more claims.
    pub(crate) stop_fetching: CancellationToken,
    /// Cancelled when everything has drained: heartbeats, maintenance, completer stop.
    pub(crate) stop_services: CancellationToken,
    pub(crate) slot_freed: Notify,
    pub(crate) stopping: AtomicBool,
    pub(crate) completer: completer::Completer,
    pub(crate) periodic: Vec<crate::Periodic>,
}

impl Shared {
    pub(crate) fn in_flight(&self) -> std::sync::MutexGuard<'_, HashMap<JobId, InFlight>> {
        self.in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Wakes this process's idle workers: called after an enqueue, so a job enqueued here is
/// picked up without waiting for the next poll.
static LOCAL_WAKE: LazyLock<Notify> = LazyLock::new(Notify::new);

pub(crate) fn wake_local() {
    LOCAL_WAKE.notify_waiters();
}

/// What a graceful shutdown did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Jobs that finished within the grace period.
    pub finished: usize,
    /// Jobs cancelled at the deadline and released to `pending`.
    pub released: usize,
}

/// A running worker.
#[derive(Debug)]
#[must_use = "dropping the handle leaves the worker running until the runtime stops; call shutdown"]
pub struct WorkerHandle {
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("worker_id", &self.worker_id)
            .finish_non_exhaustive()
    }
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

    /// Waits for SIGINT or SIGTERM, then shuts down gracefully.
    pub async fn run_until_signal(self) -> Result<ShutdownReport, Error> {
        wait_for_signal().await;
        tracing::info!(worker = %self.shared.worker_id, "signal received: shutting down");
        self.shutdown().await
    }

    /// Graceful shutdown: stop claiming → let running jobs finish for the shutdown timeout →
    /// cancel the rest and release them to `pending` without consuming their attempt. Every
    /// job this worker held is completed, rescheduled or released when this returns.
    pub async fn shutdown(self) -> Result<ShutdownReport, Error> {
        let s = &self.shared;
        s.stopping.store(true, Ordering::SeqCst);
        s.stop_fetching.cancel();
        let running_at_start = s.in_flight().len();
        let deadline = tokio::time::Instant::now() + s.config.shutdown_timeout;
        // Phase 1: wait for running jobs (their outcomes are written by their own tasks).
        while !s.in_flight().is_empty() && tokio::time::Instant::now() < deadline {
            tokio::select! {
                () = s.slot_freed.notified() => {}
                () = tokio::time::sleep_until(deadline) => {}
                () = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
        // Phase 2: cancel what is left and hand it back.
        let released = executor::release_all(s, crate::CancelReason::Shutdown).await;
        s.stop_services.cancel();
        for t in self.tasks {
            let _ = t.await;
        }
        stats::unregister_worker(s).await;
        let report = ShutdownReport {
            finished: running_at_start.saturating_sub(released),
            released,
        };
        tracing::info!(worker = %s.worker_id, finished = report.finished, released = report.released, "worker stopped");
        Ok(report)
    }
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) {
            (Ok(mut int), Ok(mut term)) => {
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
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
