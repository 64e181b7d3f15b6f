//! Worker settings: [`Config`] with its documented defaults, and the checks `start` runs on them.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::Error;

/// Connections of the worker's own pool for its services besides the claim loops: the
/// completer, heartbeats, attempt outcomes, maintenance and statistics; the pool has one more
/// per claim loop (each keeps its own while it claims back to back or polls an empty queue), and
/// one more for the periodic-job scheduler when the worker declares schedules. The
/// worker opens this small pool itself, from the connect options of the pool it is given, so
/// handlers borrowing connections through [`JobContext::pool`] can never starve the claims,
/// heartbeats and completions that keep their jobs safe.
///
/// [`JobContext::pool`]: crate::JobContext::pool
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
    /// Per-queue concurrency: a queue named here runs at most this many of its jobs at once,
    /// so a slow queue cannot take every slot (`--queues emails=10,reports=2`). Queues not
    /// named share the worker's slots. Each queue here is also claimed from (added to
    /// `queues` if missing). Default: none.
    pub queue_concurrency: BTreeMap<String, usize>,
    /// Queue-wide rates (`--rate emails=100/s`): at most this many handler starts per period
    /// for the whole queue, across every worker. Stored in the database at start, so every
    /// worker obeys them, started with the setting or not (the last start wins). Each queue here
    /// is also claimed from. Default: none.
    pub queue_rate: BTreeMap<String, crate::Rate>,
    /// Global concurrency limits (`--global emails=20`): at most this many jobs of the queue
    /// running at once across every worker, stored like [`queue_rate`](Self::queue_rate).
    /// Default: none.
    pub queue_global_limit: BTreeMap<String, u32>,
    /// Most jobs claimed ahead of free slots (the local prefetch buffer, see
    /// [`prefetch_wait`](Self::prefetch_wait)): a claim asks for a whole batch while running
    /// jobs finish, so each claim and each commit carries more jobs. How many are claimed ahead
    /// also adapts to how fast the worker starts jobs: at most half of those started in the last
    /// `prefetch_wait`. 0 claims only for free slots. Default [`Config::DEFAULT_PREFETCH`].
    pub prefetch: usize,
    /// Longest a claimed job waits in the prefetch buffer for a free slot; after that it is
    /// handed back to `pending` without consuming its attempt, for any worker to take. At most
    /// half of the lease less its safety margin is used. Default
    /// [`Config::DEFAULT_PREFETCH_WAIT`]; 1 ms to 1 h.
    pub prefetch_wait: Duration,
    /// Claim loops running side by side, sharing the slots, so that one claim's round trips
    /// and commit overlap another's. Each idle claim loop polls once per idle interval.
    /// Default [`Config::DEFAULT_CLAIMERS`].
    pub claimers: usize,
    /// Lease taken on claim and renewed by heartbeats. Default [`Config::DEFAULT_LEASE`].
    pub lease: Duration,
    /// Interval between heartbeats. Default: a third of the lease; 1 ms up to the lease less its
    /// safety margin.
    pub heartbeat_interval: Option<Duration>,
    /// Shortest idle wait between claims. Default [`Config::DEFAULT_POLL_FLOOR`].
    pub poll_floor: Duration,
    /// Longest idle wait between claims. Default [`Config::DEFAULT_POLL_CEILING`]; at most 1 h.
    pub poll_ceiling: Duration,
    /// How long running jobs may finish after shutdown starts. Default
    /// [`Config::DEFAULT_SHUTDOWN_TIMEOUT`]; 0 to 24 h.
    pub shutdown_timeout: Duration,
    /// Per-attempt timeout for jobs that set none. Default [`Config::DEFAULT_JOB_TIMEOUT`]; 100 ms
    /// to 30 days.
    pub job_timeout: Duration,
    /// How often every worker reaps expired leases (and the leader prunes). Default
    /// [`Config::DEFAULT_MAINTENANCE_INTERVAL`]; 50 ms to 1 h.
    pub maintenance_interval: Duration,
    /// Leader lease; a dead leader is replaced after at most this long. Default
    /// [`Config::DEFAULT_LEADER_TTL`].
    pub leader_ttl: Duration,
    /// Age after which completed (and cancelled) rows are pruned. Default
    /// [`Config::DEFAULT_COMPLETED_RETENTION`].
    pub completed_retention: Duration,
    /// Delete the row of a job this worker completes, in the transaction that records the
    /// completion, instead of marking it `completed` for the pruner ("no history", as Graphile
    /// Worker does): less work for the database per job. Rows a reader still needs are kept
    /// and marked `completed` as usual: workflow steps and jobs holding their dedupe key for a
    /// window after completion. Failed and cancelled rows are kept either way. Default `false`;
    /// see [`WorkerBuilder::delete_completed`](crate::WorkerBuilder::delete_completed).
    pub delete_completed: bool,
    /// Age after which failed rows are pruned. Default [`Config::DEFAULT_FAILED_RETENTION`].
    pub failed_retention: Duration,
    /// How often counters are flushed to the statistics tables (an idle worker, with nothing
    /// but polls since its last flush, flushes every sixth interval). Default
    /// [`Config::DEFAULT_STATS_INTERVAL`]; 100 ms to 1 h.
    pub stats_interval: Duration,
    /// How often the leader reads the queue gauges (`mysqlq_queue_*`) from the database: at the
    /// first maintenance round at least this long after the previous reading. Default
    /// [`Config::DEFAULT_GAUGE_INTERVAL`]; 0 (every round) to 1 h.
    pub gauge_interval: Duration,
    /// `innodb_lock_wait_timeout` of the worker's own sessions (whole seconds, at least 1): a
    /// completion or heartbeat blocked by an application transaction that holds a lock on a job
    /// row gives up after this long and is retried for that job alone, so one blocked row never
    /// stalls the others. Also their `lock_wait_timeout` (metadata locks): a claim behind a
    /// `LOCK TABLES` or a DDL statement on `job_queue` gives up and is retried as well.
    /// Default [`Config::DEFAULT_LOCK_WAIT_TIMEOUT`].
    pub lock_wait_timeout: Duration,
    /// Attempts kept per job in its history (`mysqlq_job_attempt`: error, worker, start and
    /// end of every attempt that did not complete), newest first; 0 keeps none. Default
    /// [`Config::DEFAULT_ATTEMPT_HISTORY`].
    pub attempt_history: u32,
}

