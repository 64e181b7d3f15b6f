//! The worker: claims jobs, runs them, records their outcome.
//!
//! Services, one per file, each driven by the shared shutdown tokens:
//! [`producer`] (claim loop) → [`executor`] (one task per job) → [`completer`] (batched,
//! token-guarded completion), beside [`lease`] (batched heartbeats), [`maintenance`] (leader
//! election, reaper, pruner) and [`stats`] (per-minute counters for `mysqlq-cli stats`).

mod completer;
mod events;
mod executor;
mod lease;
mod maintenance;
mod producer;
mod scheduler;
mod stats;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use sqlx::MySqlPool;
use sqlx::mysql::MySqlPoolOptions;
use tokio::sync::{Notify, Semaphore, broadcast};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::context::Extensions;
use crate::metrics::Metrics;
use crate::store::Owned;
use crate::{Error, JobContext, JobId, Registry};

pub use events::WorkerEvent;
pub(crate) use executor::error_chain;

/// Connections of the worker's own pool with the default single claim loop: claims, the
/// completer, heartbeats, maintenance and statistics (one more per extra claim loop). The
/// worker opens this small pool itself, from the connect options of the pool it is given, so
/// handlers borrowing connections through [`JobContext::pool`] can never starve the claims,
/// heartbeats and completions that keep their jobs safe.
pub const RESERVED_CONNECTIONS: u32 = 5;

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
    /// `innodb_lock_wait_timeout` of the worker's own sessions (whole seconds, at least 1): a
    /// completion or heartbeat blocked by an application transaction that holds a lock on a job
    /// row gives up after this long and is retried for that job alone, so one blocked row never
    /// stalls the others. Default [`Config::DEFAULT_LOCK_WAIT_TIMEOUT`].
    pub lock_wait_timeout: Duration,
}

impl Config {
    /// 16 jobs at once.
    pub const DEFAULT_CONCURRENCY: usize = 16;
    /// Up to 100 jobs per claim (never more than the free slots).
    pub const DEFAULT_BATCH_SIZE: u32 = 100;
    /// One claim loop: with slot gathering it claims full batches, which beats more loops
    /// claiming smaller ones (measured with `mysqlq-bench`, see BENCHMARKS.md).
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
    /// Worker sessions wait at most 5 s for a row lock.
    pub const DEFAULT_LOCK_WAIT_TIMEOUT: Duration = Duration::from_secs(5);

    fn heartbeat(&self) -> Duration {
        self.heartbeat_interval.unwrap_or(self.lease / 3)
    }

