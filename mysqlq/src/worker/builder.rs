//! Building and starting a worker: [`Worker::builder`], [`WorkerBuilder`] and its `start`, which
//! checks the settings, the server and the schema, then spawns the services.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::MySqlPool;
use sqlx::mysql::MySqlPoolOptions;
use tokio::sync::{Notify, Semaphore, broadcast};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::config::{RESERVED_CONNECTIONS, validate, validate_worker_id};
use super::threads::{self, ServiceThread};
use super::{
    Config, Shared, WorkerHandle, completer, events, lag, lease, maintenance, producer, scheduler,
    stats, workflow,
};
use crate::context::Extensions;
use crate::metrics::Metrics;
use crate::{Error, Registry};

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
            hooks: crate::hooks::Hooks::new(),
            concurrency_set: false,
            #[cfg(feature = "redis")]
            redis: None,
            #[cfg(feature = "otel")]
            meter: None,
        }
    }

    /// A size for the pool given to [`Worker::builder`] with `concurrency`: one connection per
    /// job up to 16, for handlers that borrow a connection through [`JobContext::pool`], plus one
    /// for enqueues. The worker's own services use a separate pool of
    /// [`RESERVED_CONNECTIONS`] that it opens itself.
    ///
    /// [`JobContext::pool`]: crate::JobContext::pool
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
    hooks: crate::hooks::Hooks,
    /// `concurrency` (or a whole `config`) was given: no sum of per-queue limits replaces it.
    concurrency_set: bool,
    #[cfg(feature = "redis")]
    redis: Option<crate::redis::Redis>,
    #[cfg(feature = "otel")]
    meter: Option<opentelemetry::metrics::Meter>,
}

impl WorkerBuilder {
    /// Serves this worker's queues over Redis Streams (feature `redis`, `docs/redis.md`): a
    /// relay moves their committed jobs into the streams and this worker reads them with the
    /// consumer group `mysqlq`, instead of claiming from MySQL itself. MySQL stays the source
    /// of truth; the handlers, error classes, leases and outcomes are the same.
    #[cfg(feature = "redis")]
    pub fn redis(mut self, redis: crate::redis::Redis) -> Self {
        self.redis = Some(redis);
        self
    }

    /// Mirrors this worker's metrics as instruments of `meter` (feature `otel`,
    /// [`crate::otel`]): the Prometheus exposition's names and labels, read from the same
    /// counters, so the two agree.
    #[cfg(feature = "otel")]
    pub fn otel_meter(mut self, meter: opentelemetry::metrics::Meter) -> Self {
        self.meter = Some(meter);
        self
    }

    /// The jobs this worker can run (default: [`Registry::from_inventory`]).
    pub fn registry(mut self, registry: Registry) -> Self {
        self.registry = Some(registry);
        self
    }

    /// Hooks around this worker's jobs ([`crate::hooks`]), run after the global hooks
    /// ([`crate::hooks::set_global_hooks`]). Replaces hooks given earlier.
    pub fn hooks(mut self, hooks: crate::hooks::Hooks) -> Self {
        self.hooks = hooks;
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
        self.concurrency_set = true;
        self
    }

    /// Runs at most `n` jobs of `queue` at once (per-queue concurrency, see
    /// [`Config::queue_concurrency`]); the queue is claimed from even if [`queues`](Self::queues)
    /// did not name it. When every queue of the worker has a limit and
    /// [`concurrency`](Self::concurrency) was not set, the worker's concurrency is their sum.
    pub fn queue_concurrency(mut self, queue: impl Into<String>, n: usize) -> Self {
        self.config.queue_concurrency.insert(queue.into(), n);
        self
    }

    /// At most `rate` handler starts per period for the whole of `queue`, across every worker
    /// ([`Config::queue_rate`]): stored at start, obeyed by every worker of the queue.
    pub fn queue_rate(mut self, queue: impl Into<String>, rate: crate::Rate) -> Self {
        self.config.queue_rate.insert(queue.into(), rate);
        self
    }

    /// At most `n` jobs of `queue` running at once across every worker
    /// ([`Config::queue_global_limit`]): stored at start, obeyed by every worker of the queue.
    pub fn queue_global_limit(mut self, queue: impl Into<String>, n: u32) -> Self {
        self.config.queue_global_limit.insert(queue.into(), n);
        self
    }

