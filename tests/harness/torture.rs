//! The history and the fault log of a torture run (`tests/torture.rs`), and the checker of
//! invariants over them ([`check`]).
//!
//! - **Runs**: every handler start and end of a [`crate::jobs::torture`] job, in `test_runs`
//!   (job, attempt, pid, claim token, event, time).
//! - **State writes**: every change of a job's `status` or `claim_token`, logged by an AFTER
//!   UPDATE trigger on `job_queue` into `torture_history` (old/new status, old/new token, the
//!   worker, attempts, `last_error`, time). Heartbeats, which only move the lease, are not logged.
//!   A deleted row is logged too, by an AFTER DELETE trigger, as a write to the status `deleted`
//!   (no new token); a worker that deletes completed jobs completes them so.
//! - **Faults**: every fault the test injected, with the worker it hit (none: all of them) and
//!   its window ([`Fault`]).
//! - **Jobs**: each job's row as the run left it ([`JobEnd`]): status, attempts, its keys and
//!   its rate limit (`rate_key`, `rate_limit`, `rate_period_us`). A row a completion deleted
//!   (from `processing`) is read from `torture_deleted`, where a second AFTER DELETE trigger
//!   keeps every deleted row's columns, as `completed` ([`History::deleted`]).
//!
//! All times are microseconds since the Unix epoch on this machine's clock (the server's
//! `UTC_TIMESTAMP(6)` reads the same clock).

pub mod check;
pub mod fault_proxy;
mod report;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sqlx::{MySqlPool, Row};

/// Creates `torture_history` and its trigger in the test database.
pub async fn install_history(pool: &MySqlPool) {
    for sql in [
        // No AUTO_INCREMENT: on MariaDB (`innodb_autoinc_lock_mode = 1`) an insert made by a
        // trigger of an UPDATE takes the table's AUTO-INC lock until that UPDATE ends, so every
        // status change would wait for any UPDATE that waits for a row lock: one worker's lock
        // wait became a stall of every worker's writes, and healthy workers' leases ran out
        // (issue 26, a quiet tally run). `UUID_SHORT()` numbers the rows in the order the
        // trigger ran, as the counter did.
        "CREATE TABLE torture_history (seq BIGINT UNSIGNED NOT NULL PRIMARY KEY, \
         job_id BIGINT UNSIGNED NOT NULL, old_status VARCHAR(16) NOT NULL, new_status VARCHAR(16) NOT NULL, \
         old_token CHAR(36) NULL, new_token CHAR(36) NULL, old_worker VARCHAR(128) NULL, \
         new_worker VARCHAR(128) NULL, old_attempts INT UNSIGNED NOT NULL, new_attempts INT UNSIGNED NOT NULL, \
         last_error VARCHAR(255) NULL, at DATETIME(6) NOT NULL, KEY (job_id))",
        "CREATE TRIGGER torture_history_log AFTER UPDATE ON job_queue FOR EACH ROW \
         INSERT INTO torture_history (seq, job_id, old_status, new_status, old_token, new_token, old_worker, \
           new_worker, old_attempts, new_attempts, last_error, at) \
         SELECT UUID_SHORT(), NEW.id, OLD.status, NEW.status, OLD.claim_token, NEW.claim_token, OLD.locked_by, \
           NEW.locked_by, OLD.attempts, NEW.attempts, LEFT(NEW.last_error, 255), UTC_TIMESTAMP(6) FROM DUAL \
         WHERE NOT (OLD.status <=> NEW.status) OR NOT (OLD.claim_token <=> NEW.claim_token) \
           OR (OLD.status = 'pending' AND NEW.status = 'pending' AND NEW.available_at < OLD.available_at)",
        // A deleted row: a write to `deleted` (a worker deleting the jobs it completes, an
        // operator's delete), and the row's columns as it was.
        "CREATE TRIGGER torture_history_delete AFTER DELETE ON job_queue FOR EACH ROW \
         INSERT INTO torture_history (seq, job_id, old_status, new_status, old_token, new_token, old_worker, \
           new_worker, old_attempts, new_attempts, last_error, at) \
         VALUES (UUID_SHORT(), OLD.id, OLD.status, 'deleted', OLD.claim_token, NULL, OLD.locked_by, \
           NULL, OLD.attempts, OLD.attempts, LEFT(OLD.last_error, 255), UTC_TIMESTAMP(6))",
        "CREATE TABLE torture_deleted (seq BIGINT UNSIGNED NOT NULL PRIMARY KEY, \
         id BIGINT UNSIGNED NOT NULL, queue_name VARCHAR(64) NOT NULL, payload JSON NOT NULL, \
         status VARCHAR(16) NOT NULL, attempts INT UNSIGNED NOT NULL, max_attempts INT UNSIGNED NOT NULL, \
         last_error TEXT NULL, ordering_key VARCHAR(191) NULL, concurrency_key VARCHAR(191) NULL, \
         concurrency_limit SMALLINT UNSIGNED NULL, cancelled_by VARCHAR(128) NULL, rate_key VARCHAR(191) NULL, \
         rate_limit INT UNSIGNED NULL, rate_period_us BIGINT UNSIGNED NULL, dedupe_window_us BIGINT UNSIGNED NULL, \
         at DATETIME(6) NOT NULL)",
        "CREATE TRIGGER torture_deleted_log AFTER DELETE ON job_queue FOR EACH ROW \
         INSERT INTO torture_deleted (seq, id, queue_name, payload, status, attempts, max_attempts, last_error, \
           ordering_key, concurrency_key, concurrency_limit, cancelled_by, rate_key, rate_limit, rate_period_us, \
           dedupe_window_us, at) \
         VALUES (UUID_SHORT(), OLD.id, OLD.queue_name, OLD.payload, OLD.status, OLD.attempts, OLD.max_attempts, \
           OLD.last_error, OLD.ordering_key, OLD.concurrency_key, OLD.concurrency_limit, OLD.cancelled_by, \
           OLD.rate_key, OLD.rate_limit, OLD.rate_period_us, OLD.dedupe_window_us, UTC_TIMESTAMP(6))",
        // Every hold a "429" wrote (`JobError::rate_limited`), with the statement's time: the
        // row commits with the hold or not at all. `UUID_SHORT()` for the reason above.
        "CREATE TABLE torture_holds (seq BIGINT UNSIGNED NOT NULL PRIMARY KEY, \
         queue_name VARCHAR(64) NOT NULL, rate_key VARCHAR(191) NOT NULL, job_id BIGINT UNSIGNED NOT NULL, \
         held_until DATETIME(6) NOT NULL, at DATETIME(6) NOT NULL)",
        "CREATE TRIGGER torture_holds_insert AFTER INSERT ON mysqlq_rate_hold FOR EACH ROW \
         INSERT INTO torture_holds (seq, queue_name, rate_key, job_id, held_until, at) \
         VALUES (UUID_SHORT(), NEW.queue_name, NEW.rate_key, NEW.job_id, NEW.held_until, UTC_TIMESTAMP(6))",
        "CREATE TRIGGER torture_holds_update AFTER UPDATE ON mysqlq_rate_hold FOR EACH ROW \
         INSERT INTO torture_holds (seq, queue_name, rate_key, job_id, held_until, at) \
         SELECT UUID_SHORT(), NEW.queue_name, NEW.rate_key, NEW.job_id, NEW.held_until, UTC_TIMESTAMP(6) \
         FROM DUAL WHERE NEW.held_until > OLD.held_until",
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(pool)
            .await
            .unwrap_or_else(|e| panic!("torture history setup `{sql}`: {e}"));
    }
}

