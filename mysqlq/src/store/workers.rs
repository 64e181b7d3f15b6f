//! Statements the worker uses for its own row and its per-minute statistics.

use std::time::Duration;

use sqlx::{AssertSqlSafe, Connection, MySqlConnection};

use crate::Error;
use crate::latency::LatencyDeltas;
use crate::metrics::{CounterSnapshot, KindStats};

/// A worker's row in `mysqlq_worker`.
#[derive(Debug, Clone)]
pub struct WorkerRow<'a> {
    /// The worker's id (`locked_by` of its claims).
    pub worker_id: &'a str,
    /// Host name.
    pub host: &'a str,
    /// Process id.
    pub pid: u32,
    /// Queues, comma-separated.
    pub queues: &'a str,
    /// Concurrency.
    pub concurrency: u32,
    /// The worker's settings per queue, a JSON object (`config`).
    pub config: &'a str,
}

/// `worker_register`: inserts or refreshes the worker's row at start-up.
pub async fn worker_register(conn: &mut MySqlConnection, w: &WorkerRow<'_>) -> Result<(), Error> {
    sqlx::query(
        "/* mysqlq:worker_register */ INSERT INTO mysqlq_worker \
         (worker_id, host, pid, queues, concurrency, running, started_at, last_seen_at, stopped_at, \
          config) \
         VALUES (?, ?, ?, ?, ?, 0, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULL, ?) \
         ON DUPLICATE KEY UPDATE host = VALUES(host), pid = VALUES(pid), queues = VALUES(queues), \
         concurrency = VALUES(concurrency), running = 0, started_at = VALUES(started_at), \
         last_seen_at = VALUES(last_seen_at), stopped_at = NULL, config = VALUES(config)",
    )
    .bind(w.worker_id)
    .bind(w.host)
    .bind(w.pid)
    .bind(w.queues)
    .bind(w.concurrency)
    .bind(w.config)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// `worker_seen`: the worker is alive with `running` jobs.
pub(super) async fn worker_seen(
    conn: &mut MySqlConnection,
    worker_id: &str,
    running: u64,
) -> Result<(), Error> {
    sqlx::query(
        "/* mysqlq:worker_seen */ UPDATE mysqlq_worker SET last_seen_at = UTC_TIMESTAMP(6), running = ? \
         WHERE worker_id = ?",
    )
    .bind(running)
    .bind(worker_id)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// `worker_stopped`: the worker shut down cleanly.
pub async fn worker_stopped(conn: &mut MySqlConnection, worker_id: &str) -> Result<(), Error> {
    sqlx::query(
        "/* mysqlq:worker_stopped */ UPDATE mysqlq_worker SET stopped_at = UTC_TIMESTAMP(6), running = 0, \
         last_seen_at = UTC_TIMESTAMP(6) WHERE worker_id = ?",
    )
    .bind(worker_id)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// `stats_add`: adds counter deltas to the current minute's rows (one statement per table).
pub(super) async fn stats_add(
    conn: &mut MySqlConnection,
    worker_id: &str,
    d: &CounterSnapshot,
    kinds: &[(String, KindStats)],
) -> Result<(), Error> {
    sqlx::query(
        "/* mysqlq:stats_add */ INSERT INTO mysqlq_stats_minute \
         (minute, worker_id, claims, completions, retries, failures, snoozes, cancels, lost, polls, \
          empty_polls, deadlocks, lock_waits, db_errors) \
         VALUES (DATE_FORMAT(UTC_TIMESTAMP(), '%Y-%m-%d %H:%i:00'), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
         ON DUPLICATE KEY UPDATE claims = claims + VALUES(claims), completions = completions + VALUES(completions), \
         retries = retries + VALUES(retries), failures = failures + VALUES(failures), \
         snoozes = snoozes + VALUES(snoozes), cancels = cancels + VALUES(cancels), lost = lost + VALUES(lost), \
         polls = polls + VALUES(polls), empty_polls = empty_polls + VALUES(empty_polls), \
         deadlocks = deadlocks + VALUES(deadlocks), lock_waits = lock_waits + VALUES(lock_waits), \
         db_errors = db_errors + VALUES(db_errors)",
    )
    .bind(worker_id)
    .bind(d.claims)
    .bind(d.completions)
    .bind(d.retries)
    .bind(d.failures)
    .bind(d.snoozes)
    .bind(d.cancels)
    .bind(d.lost)
    .bind(d.polls)
    .bind(d.empty_polls)
    .bind(d.deadlocks)
    .bind(d.lock_waits)
    .bind(d.db_errors)
    .execute(&mut *conn)
    .await?;
    if kinds.is_empty() {
        return Ok(());
    }
    let mut sql = String::from(
        "/* mysqlq:stats_add */ INSERT INTO mysqlq_kind_minute (minute, kind, runs, errors, total_us, max_us) VALUES ",
    );
    for i in 0..kinds.len() {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str("(DATE_FORMAT(UTC_TIMESTAMP(), '%Y-%m-%d %H:%i:00'), ?, ?, ?, ?, ?)");
    }
    sql.push_str(
        " ON DUPLICATE KEY UPDATE runs = runs + VALUES(runs), errors = errors + VALUES(errors), \
         total_us = total_us + VALUES(total_us), max_us = GREATEST(max_us, VALUES(max_us))",
    );
    let mut q = sqlx::query(AssertSqlSafe(sql));
    for (kind, k) in kinds {
        q = q
            .bind(kind.as_str())
            .bind(k.runs)
            .bind(k.errors)
            .bind(k.total_us)
            .bind(k.max_us);
    }
    q.execute(&mut *conn).await?;
    Ok(())
}

/// `worker_session_setup`: run on every new connection of a worker's own pool. A short
/// `innodb_lock_wait_timeout` (whole seconds; the same variable on MySQL and MariaDB) makes a
/// write blocked by an application transaction fail fast with 1205 instead of stalling the
/// worker for the server default of 50 s. The same bound on `lock_wait_timeout` (metadata
/// locks: a `LOCK TABLES` or a DDL statement on `job_queue`) keeps a claim from waiting behind
/// one for the server default of a year; it too fails with 1205 and is retried.
pub async fn worker_session_setup(
    conn: &mut MySqlConnection,
    lock_wait_secs: u64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "/* mysqlq:worker_session_setup */ SET SESSION innodb_lock_wait_timeout = ?, \
         lock_wait_timeout = ?",
    )
    .bind(lock_wait_secs)
    .bind(lock_wait_secs)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// One flush of a worker's statistics ([`stats_flush`]).
#[derive(Debug, Clone, Copy)]
pub struct StatsFlush<'a> {
    /// Counter deltas since the last flush.
    pub counters: &'a CounterSnapshot,
    /// Per-kind deltas since the last flush.
    pub kinds: &'a [(String, KindStats)],
    /// Latency counts since the last flush (`mysqlq_run_minute`).
    pub latency: &'a LatencyDeltas,
    /// Jobs running now.
    pub running: u64,
}

/// `stats_flush`: adds one flush of counters ([`stats_add`]) and latency counts
/// ([`super::latency::run_minute_add`]) and marks the worker seen, in one transaction: a flush
/// that fails part-way (a deadlock, a Galera certification failure) is rolled back whole, so
/// retrying it never counts anything twice.
pub async fn stats_flush(
    conn: &mut MySqlConnection,
    worker_id: &str,
    f: &StatsFlush<'_>,
) -> Result<(), Error> {
    let (d, kinds, running) = (f.counters, f.kinds, f.running);
    let mut tx = conn.begin().await?;
    stats_add(&mut tx, worker_id, d, kinds).await?;
    super::latency::run_minute_add(&mut tx, f.latency).await?;
    worker_seen(&mut tx, worker_id, running).await?;
    tx.commit().await?;
    Ok(())
}

/// `stats_prune`: drops statistics rows older than `older_than` (the per-minute counters, kinds,
/// latencies and depths), and rows of workers stopped or silent for that long. At most 1,000
/// rows of each table per call: returns `true` when a table may have more (a full batch went).
///
/// The workers' rows are found by a plain read of `idx_worker_seen` and deleted by their
/// primary key, the condition checked again under the row lock: a `DELETE … WHERE last_seen_at
/// < ?` locked each index entry and then its row — the first live row past the range too —,
/// the opposite order of a worker registering or reporting in (its row, then its entry), and
/// the two deadlocked (a worker failed to start with 1213).
pub async fn stats_prune(conn: &mut MySqlConnection, older_than: Duration) -> Result<bool, Error> {
    let us = super::micros(older_than);
    let mut backlog = false;
    for sql in [
        "/* mysqlq:stats_prune */ DELETE FROM mysqlq_stats_minute WHERE minute < UTC_TIMESTAMP() - INTERVAL ? MICROSECOND LIMIT 1000",
        "/* mysqlq:stats_prune */ DELETE FROM mysqlq_kind_minute WHERE minute < UTC_TIMESTAMP() - INTERVAL ? MICROSECOND LIMIT 1000",
        "/* mysqlq:stats_prune */ DELETE FROM mysqlq_run_minute WHERE minute < UTC_TIMESTAMP() - INTERVAL ? MICROSECOND LIMIT 1000",
        "/* mysqlq:stats_prune */ DELETE FROM mysqlq_depth_minute WHERE minute < UTC_TIMESTAMP() - INTERVAL ? MICROSECOND LIMIT 1000",
    ] {
        backlog |= sqlx::query(sql)
            .bind(us)
            .execute(&mut *conn)
            .await?
            .rows_affected()
            >= 1000;
    }
    let silent: Vec<String> = sqlx::query_scalar(
        "/* mysqlq:stats_prune_workers */ SELECT worker_id FROM mysqlq_worker \
         WHERE last_seen_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND LIMIT 1000",
    )
    .bind(us)
    .fetch_all(&mut *conn)
    .await?;
    if silent.is_empty() {
        return Ok(backlog);
    }
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:stats_prune_workers */ DELETE FROM mysqlq_worker \
         WHERE worker_id IN ({}) AND last_seen_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND",
        super::sql::placeholders(silent.len())
    ));
    let mut q = sqlx::query(sql);
    for id in &silent {
        q = q.bind(id);
    }
    q.bind(us).execute(&mut *conn).await?;
    Ok(backlog || silent.len() >= 1000)
}