    /// The local prefetch buffer: at most `jobs` claimed ahead of free slots, each waiting at
    /// most `wait` for one (see [`Config::prefetch`]). `prefetch(0, …)` claims only for free
    /// slots.
    pub fn prefetch(mut self, jobs: usize, wait: Duration) -> Self {
        self.config.prefetch = jobs;
        self.config.prefetch_wait = wait;
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

    /// How often the leader reads the queue gauges (default
    /// [`WorkerConfig::DEFAULT_GAUGE_INTERVAL`](crate::WorkerConfig::DEFAULT_GAUGE_INTERVAL)).
    pub fn gauge_interval(mut self, interval: Duration) -> Self {
        self.config.gauge_interval = interval;
        self
    }

    /// Retention of completed/cancelled and of failed rows.
    pub fn retention(mut self, completed: Duration, failed: Duration) -> Self {
        self.config.completed_retention = completed;
        self.config.failed_retention = failed;
        self
    }

    /// Deletes the row of each job this worker completes, in the transaction that records the
    /// completion, instead of marking it `completed` and pruning it after the retention ("no
    /// history"; default `false`). Each completion then costs the database less: one DELETE
    /// instead of an UPDATE of the status in every index that holds it and a later DELETE by
    /// the pruner. A completed job is then gone: no `completed` row to look up, search, count or
    /// retry (the per-minute statistics and latency histograms still count it). Kept and marked
    /// `completed` as usual, because a reader needs the row: workflow steps (their dependents
    /// and the sweep read their status) and jobs holding their dedupe key for a window after
    /// completion (`EnqueueOptions::dedupe_window`). Failed and cancelled rows are kept. Other
    /// workers on the same tables may keep their completed rows; see `docs/schema.md`.
    pub fn delete_completed(mut self, delete: bool) -> Self {
        self.config.delete_completed = delete;
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
        self.concurrency_set = true;
        self
    }

    /// A value every job can read with [`JobContext::state`](crate::JobContext::state).
    pub fn state<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.extensions.insert(value);
        self
    }

    /// Adds a periodic job (besides those declared with `#[job(cron = "...")]`). Every worker
    /// that declares a schedule wakes at each of its ticks (on the database clock) to enqueue
    /// it; the ledger makes each tick exactly-once however many do. See [`crate::Periodic`].
    pub fn periodic(mut self, periodic: crate::Periodic) -> Self {
        self.periodic.push(periodic);
        self
    }

    /// The worker's id in `locked_by` (default `host:pid:random`): 1 to 128 printable
    /// characters, not starting with `redis-relay:` (the Redis relay's own rows), or `start`
    /// refuses it.
    pub fn worker_id(mut self, id: impl Into<String>) -> Self {
        self.worker_id = Some(id.into());
        self
    }

    /// `innodb_lock_wait_timeout` of the worker's own sessions (default 5 s).
    pub fn lock_wait_timeout(mut self, timeout: Duration) -> Self {
        self.config.lock_wait_timeout = timeout;
        self
    }

    /// Attempts kept per job in its history ([`crate::admin::Admin::attempts`]): the newest
    /// `n`, 0 for none; at most 1000 (see [`Config::attempt_history`]).
    pub fn attempt_history(mut self, n: u32) -> Self {
        self.config.attempt_history = n;
        self
    }