/// What kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// `KILL CONNECTION` of one of the worker's server connections.
    KillConnection,
    /// The reply of a `COMMIT` the worker sent was lost (the commit happened).
    CommitReplyLost,
    /// Every connection of the worker was closed at once.
    CutAll,
    /// The database server was stopped (SIGSTOP) and continued: every worker.
    ServerStall,
    /// The worker process was stopped (SIGSTOP) and continued.
    Stop,
    /// The worker process was killed (SIGKILL).
    Kill,
    /// The test process itself was not scheduled for a while (an overloaded host): its
    /// in-process workers could not act, as if stopped ([`StallWatch`]).
    HostStall,
    /// The database server did not commit a one-row write within the watch's threshold (an
    /// overloaded host starving the server): no worker could renew a lease meanwhile, as if
    /// the server were stopped ([`ServerWatch`]).
    ServerSlow,
    /// The worker's own service thread woke late (`WorkerEvent::ServiceLag`, or its warning
    /// in a worker process's log): starved of CPU, its heartbeats and completions could not be
    /// sent meanwhile ([`LagWatch`], [`logged_lags`]).
    ServiceLag,
}

impl FaultKind {
    /// Whether the fault excuses a lease that expired, an attempt consumed without a handler
    /// run, and (within [`check::OVERLAP_WINDOW`] after the fault) runs overlapping.
    ///
    /// Only a worker that cannot act does: stopped, killed, or facing a stalled server.
    /// Connection faults excuse nothing: a worker reconnects, and an outcome left unknown by a
    /// lost reply is the runtime's to resolve (it made the claim token) — issue 13, defect 3.
    pub fn excuses(self) -> bool {
        matches!(
            self,
            Self::ServerStall
                | Self::Stop
                | Self::Kill
                | Self::HostStall
                | Self::ServerSlow
                | Self::ServiceLag
        )
    }
}