    /// How long before the end of its lease (as last confirmed by the database) a job is
    /// stopped locally when no heartbeat could renew it: a quarter of the lease, at most 5 s.
    /// Leases are counted from the moment the renewing statement was *sent*, and the database
    /// counts them from when it ran that statement, so the local deadline always comes first.
    pub fn lease_margin(&self) -> Duration {
        (self.lease / 4).min(Duration::from_secs(5))
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
            lock_wait_timeout: Self::DEFAULT_LOCK_WAIT_TIMEOUT,
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

    /// A size for the pool given to [`Worker::builder`] with `concurrency`: one connection per
    /// job up to 16, for handlers that borrow a connection through [`JobContext::pool`], plus one
    /// for enqueues. The worker's own services use a separate pool of
    /// [`RESERVED_CONNECTIONS`] that it opens itself.
    pub fn recommended_pool_size(concurrency: usize) -> u32 {
        1 + u32::try_from(concurrency.clamp(1, 16)).unwrap_or(16)
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

    /// `innodb_lock_wait_timeout` of the worker's own sessions (default 5 s).
    pub fn lock_wait_timeout(mut self, timeout: Duration) -> Self {
        self.config.lock_wait_timeout = timeout;
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
        validate(&config)?;
        let mut periodic = registry.periodic()?;
        periodic.extend(self.periodic);
        scheduler::validate(&periodic, config.maintenance_interval)?;
        let db = service_pool(&self.pool, &config);
        {
            let mut conn = db.acquire().await?;
            crate::store::server::detect(&mut conn).await?;
            crate::migrate::check_schema(&mut conn).await?;
        }
        let worker_id = self.worker_id.unwrap_or_else(default_worker_id);
        // The leader lease and every other "is this me?" question use an identity no other
        // process can share, even when replicas are started with the same `--worker-id`.
        let instance = format!(
            "{}#{}",
            worker_id.chars().take(90).collect::<String>(),
            uuid::Uuid::new_v4().simple()
        );
        let (events, _) = broadcast::channel(events::CAPACITY);
        let shared = Arc::new(Shared {
            pool: self.pool,
            db,
            slots: Arc::new(Semaphore::new(config.concurrency)),
            config,
            registry,
            metrics: Arc::new(Metrics::new(&worker_id)),
            worker_id,
            instance,
            extensions: Arc::new(self.extensions),
            in_flight: Mutex::new(HashMap::new()),
            stop_fetching: CancellationToken::new(),
            stop_services: CancellationToken::new(),
            slot_freed: Notify::new(),
            stopping: AtomicBool::new(false),
            lease_unconfirmed: AtomicBool::new(false),
            completer: completer::Completer::new(),
            periodic,
            events,
        });
        stats::register_worker(&shared).await?;
        let producers: Vec<JoinHandle<()>> = (0..shared.config.claimers)
            .map(|i| tokio::spawn(producer::run(shared.clone(), i)))
            .collect();
        let services = vec![
            tokio::spawn(completer::run(shared.clone())),
            tokio::spawn(lease::run(shared.clone())),
            tokio::spawn(lease::watchdog(shared.clone())),
            tokio::spawn(maintenance::run(shared.clone())),
            tokio::spawn(stats::run(shared.clone())),
        ];
        tracing::info!(
            worker = %shared.worker_id,
            queues = ?shared.config.queues,
            concurrency = shared.config.concurrency,
            jobs = shared.registry.len(),
            "worker started"
        );
        Ok(WorkerHandle {
            shared,
            producers,
            services,
        })
    }
}

/// The worker's own pool: same server and credentials as the application's pool, sized for the
/// services alone, with a short lock wait on every session.
fn service_pool(app: &MySqlPool, config: &Config) -> MySqlPool {
    let size =
        RESERVED_CONNECTIONS + u32::try_from(config.claimers.saturating_sub(1)).unwrap_or(16);
    let lock_wait = config.lock_wait_timeout.as_secs().max(1);
    MySqlPoolOptions::new()
        .max_connections(size)
        .min_connections(0)
        .acquire_timeout(config.lease.max(Duration::from_secs(5)))
        .test_before_acquire(false)
        .after_connect(move |conn, _| {
            Box::pin(async move { crate::store::worker_session_setup(conn, lock_wait).await })
        })
        .connect_lazy_with((*app.connect_options()).clone())
}

fn validate(c: &Config) -> Result<(), Error> {
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
    if c.lease < Duration::from_millis(500) || c.lease > Duration::from_secs(24 * 3600) {
        return bad(format!("lease {:?} must be between 500ms and 24h", c.lease));
    }
    if c.leader_ttl > Duration::from_secs(24 * 3600) {
        return bad(format!(
            "leader lease {:?} must be at most 24h",
            c.leader_ttl
        ));
    }
    let century = Duration::from_secs(100 * 365 * 24 * 3600);
    if c.completed_retention > century || c.failed_retention > century {
        return bad(format!(
            "retention (completed {:?}, failed {:?}) must be at most 100 years",
            c.completed_retention, c.failed_retention
        ));
    }
    if c.heartbeat() >= c.lease - c.lease_margin() {
        return bad(format!(
            "heartbeat interval {:?} must be shorter than the lease {:?} less its safety margin {:?}",
            c.heartbeat(),
            c.lease,
            c.lease_margin()
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
    if c.lock_wait_timeout < Duration::from_secs(1)
        || c.lock_wait_timeout > Duration::from_secs(3600)
    {
        return bad(format!(
            "lock wait timeout {:?} must be between 1s and 1h (whole seconds)",
            c.lock_wait_timeout
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
}

/// State shared by the services of one worker.
pub(crate) struct Shared {
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
    pub(crate) slots: Arc<Semaphore>,
    pub(crate) in_flight: Mutex<HashMap<Key, InFlight>>,
    /// Cancelled when shutdown starts: no more claims.
    pub(crate) stop_fetching: CancellationToken,
    /// Cancelled when everything has drained: heartbeats, maintenance, completer stop.
    pub(crate) stop_services: CancellationToken,
    pub(crate) slot_freed: Notify,
    pub(crate) stopping: AtomicBool,
    /// Set when jobs were stopped because no heartbeat could renew their lease; no claims until
    /// the database answers again.
    pub(crate) lease_unconfirmed: AtomicBool,
    pub(crate) completer: completer::Completer,
    pub(crate) periodic: Vec<crate::Periodic>,
    pub(crate) events: broadcast::Sender<WorkerEvent>,
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

    /// Removes the entry of exactly this claim, if it is still there.
    pub(crate) fn forget(&self, key: &Key) -> Option<InFlight> {
        let removed = self.in_flight().remove(key);
        if removed.is_some() {
            self.slot_freed.notify_waiters();
        }
        removed
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
    /// Jobs handed back to `pending` without consuming their attempt: claimed but not started
    /// when shutdown began, or cancelled at the deadline.
    pub released: usize,
}

/// A running worker.
#[derive(Debug)]
#[must_use = "dropping the handle leaves the worker running until the runtime stops; call shutdown"]
pub struct WorkerHandle {
    shared: Arc<Shared>,
    producers: Vec<JoinHandle<()>>,
    services: Vec<JoinHandle<()>>,
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
        wait_for_signal().await;
        let running = self.shared.in_flight().len();
        tracing::warn!(
            worker = %self.shared.worker_id,
            running,
            grace = %crate::backoff::format_duration(self.shared.config.shutdown_timeout),
            "signal received: no more claims; waiting for running jobs up to the grace period \
             (send SIGINT or SIGTERM again to stop now and release them)"
        );
        self.shutdown_with(async {
            wait_for_signal().await;
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
        let s = &self.shared;
        s.stopping.store(true, Ordering::SeqCst);
        s.stop_fetching.cancel();
        let running_at_start = s.in_flight().len();
        let deadline = tokio::time::Instant::now() + s.config.shutdown_timeout;
        let mut released = 0;
        let mut producers = self.producers;
        let mut force = std::pin::pin!(force);
        // Phase 1: release what has not started; wait for running jobs (their outcomes are
        // written by their own tasks) and for a claim in flight to come back.
        loop {
            producers.retain(|p| !p.is_finished());
            released += executor::release_where(s, |f| f.phase == Phase::Claimed).await;
            if (s.in_flight().is_empty() && producers.is_empty())
                || tokio::time::Instant::now() >= deadline
            {
                break;
            }
            tokio::select! {
                () = s.slot_freed.notified() => {}
                () = tokio::time::sleep_until(deadline) => {}
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
                () = &mut force => break,
            }
        }
        // Phase 2: cancel what is left and hand it back.
        for p in &producers {
            p.abort();
        }
        released += executor::release_where(s, |f| f.phase != Phase::Finishing).await;
        // Outcomes already being written get a moment to land.
        let settle = tokio::time::Instant::now() + Duration::from_secs(5);
        while !s.in_flight().is_empty() && tokio::time::Instant::now() < settle {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        s.stop_services.cancel();
        for t in producers.into_iter().chain(self.services) {
            let _ = t.await;
        }
        stats::unregister_worker(s).await;
        let report = ShutdownReport {
            finished: running_at_start.saturating_sub(released),
            released,
        };
        tracing::info!(worker = %s.worker_id, finished = report.finished, released = report.released, "worker stopped");
        s.db.close().await;
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