impl Config {
    /// 16 jobs at once.
    pub const DEFAULT_CONCURRENCY: usize = 16;
    /// Up to 100 jobs per claim (never more than the free slots).
    pub const DEFAULT_BATCH_SIZE: u32 = 100;
    /// Two claim loops: one's round trips and commit overlap the other's (measured with
    /// `mysqlq-bench`, see BENCHMARKS.md). While the queues are empty only the first polls.
    pub const DEFAULT_CLAIMERS: usize = 2;
    /// Up to 200 jobs claimed ahead of free slots (two default batches).
    pub const DEFAULT_PREFETCH: usize = 200;
    /// A claimed job waits at most 1 s in the prefetch buffer.
    pub const DEFAULT_PREFETCH_WAIT: Duration = Duration::from_secs(1);
    /// A 60-second lease.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);
    /// 5 ms after work was seen.
    pub const DEFAULT_POLL_FLOOR: Duration = Duration::from_millis(5);
    /// 100 ms when the queue stays empty (jittered down by up to a quarter): the worst pickup
    /// latency for jobs enqueued by other processes; an idle worker sends one index probe per
    /// wait.
    pub const DEFAULT_POLL_CEILING: Duration = Duration::from_millis(100);
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
    /// Queue gauges read every 15 s (by the leader only).
    pub const DEFAULT_GAUGE_INTERVAL: Duration = Duration::from_secs(15);
    /// Worker sessions wait at most 5 s for a row lock.
    pub const DEFAULT_LOCK_WAIT_TIMEOUT: Duration = Duration::from_secs(5);
    /// The last 20 attempts of each job are kept.
    pub const DEFAULT_ATTEMPT_HISTORY: u32 = 20;

    /// The prefetch wait in force: [`prefetch_wait`](Self::prefetch_wait), at most half of
    /// the lease less its safety margin, so a buffered job's lease always outlasts its wait.
    pub(super) fn buffer_wait(&self) -> Duration {
        self.prefetch_wait
            .min(self.lease.saturating_sub(self.lease_margin()) / 2)
    }

    pub(super) fn heartbeat(&self) -> Duration {
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
            queue_concurrency: BTreeMap::new(),
            queue_rate: BTreeMap::new(),
            queue_global_limit: BTreeMap::new(),
            prefetch: Self::DEFAULT_PREFETCH,
            prefetch_wait: Self::DEFAULT_PREFETCH_WAIT,
            lease: Self::DEFAULT_LEASE,
            heartbeat_interval: None,
            poll_floor: Self::DEFAULT_POLL_FLOOR,
            poll_ceiling: Self::DEFAULT_POLL_CEILING,
            shutdown_timeout: Self::DEFAULT_SHUTDOWN_TIMEOUT,
            job_timeout: Self::DEFAULT_JOB_TIMEOUT,
            maintenance_interval: Self::DEFAULT_MAINTENANCE_INTERVAL,
            leader_ttl: Self::DEFAULT_LEADER_TTL,
            completed_retention: Self::DEFAULT_COMPLETED_RETENTION,
            delete_completed: false,
            failed_retention: Self::DEFAULT_FAILED_RETENTION,
            stats_interval: Self::DEFAULT_STATS_INTERVAL,
            gauge_interval: Self::DEFAULT_GAUGE_INTERVAL,
            lock_wait_timeout: Self::DEFAULT_LOCK_WAIT_TIMEOUT,
            attempt_history: Self::DEFAULT_ATTEMPT_HISTORY,
        }
    }
}