/// Watches this process for scheduling stalls: a thread that sleeps 5 ms at a time and notes
/// every wake-up later than `threshold`. On a shared, overloaded machine a process can go
/// unscheduled for longer than a short lease; its workers then could not heartbeat, exactly as
/// if stopped, and the checker must not blame the runtime for it.
pub struct StallWatch {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<(i64, i64)>>>,
}

/// Runs the stall watch loop until `stop`, calling `found` for every stall.
fn watch(threshold: Duration, stop: &AtomicBool, mut found: impl FnMut(i64, i64)) {
    let limit = i64::try_from(threshold.as_micros()).unwrap_or(i64::MAX);
    while !stop.load(Ordering::SeqCst) {
        let before = crate::jobs::now_micros();
        std::thread::sleep(Duration::from_millis(5));
        let after = crate::jobs::now_micros();
        if after - before > limit {
            found(before, after);
        }
    }
}

fn host_stall(worker: &str, start: i64, end: i64) -> Fault {
    Fault {
        kind: FaultKind::HostStall,
        worker: Some(worker.to_owned()),
        start,
        end: Some(end),
        note: format!(
            "the process was not scheduled for {} ms",
            (end - start) / 1000
        ),
    }
}

impl StallWatch {
    /// Starts watching this process; stalls longer than `threshold` are kept.
    pub fn start(threshold: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut stalls = Vec::new();
            watch(threshold, &flag, |a, b| stalls.push((a, b)));
            stalls
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops watching; one [`FaultKind::HostStall`] per stall and in-process worker.
    pub fn finish(mut self, workers: &[&str]) -> Vec<Fault> {
        self.stop.store(true, Ordering::SeqCst);
        let stalls = self
            .thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        stalls
            .iter()
            .flat_map(|&(start, end)| workers.iter().map(move |w| host_stall(w, start, end)))
            .collect()
    }
}

/// Watches the database server for stalls no test injected: a thread of its own, on its own
/// connection, commits a one-row `UPDATE` every 5 ms and notes every round trip longer than
/// `threshold`. On an overloaded host the server itself can go unscheduled (or wait on its log
/// flush) longer than a short lease allows; a heartbeat then cannot land, whatever the worker
/// does. A write that waits for row locks the workers hold is not what this measures: the
/// watch's row is its own table's, so only a server too slow for everyone shows.
pub struct ServerWatch {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<(i64, i64)>>>,
}

impl ServerWatch {
    /// Starts watching the server behind `options` (creating the table `torture_ping` in its
    /// database); round trips longer than `threshold` are kept.
    pub async fn start(options: sqlx::mysql::MySqlConnectOptions, threshold: Duration) -> Self {
        use sqlx::Connection as _;
        let mut conn = sqlx::MySqlConnection::connect_with(&options)
            .await
            .expect("the server watch connects");
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS torture_ping (id INT NOT NULL PRIMARY KEY, n BIGINT NOT NULL)",
        )
        .execute(&mut conn)
        .await
        .expect("create torture_ping");
        sqlx::query("REPLACE INTO torture_ping VALUES (1, 0)")
            .execute(&mut conn)
            .await
            .expect("seed torture_ping");
        drop(conn);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let limit = i64::try_from(threshold.as_micros()).unwrap_or(i64::MAX);
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the server watch's runtime");
            rt.block_on(async move {
                let mut stalls = Vec::new();
                let mut conn = None;
                while !flag.load(Ordering::SeqCst) {
                    let before = crate::jobs::now_micros();
                    if conn.is_none() {
                        conn = sqlx::MySqlConnection::connect_with(&options).await.ok();
                    }
                    let ok = match conn.as_mut() {
                        Some(c) => sqlx::query("UPDATE torture_ping SET n = n + 1 WHERE id = 1")
                            .execute(c)
                            .await
                            .is_ok(),
                        None => false,
                    };
                    let after = crate::jobs::now_micros();
                    if !ok {
                        // An injected fault (a stopped or restarted server) shows here too;
                        // it is already in the log: reconnect and go on.
                        conn = None;
                    } else if after - before > limit {
                        stalls.push((before, after));
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                stalls
            })
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops watching; one [`FaultKind::ServerSlow`] (hitting every worker) per slow round trip.
    pub fn finish(mut self) -> Vec<Fault> {
        self.stop.store(true, Ordering::SeqCst);
        let stalls = self
            .thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        stalls
            .into_iter()
            .map(|(start, end)| Fault {
                kind: FaultKind::ServerSlow,
                worker: None,
                start,
                end: Some(end),
                note: format!(
                    "the server took {} ms to commit a one-row write",
                    (end - start) / 1000
                ),
            })
            .collect()
    }
}

fn service_lag(worker: &str, lag: Duration, at: i64) -> Fault {
    let lag_us = i64::try_from(lag.as_micros()).unwrap_or(i64::MAX);
    Fault {
        kind: FaultKind::ServiceLag,
        worker: Some(worker.to_owned()),
        start: at.saturating_sub(lag_us),
        end: Some(at),
        note: format!("its service thread woke {} ms late", lag_us / 1000),
    }
}

/// Watches an in-process worker's service thread through its events: every
/// `WorkerEvent::ServiceLag` of at least `threshold` becomes a [`FaultKind::ServiceLag`]. A
/// worker whose service thread gets no CPU cannot renew its leases, however correct it is; the
/// worker measures that itself (and warns), and the checker must not blame it for it. A service
/// that blocked the thread would show here too: `tests/runtime.rs` holds the runtime to never
/// doing that.
pub struct LagWatch {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Vec<Fault>>,
}

impl LagWatch {
    /// Starts watching `handle`, the worker `worker`.
    pub fn start(handle: &mysqlq::WorkerHandle, worker: &str, threshold: Duration) -> Self {
        use tokio::sync::broadcast::error::{RecvError, TryRecvError};
        let mut rx = handle.events();
        let (tx, mut stop) = tokio::sync::oneshot::channel::<()>();
        let worker = worker.to_owned();
        let keep = move |found: &mut Vec<Fault>, e: mysqlq::WorkerEvent| {
            if let mysqlq::WorkerEvent::ServiceLag { lag, at } = e
                && lag >= threshold
            {
                let at = at
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
                found.push(service_lag(&worker, lag, at));
            }
        };
        let task = tokio::spawn(async move {
            let mut found = Vec::new();
            loop {
                tokio::select! {
                    biased;
                    e = rx.recv() => match e {
                        Ok(e) => keep(&mut found, e),
                        Err(RecvError::Lagged(_)) => {}
                        Err(RecvError::Closed) => return found,
                    },
                    _ = &mut stop => break,
                }
            }
            loop {
                match rx.try_recv() {
                    Ok(e) => keep(&mut found, e),
                    Err(TryRecvError::Lagged(_)) => {}
                    Err(_) => return found,
                }
            }
        });
        Self {
            stop: Some(tx),
            task,
        }
    }

    /// Stops watching; the lags seen.
    pub async fn finish(mut self) -> Vec<Fault> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task).await.unwrap_or_default()
    }
}

/// The service-thread lags worker process `worker` warned about in its log at `path` (the
/// runtime warns of a lag of half the lease's safety margin or more), as faults.
pub fn logged_lags(path: &std::path::Path, worker: &str) -> Vec<Fault> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("mysqlq::worker::lag"))
        .filter_map(|l| {
            let at = chrono::DateTime::parse_from_rfc3339(l.split_whitespace().next()?).ok()?;
            let ms: u64 = l
                .split("lag_ms=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()?;
            Some(service_lag(
                worker,
                Duration::from_millis(ms),
                at.timestamp_micros(),
            ))
        })
        .collect()
}