    /// Checks the settings, the server and the schema, then starts the services on a thread of
    /// their own; handlers run on the runtime this is awaited on (see `docs/architecture.md`).
    pub async fn start(self) -> Result<WorkerHandle, Error> {
        let app = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::Config(
                "Worker::start must be awaited inside a Tokio runtime: its handlers run there"
                    .into(),
            )
        })?;
        let thread = ServiceThread::start(&app)?;
        let services = thread.handle().clone();
        match threads::on(&services, self.launch(app, services.clone())).await {
            Some(Ok((shared, producers, services))) => Ok(WorkerHandle {
                shared,
                producers,
                services,
                thread,
            }),
            Some(Err(e)) => {
                thread.stop();
                Err(e)
            }
            None => {
                thread.stop();
                Err(Error::Config(
                    "the worker's service thread stopped while the worker started".into(),
                ))
            }
        }
    }

    /// A value every job can read, for each type in `extensions` (`mysqlq::testing`'s options
    /// carry them); replaces earlier values of the same types.
    pub(crate) fn extensions(mut self, extensions: Extensions) -> Self {
        self.extensions.extend(extensions);
        self
    }

    /// [`start`](Self::start), on the services' runtime.
    async fn launch(
        #[cfg_attr(not(feature = "redis"), allow(unused_mut))] mut self,
        app: tokio::runtime::Handle,
        services: tokio::runtime::Handle,
    ) -> Result<Launched, Error> {
        #[cfg(feature = "redis")]
        let redis = self.redis.take();
        #[cfg(feature = "redis")]
        let (settled, settled_rx) = match &redis {
            Some(_) => {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        #[cfg(not(feature = "redis"))]
        let settled = None;
        let shared = self.shared(app, services, settled).await?;
        stats::register_worker(&shared).await?;
        #[cfg(feature = "redis")]
        let (producers, mut services) = match redis.zip(settled_rx) {
            Some((redis, rx)) => super::redis::spawn(&shared, redis, rx).await?,
            None => claim_loops(&shared),
        };
        #[cfg(not(feature = "redis"))]
        let (producers, mut services) = claim_loops(&shared);
        services.extend([
            tokio::spawn(completer::run(shared.clone())),
            tokio::spawn(lease::run(shared.clone())),
            tokio::spawn(lease::watchdog(shared.clone())),
            tokio::spawn(lag::run(shared.clone())),
            tokio::spawn(maintenance::run(shared.clone())),
            tokio::spawn(stats::run(shared.clone())),
            tokio::spawn(workflow::run(shared.clone())),
        ]);
        if !shared.periodic.is_empty() {
            services.push(tokio::spawn(scheduler::run(shared.clone())));
        }
        tracing::info!(
            worker = %shared.worker_id,
            queues = %shared.config.queues.join(","),
            concurrency = shared.config.concurrency,
            jobs = shared.registry.len(),
            "worker started"
        );
        Ok((shared, producers, services))
    }

    /// The worker's shared state, with its settings, the server and the schema checked; nothing
    /// started yet. `settled` is the Redis transport's channel (`None` without it). Also used
    /// by `mysqlq::testing` ([`super::inline`]), which runs jobs one at a time through it.
    pub(super) async fn shared(
        self,
        app: tokio::runtime::Handle,
        services: tokio::runtime::Handle,
        settled: Option<tokio::sync::mpsc::UnboundedSender<super::Key>>,
    ) -> Result<Arc<Shared>, Error> {
        let registry = match self.registry {
            Some(r) => r,
            None => Registry::from_inventory()?,
        };
        let mut config = self.config;
        if config.queues.is_empty() {
            config.queues = registry.queues().into_iter().map(str::to_owned).collect();
        }
        let limited = config
            .queue_rate
            .keys()
            .chain(config.queue_global_limit.keys());
        for q in config.queue_concurrency.keys().chain(limited) {
            if !config.queues.contains(q) {
                config.queues.push(q.clone());
            }
        }
        let all_limited = !config.queue_concurrency.is_empty()
            && config
                .queues
                .iter()
                .all(|q| config.queue_concurrency.contains_key(q));
        if all_limited && !self.concurrency_set {
            config.concurrency = config.queue_concurrency.values().sum();
        }
        if settled.is_some() && !config.queue_concurrency.is_empty() {
            return Err(Error::Config(
                "per-queue concurrency limits are not supported over Redis Streams yet: \
                 run the limited queues in a worker without --redis-url, or drop the limits"
                    .into(),
            ));
        }
        if settled.is_some()
            && let Some(q) = config
                .queue_rate
                .keys()
                .chain(config.queue_global_limit.keys())
                .next()
        {
            return Err(Error::Config(format!(
                "queue-wide limits (`{q}`) are not supported over Redis Streams: a relayed job \
                 waits in the stream for an unbounded time before a consumer starts it; serve \
                 `{q}` from a worker without --redis-url, or drop the limit"
            )));
        }
        if settled.is_some()
            && let Some(r) = registry
                .iter()
                .find(|r| r.rate_limit().is_some() && config.queues.iter().any(|q| q == r.queue()))
        {
            return Err(Error::Config(format!(
                "rate limits are not supported over Redis Streams: job `{}` declares \
                 rate_limit = \"{}\" on queue `{}`, and a relayed job waits in the stream for an \
                 unbounded time before it starts; serve `{}` from a worker without --redis-url, or \
                 drop the limit",
                r.kind(),
                r.rate_limit().map(|l| l.to_string()).unwrap_or_default(),
                r.queue(),
                r.queue()
            )));
        }
        validate(&config)?;
        if let Some(id) = &self.worker_id {
            validate_worker_id(id)?;
        }
        let mut periodic = registry.periodic()?;
        periodic.extend(self.periodic);
        scheduler::validate(&periodic)?;
        let db = service_pool(&self.pool, &config, !periodic.is_empty());
        {
            let mut conn = db.acquire().await?;
            crate::store::server::detect(&mut conn).await?;
            crate::migrate::check_schema(&mut conn).await?;
            store_queue_limits(&mut conn, &config).await?;
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
        // Completions wait briefly for the next claim to carry them, unless no claim loop runs.
        let carry_wait = if settled.is_some() {
            Duration::ZERO
        } else {
            config.poll_floor * 2
        };
        let completer = completer::Completer::new(carry_wait, config.delete_completed);
        let metrics = Arc::new(Metrics::new(&worker_id));
        #[cfg(feature = "otel")]
        if let Some(meter) = &self.meter {
            crate::otel::mirror(&metrics, meter);
        }
        let shared = Arc::new(Shared {
            app,
            services,
            pool: self.pool,
            db,
            slots: Arc::new(Semaphore::new(config.concurrency)),
            lanes: super::buffer::Lanes::new(&config),
            rate: super::rate::RateState::default(),
            config,
            registry,
            metrics,
            worker_id,
            instance,
            extensions: Arc::new(self.extensions),
            in_flight: Mutex::new(HashMap::new()),
            stop_fetching: CancellationToken::new(),
            stop_services: CancellationToken::new(),
            slot_freed: Notify::new(),
            work_seen: Notify::new(),
            steps_released: Notify::new(),
            stopping: AtomicBool::new(false),
            lease_unconfirmed: AtomicBool::new(false),
            completer: Arc::new(completer),
            workflow_wake: Notify::new(),
            periodic,
            hooks: crate::hooks::global_hooks().then(&self.hooks),
            events,
            settled,
        });
        Ok(shared)
    }
}

/// What [`WorkerBuilder::launch`] started: the shared state, the fetchers, the other services.
type Launched = (Arc<Shared>, Vec<JoinHandle<()>>, Vec<JoinHandle<()>>);

/// The claim loops (no service of their own beside them).
fn claim_loops(shared: &Arc<Shared>) -> (Vec<JoinHandle<()>>, Vec<JoinHandle<()>>) {
    let loops = (0..shared.config.claimers)
        .map(|i| tokio::spawn(producer::run(shared.clone(), i)))
        .collect();
    (loops, Vec::new())
}

/// The worker's own pool: same server and credentials as the application's pool, sized for the
/// services alone (one more when the periodic-job scheduler runs, so that a tick never waits
/// for another service's connection), with a short lock wait on every session. When the
/// application's pool is a multi-host pool ([`crate::cluster`]), this one joins its failover
/// group, so that both always talk to the same writer.
fn service_pool(app: &MySqlPool, config: &Config, scheduler: bool) -> MySqlPool {
    let size =
        RESERVED_CONNECTIONS + u32::try_from(config.claimers).unwrap_or(16) + u32::from(scheduler);
    let lock_wait = config.lock_wait_timeout.as_secs().max(1);
    let options = MySqlPoolOptions::new()
        .max_connections(size)
        .min_connections(0)
        .acquire_timeout(config.lease.max(Duration::from_secs(5)))
        .test_before_acquire(false);
    crate::cluster::follow(
        app,
        options,
        Arc::new(move |conn| {
            Box::pin(async move { crate::store::worker_session_setup(conn, lock_wait).await })
        }),
    )
}

fn default_worker_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".to_owned());
    format!("{host}:{}:{:04x}", std::process::id(), fastrand::u16(..))
}

/// Stores the queue-wide limits of `config` (`--rate`, `--global`), so every worker of those
/// queues obeys them; a limit stored by an earlier start that differs is logged.
async fn store_queue_limits(
    conn: &mut sqlx::MySqlConnection,
    config: &Config,
) -> Result<(), Error> {
    let queues: std::collections::BTreeSet<&String> = config
        .queue_rate
        .keys()
        .chain(config.queue_global_limit.keys())
        .collect();
    for q in queues {
        let limits = crate::store::QueueLimits {
            rate: config.queue_rate.get(q).copied(),
            global: config.queue_global_limit.get(q).copied(),
        };
        let before = crate::store::queue_limits_set(conn, q, limits).await?;
        if !before.is_none() && before != limits {
            tracing::warn!(queue = %q, before = ?before, now = ?limits, "queue limits changed by this worker's start");
        }
    }
    Ok(())
}