pub(super) fn validate(c: &Config) -> Result<(), Error> {
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
    for (q, &n) in &c.queue_concurrency {
        crate::validate_queue_name(q)?;
        if !c.queues.contains(q) {
            return bad(format!(
                "queue `{q}` has a concurrency limit but is not among the queues to work ({})",
                c.queues.join(", ")
            ));
        }
        if n == 0 || n > c.concurrency {
            return bad(format!(
                "queue `{q}` concurrency {n} must be between 1 and the worker's concurrency {}",
                c.concurrency
            ));
        }
    }
    for (q, &n) in &c.queue_global_limit {
        crate::validate_queue_name(q)?;
        if n == 0 {
            return bad(format!(
                "queue `{q}` global limit 0 would run nothing: give at least 1, or no limit"
            ));
        }
    }
    for q in c.queue_rate.keys() {
        crate::validate_queue_name(q)?;
    }
    if c.prefetch > 100_000 {
        return bad(format!(
            "prefetch {} must be at most 100000 jobs (0 claims only for free slots)",
            c.prefetch
        ));
    }
    if c.prefetch_wait.is_zero() {
        return bad("prefetch wait must be above zero (prefetch 0 turns the buffer off)".into());
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
    if c.attempt_history > 1000 {
        return bad(format!(
            "attempt history {} must be at most 1000 attempts per job (0 keeps none)",
            c.attempt_history
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
    for (name, value, (low, high), hint) in duration_ranges(c) {
        if value < low || value > high {
            let f = crate::backoff::format_duration;
            return bad(format!(
                "{name} {} must be between {} and {}{hint}",
                f(value),
                f(low),
                f(high)
            ));
        }
    }
    Ok(())
}

const MS: Duration = Duration::from_millis(1);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);

/// The documented range of every duration setting not checked above: (setting, value, (lowest,
/// highest), what a value outside it would do).
fn duration_ranges(
    c: &Config,
) -> [(&'static str, Duration, (Duration, Duration), &'static str); 8] {
    [
        (
            "job timeout",
            c.job_timeout,
            (MS * 100, DAY * 30),
            " (a shorter one stops every handler that awaits anything)",
        ),
        (
            "maintenance interval",
            c.maintenance_interval,
            (MS * 50, HOUR),
            " (a shorter one keeps an idle worker sending statements without pause)",
        ),
        ("heartbeat interval", c.heartbeat(), (MS, HOUR), ""),
        ("poll ceiling", c.poll_ceiling, (MS, HOUR), ""),
        (
            "shutdown timeout",
            c.shutdown_timeout,
            (Duration::ZERO, DAY),
            "",
        ),
        (
            "statistics interval",
            c.stats_interval,
            (MS * 100, HOUR),
            " (a shorter one writes a statistics row for every few jobs)",
        ),
        (
            "gauge interval",
            c.gauge_interval,
            (Duration::ZERO, HOUR),
            " (0 reads the gauges every maintenance round)",
        ),
        ("prefetch wait", c.prefetch_wait, (MS, HOUR), ""),
    ]
}

/// Longest worker id, in characters (`locked_by` holds 128).
pub(super) const MAX_WORKER_ID: usize = 128;

/// A worker id: 1 to [`MAX_WORKER_ID`] printable characters, not starting with the Redis relay's
/// reserved prefix (the reaper takes rows held under it for relayed, not run, jobs).
pub(super) fn validate_worker_id(id: &str) -> Result<(), Error> {
    let bad = |why: String| Err(Error::Config(format!("worker id {id:?} {why}")));
    if id.trim().is_empty() || id.chars().count() > MAX_WORKER_ID {
        return bad(format!("must be 1 to {MAX_WORKER_ID} characters long"));
    }
    if id.chars().any(char::is_control) {
        return bad("must not contain control characters".into());
    }
    if id.starts_with(crate::store::RELAY_PREFIX) {
        return bad(format!(
            "must not start with `{}`, which marks rows a Redis relay holds",
            crate::store::RELAY_PREFIX
        ));
    }
    Ok(())
}