/// The environment variable naming the file where a worker process records its stalls
/// ([`record_stalls_from_env`]), and the one with the threshold in milliseconds.
pub const STALL_LOG_ENV: [&str; 2] = ["MYSQLQ_TORTURE_STALL_LOG", "MYSQLQ_TORTURE_STALL_MS"];

/// In a worker process started by the torture test: appends each stall of this process (a line
/// `start end`, in µs) to the file named by `MYSQLQ_TORTURE_STALL_LOG` as it happens (the
/// process may be killed at any time). Does nothing without that variable.
pub fn record_stalls_from_env() {
    let Some(path) = std::env::var_os(STALL_LOG_ENV[0]) else {
        return;
    };
    let ms = std::env::var(STALL_LOG_ENV[1])
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    std::thread::spawn(move || {
        let never = AtomicBool::new(false);
        watch(Duration::from_millis(ms), &never, |a, b| {
            use std::io::Write as _;
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
            {
                let _ = writeln!(f, "{a} {b}");
            }
        });
    });
}

/// The stalls a worker process recorded in `path` ([`record_stalls_from_env`]), as faults of
/// `worker`.
pub fn recorded_stalls(path: &std::path::Path, worker: &str) -> Vec<Fault> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (a, b) = l.split_once(' ')?;
            Some(host_stall(worker, a.parse().ok()?, b.parse().ok()?))
        })
        .collect()
}

/// One injected fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// What.
    pub kind: FaultKind,
    /// The worker it hit; `None`: every worker.
    pub worker: Option<String>,
    /// When it began.
    pub start: i64,
    /// When it ended; `None`: never (a killed process).
    pub end: Option<i64>,
    /// Details for the report (the connection id, the signal, …).
    pub note: String,
}

impl Fault {
    /// Whether it hit `worker`.
    pub fn hits(&self, worker: &str) -> bool {
        self.worker.as_deref().is_none_or(|w| w == worker)
    }
}

/// One row of `torture_history`: a change of a job's status or claim token.
#[derive(Debug, Clone)]
pub struct StateWrite {
    /// Order of the writes.
    pub seq: u64,
    /// The job.
    pub job: u64,
    /// `status` before.
    pub old_status: String,
    /// `status` after.
    pub new_status: String,
    /// `claim_token` before.
    pub old_token: Option<String>,
    /// `claim_token` after.
    pub new_token: Option<String>,
    /// `locked_by` before.
    pub old_worker: Option<String>,
    /// `locked_by` after.
    pub new_worker: Option<String>,
    /// `attempts` before.
    pub old_attempts: u32,
    /// `attempts` after.
    pub new_attempts: u32,
    /// `last_error` after (first 255 characters).
    pub last_error: Option<String>,
    /// When.
    pub at: i64,
}

/// One row of `test_runs`: a handler event.
#[derive(Debug, Clone)]
pub struct RunEvent {
    /// The job.
    pub job: u64,
    /// Its attempt number as the handler saw it.
    pub attempt: u32,
    /// The worker process.
    pub pid: u32,
    /// The job's act.
    pub tag: String,
    /// `start`, `ok`, `error`, `snooze`, `panic` or `dropped`.
    pub event: String,
    /// The claim token the handler ran under.
    pub token: String,
    /// When.
    pub at: i64,
}

/// A job as it ended.
#[derive(Debug, Clone)]
pub struct JobEnd {
    /// `id`.
    pub id: u64,
    /// `queue_name`: [`QUEUE`] or [`LIMITED_QUEUE`].
    pub queue: String,
    /// Its act (`payload.act`).
    pub act: String,
    /// `status`.
    pub status: String,
    /// `attempts`.
    pub attempts: u32,
    /// `max_attempts`.
    pub max_attempts: u32,
    /// `last_error`.
    pub last_error: Option<String>,
    /// `ordering_key`.
    pub ordering_key: Option<String>,
    /// `concurrency_key` and `concurrency_limit`.
    pub concurrency: Option<(String, u16)>,
    /// `cancelled_by` (`mysqlq:upstream`: a workflow step cancelled by its upstream rule).
    pub cancelled_by: Option<String>,
    /// `rate_key`, `rate_limit` and `rate_period_us`: the rate limit the row carries.
    pub rate: Option<RateLimit>,
}

/// A job row's rate limit: at most `limit` handler starts of key `key` in any window of
/// `period_us` (`job_queue.rate_key`, `rate_limit`, `rate_period_us`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RateLimit {
    /// The rate key (its bucket is the queue's and the key's).
    pub key: String,
    /// Starts per period.
    pub limit: u32,
    /// The period, in µs.
    pub period_us: i64,
}

/// The torture test's main queue.
pub const QUEUE: &str = "torture";
/// The torture test's queue with queue-wide limits (a rate and a global limit, stored in
/// `mysqlq_queue`), set by some workers only and obeyed by all.
pub const LIMITED_QUEUE: &str = "torture_g";

/// A queue's limits as `mysqlq_queue` holds them at the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueLimits {
    /// The queue.
    pub queue: String,
    /// At most this many starts per period (µs) across every worker.
    pub rate: Option<(u32, i64)>,
    /// At most this many running across every worker.
    pub global: Option<u32>,
}

/// A hold a handler's "429" wrote (`mysqlq_rate_hold`, logged by a trigger).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// The held queue.
    pub queue: String,
    /// The held key (`''`: the whole queue).
    pub key: String,
    /// The job whose handler said "429".
    pub job: u64,
    /// When the hold was written (the statement's time; it committed at or after it).
    pub at: i64,
    /// Until when the key takes no new job.
    pub until: i64,
}

/// Everything the checker reads.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// The jobs of queues [`QUEUE`] and [`LIMITED_QUEUE`].
    pub jobs: Vec<JobEnd>,
    /// State writes, in order.
    pub writes: Vec<StateWrite>,
    /// Handler events, in order of time.
    pub runs: Vec<RunEvent>,
    /// Injected faults.
    pub faults: Vec<Fault>,
    /// The operators' actions on record (the audit trail), oldest first.
    pub actions: Vec<Action>,
    /// Workflow steps' dependencies: `(dep, dependent)`.
    pub edges: Vec<(u64, u64)>,
    /// Workflow steps: job id → (`ignore_failed`, `ignore_cancelled`).
    pub steps: HashMap<u64, (bool, bool)>,
    /// Steps added by a running step (a graft): job id → the grafter's job id.
    pub grafted_by: HashMap<u64, u64>,
    /// Workflows whose name says their enqueue was rolled back, found in the table anyway.
    pub rolled_back_found: Vec<String>,
    /// Jobs, steps, edges or gates naming a workflow or job that does not exist.
    pub orphans: i64,
    /// Edges still `open` whose dependency ended (completed, failed or cancelled), read at the
    /// end: a settlement that never landed. (dependency, dependent)
    pub unsettled: Vec<(u64, u64)>,
    /// Workflows still `running` at the end with no step left to run.
    pub unfinished: Vec<u64>,
    /// The slack ε (µs) of each rate key's bucket at the end (`mysqlq_rate_bucket.slack_us`),
    /// for the summary only: the invariants read the limits from the job rows. A queue's own
    /// bucket is named `queue <name>`.
    pub rate_slack: HashMap<String, i64>,
    /// The queue-wide limits of the torture queues.
    pub queue_limits: Vec<QueueLimits>,
    /// Every hold written, oldest first.
    pub holds: Vec<Hold>,
    /// Jobs whose row a completion deleted (`processing` → `deleted`): in [`History::jobs`] as
    /// `completed`.
    pub deleted: HashSet<u64>,
    /// Jobs enqueued with a dedupe window (`dedupe_window_us`): their completed row is kept,
    /// by every worker.
    pub dedupe_window: HashSet<u64>,
    /// The workers that delete the jobs they complete (`delete_completed`); set by the test.
    pub deleting: HashSet<String>,
    /// In-process workers and the completions their metrics counted, read after their
    /// shutdown; set by the test.
    pub counted: Vec<(String, u64)>,
}

/// One operator action of the audit trail, with the jobs it says it changed.
#[derive(Debug, Clone)]
pub struct Action {
    /// `mysqlq_audit.id`.
    pub id: u64,
    /// `cancel`, `retry`, `discard`, `delete`, …
    pub action: String,
    /// Who.
    pub actor: String,
    /// The count it kept of the jobs it changed.
    pub jobs: u64,
    /// A bulk action's confirmed count: it may change at most this many.
    pub expected: Option<u64>,
    /// The jobs linked to it (`mysqlq_audit_job`).
    pub changed: Vec<u64>,
}

const MICROS: &str = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', at)";

impl History {
    /// Reads the history of the torture queues' jobs from the test database.
    pub async fn load(pool: &MySqlPool, faults: Vec<Fault>) -> Result<Self, sqlx::Error> {
        // The rows left, and those a completion deleted (read as `completed`).
        let columns = "id, CAST(queue_name AS CHAR) AS queue_name, JSON_UNQUOTE(JSON_EXTRACT(payload, '$.act')) AS act, \
             attempts, max_attempts, last_error, ordering_key, concurrency_key, concurrency_limit, \
             CAST(cancelled_by AS CHAR) AS cancelled_by, rate_key, CAST(rate_limit AS UNSIGNED) AS rate_limit, \
             CAST(rate_period_us AS SIGNED) AS rate_period_us, dedupe_window_us IS NOT NULL AS windowed";
        let mut rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {columns}, CAST(status AS CHAR) AS status, 0 AS deleted FROM job_queue \
             WHERE queue_name IN ('torture', 'torture_g') \
             UNION ALL SELECT {columns}, 'completed' AS status, 1 AS deleted FROM torture_deleted \
             WHERE queue_name IN ('torture', 'torture_g') AND status = 'processing' ORDER BY id"
        )))
        .fetch_all(pool)
        .await?;
        rows.sort_by_key(|r| r.try_get::<u64, _>("id").unwrap_or_default());
        let mut deleted = HashSet::new();
        let mut dedupe_window = HashSet::new();
        for r in &rows {
            let id: u64 = r.try_get("id")?;
            if r.try_get::<i64, _>("deleted")? != 0 {
                deleted.insert(id);
            }
            if r.try_get::<i64, _>("windowed")? != 0 {
                dedupe_window.insert(id);
            }
        }
        let jobs = rows
            .iter()
            .map(|r| {
                let key: Option<String> = r.try_get("concurrency_key")?;
                let limit: Option<u16> = r.try_get("concurrency_limit")?;
                let rate_key: Option<String> = r.try_get("rate_key")?;
                let rate_limit: Option<u64> = r.try_get("rate_limit")?;
                let rate_period: Option<i64> = r.try_get("rate_period_us")?;
                let rate = match (rate_key, rate_limit, rate_period) {
                    (Some(key), Some(limit), Some(period_us)) => Some(RateLimit {
                        key,
                        limit: u32::try_from(limit).unwrap_or(u32::MAX),
                        period_us,
                    }),
                    _ => None,
                };
                Ok(JobEnd {
                    id: r.try_get("id")?,
                    queue: r.try_get("queue_name")?,
                    act: r.try_get::<Option<String>, _>("act")?.unwrap_or_default(),
                    status: r.try_get("status")?,
                    attempts: r.try_get("attempts")?,
                    max_attempts: r.try_get("max_attempts")?,
                    last_error: r.try_get("last_error")?,
                    ordering_key: r.try_get("ordering_key")?,
                    concurrency: key.zip(limit),
                    cancelled_by: r.try_get("cancelled_by")?,
                    rate,
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()?;
        let writes = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT seq, job_id, old_status, new_status, old_token, new_token, old_worker, new_worker, \
             old_attempts, new_attempts, last_error, {MICROS} AS at FROM torture_history ORDER BY seq"
        )))
        .fetch_all(pool)
        .await?
        .iter()
        .map(|r| {
            Ok(StateWrite {
                seq: r.try_get("seq")?,
                job: r.try_get("job_id")?,
                old_status: r.try_get("old_status")?,
                new_status: r.try_get("new_status")?,
                old_token: r.try_get("old_token")?,
                new_token: r.try_get("new_token")?,
                old_worker: r.try_get("old_worker")?,
                new_worker: r.try_get("new_worker")?,
                old_attempts: r.try_get("old_attempts")?,
                new_attempts: r.try_get("new_attempts")?,
                last_error: r.try_get("last_error")?,
                at: r.try_get("at")?,
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
        let runs = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT job_id, attempt, pid, tag, event, claim_token, {MICROS} AS at FROM test_runs ORDER BY at, id"
        )))
        .fetch_all(pool)
        .await?
        .iter()
        .map(|r| {
            Ok(RunEvent {
                job: r.try_get("job_id")?,
                attempt: r.try_get("attempt")?,
                pid: r.try_get("pid")?,
                tag: r.try_get("tag")?,
                event: r.try_get("event")?,
                token: r.try_get("claim_token")?,
                at: r.try_get("at")?,
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
        let mut actions: Vec<Action> = sqlx::query(
            "SELECT id, CAST(action AS CHAR) AS action, CAST(actor AS CHAR) AS actor, jobs, expected \
             FROM mysqlq_audit ORDER BY id",
        )
        .fetch_all(pool)
        .await?
        .iter()
        .map(|r| {
            Ok(Action {
                id: r.try_get("id")?,
                action: r.try_get("action")?,
                actor: r.try_get("actor")?,
                jobs: r.try_get("jobs")?,
                expected: r.try_get("expected")?,
                changed: Vec::new(),
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
        let links: Vec<(u64, u64)> = sqlx::query_as(
            "SELECT audit_id, job_id FROM mysqlq_audit_job ORDER BY audit_id, job_id",
        )
        .fetch_all(pool)
        .await?;
        for (audit, job) in links {
            if let Some(a) = actions.iter_mut().find(|a| a.id == audit) {
                a.changed.push(job);
            }
        }
        let edges: Vec<(u64, u64)> = sqlx::query_as(
            "SELECT dep_id, dependent_id FROM mysqlq_wf_edge ORDER BY dependent_id, dep_id",
        )
        .fetch_all(pool)
        .await?;
        let steps: HashMap<u64, (bool, bool)> = sqlx::query_as::<_, (u64, bool, bool)>(
            "SELECT job_id, ignore_failed <> 0, ignore_cancelled <> 0 FROM mysqlq_wf_step",
        )
        .fetch_all(pool)
        .await?
        .into_iter()
        .map(|(id, f, c)| (id, (f, c)))
        .collect();
        let grafted_by: HashMap<u64, u64> = sqlx::query_as::<_, (u64, u64)>(
            "SELECT job_id, scope FROM mysqlq_wf_step WHERE scope <> 0",
        )
        .fetch_all(pool)
        .await?
        .into_iter()
        .collect();
        let rolled_back_found: Vec<String> = sqlx::query_scalar(
            "SELECT CAST(name AS CHAR) FROM mysqlq_workflow WHERE name LIKE 'rolled-back-%'",
        )
        .fetch_all(pool)
        .await?;
        let orphans: i64 = sqlx::query_scalar(
            "SELECT (SELECT COUNT(*) FROM job_queue j WHERE j.workflow_id IS NOT NULL AND NOT EXISTS \
               (SELECT 1 FROM mysqlq_workflow w WHERE w.id = j.workflow_id)) \
             + (SELECT COUNT(*) FROM mysqlq_wf_step s WHERE NOT EXISTS \
               (SELECT 1 FROM job_queue j WHERE j.id = s.job_id)) \
             + (SELECT COUNT(*) FROM mysqlq_wf_edge e WHERE NOT EXISTS \
               (SELECT 1 FROM mysqlq_wf_step s WHERE s.job_id = e.dependent_id)) \
             + (SELECT COUNT(*) FROM mysqlq_wf_gate g WHERE NOT EXISTS \
               (SELECT 1 FROM mysqlq_wf_step s WHERE s.job_id = g.step_id))",
        )
        .fetch_one(pool)
        .await?;
        let (unsettled, unfinished) = unsettled(pool).await?;
        let rate_slack: HashMap<String, i64> = sqlx::query_as::<_, (String, i64)>(
            "SELECT CAST(IF(rate_key = '', CONCAT('queue ', queue_name), rate_key) AS CHAR), \
             CAST(slack_us AS SIGNED) FROM mysqlq_rate_bucket \
             WHERE queue_name IN ('torture', 'torture_g')",
        )
        .fetch_all(pool)
        .await?
        .into_iter()
        .collect();
        let queue_limits = sqlx::query_as::<_, (String, Option<u32>, Option<i64>, Option<u32>)>(
            "SELECT CAST(queue_name AS CHAR), rate_limit, CAST(rate_period_us AS SIGNED), global_limit \
             FROM mysqlq_queue WHERE queue_name IN ('torture', 'torture_g') ORDER BY queue_name",
        )
        .fetch_all(pool)
        .await?
        .into_iter()
        .map(|(queue, n, p, global)| QueueLimits {
            queue,
            rate: n.zip(p),
            global,
        })
        .collect();
        let holds = sqlx::query_as::<_, (String, String, u64, i64, i64)>(
            "SELECT queue_name, rate_key, job_id, \
             TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', at), \
             TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', held_until) \
             FROM torture_holds ORDER BY at, seq",
        )
        .fetch_all(pool)
        .await?
        .into_iter()
        .map(|(queue, key, job, at, until)| Hold {
            queue,
            key,
            job,
            at,
            until,
        })
        .collect();
        Ok(Self {
            jobs,
            writes,
            runs,
            faults,
            actions,
            edges,
            steps,
            grafted_by,
            rolled_back_found,
            orphans,
            unsettled,
            unfinished,
            rate_slack,
            queue_limits,
            holds,
            deleted,
            dedupe_window,
            deleting: HashSet::new(),
            counted: Vec::new(),
        })
    }

    /// Whether an operator action of kind `action` says it changed `job`.
    pub fn operator_changed(&self, action: &str, job: u64) -> bool {
        self.actions
            .iter()
            .any(|a| a.action == action && a.changed.contains(&job))
    }

    /// Jobs per (act, status), for the summary.
    pub fn outcome_counts(&self) -> Vec<((String, String), usize)> {
        let mut m: HashMap<(String, String), usize> = HashMap::new();
        for j in &self.jobs {
            *m.entry((j.act.clone(), j.status.clone())).or_default() += 1;
        }
        let mut v: Vec<_> = m.into_iter().collect();
        v.sort();
        v
    }
}

/// Edges still `open` whose dependency ended, and workflows still `running` with no step left
/// to run: what [`History::unsettled`] and [`History::unfinished`] hold.
pub async fn unsettled(pool: &MySqlPool) -> Result<(Vec<(u64, u64)>, Vec<u64>), sqlx::Error> {
    let edges: Vec<(u64, u64)> = sqlx::query_as(
        "SELECT e.dep_id, e.dependent_id FROM mysqlq_wf_edge e JOIN job_queue d ON d.id = e.dep_id \
         WHERE e.state = 'open' AND d.status IN ('completed', 'failed', 'cancelled') \
         ORDER BY e.dep_id, e.dependent_id",
    )
    .fetch_all(pool)
    .await?;
    let workflows: Vec<u64> = sqlx::query_scalar(
        "SELECT w.id FROM mysqlq_workflow w WHERE w.state = 'running' AND NOT EXISTS \
         (SELECT 1 FROM job_queue j WHERE j.workflow_id = w.id \
          AND j.status IN ('waiting', 'pending', 'processing')) ORDER BY w.id",
    )
    .fetch_all(pool)
    .await?;
    Ok((edges, workflows))
}

/// Waits (at most `patience`) until every ended dependency's edges are settled and every
/// workflow with no step left to run is marked finished — the workers' deferred settlements
/// and the leader's sweep have landed. Returns whether they did; the checker reports what is
/// left either way.
pub async fn settled(pool: &MySqlPool, patience: std::time::Duration) -> bool {
    let end = std::time::Instant::now() + patience;
    loop {
        match unsettled(pool).await {
            Ok((e, w)) if e.is_empty() && w.is_empty() => return true,
            _ if std::time::Instant::now() >= end => return false,
            _ => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
        }
    }
}
