//! Every SQL statement mysqlq runs, in one place.
//!
//! Statements are named noun + verb (`job_claim`, `job_complete_many`, …), take one params
//! value, bind every value, and carry a `/* mysqlq:<purpose> */` tag so a DBA can attribute load
//! per caller (`performance_schema`, the slow log, `SHOW PROCESSLIST`). Every write after the
//! claim is guarded by `status = 'processing' AND claim_token = ?` and reports the jobs whose
//! guard no longer held ("lost ownership") instead of overwriting a newer owner's state.
//! Times come from the database clock in UTC (`UTC_TIMESTAMP(6)`), never from the worker host.
//!
//! Lists of ids are padded to the next power of two (repeating the last entry, which changes
//! nothing in an `IN` list) so that the server and sqlx's statement cache see a handful of
//! statement shapes instead of one per batch size.

pub mod admin;
pub mod bench;
mod cron;
pub mod dashboard;
pub mod migrations;
pub mod server;
mod workers;

pub use cron::{cron_baseline, cron_enqueue_tick, cron_latest, db_now};

pub use workers::{
    WorkerRow, stats_add, stats_flush, stats_prune, worker_register, worker_seen,
    worker_session_setup, worker_stopped,
};

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::mysql::MySqlDatabaseError;
use sqlx::{AssertSqlSafe, Connection, MySqlConnection, Row};

use crate::{Enqueued, Error, JobId};

/// Rows per multi-row INSERT of [`crate::enqueue_many`].
pub const INSERT_CHUNK_ROWS: usize = 500;
/// Longest `last_error` stored, in bytes (longer messages are cut at a character boundary).
pub const MAX_ERROR_BYTES: usize = 4096;

/// A job row to insert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InsertRow {
    /// `queue_name`.
    pub queue: String,
    /// `kind`.
    pub kind: String,
    /// `payload`, serialised JSON.
    pub payload: String,
    /// `priority`.
    pub priority: i16,
    /// `max_attempts`.
    pub max_attempts: u32,
    /// Delay from the database's now, in microseconds.
    pub delay_us: i64,
    /// Absolute run time (UTC, `YYYY-MM-DD HH:MM:SS.ffffff`), overriding the delay.
    pub run_at: Option<String>,
    /// `dedupe_key`.
    pub dedupe_key: Option<String>,
    /// `dedupe_until = 'started'` (else `'finished'`).
    pub dedupe_until_started: bool,
    /// `ordering_key`.
    pub ordering_key: Option<String>,
    /// `concurrency_key`.
    pub concurrency_key: Option<String>,
    /// `concurrency_limit`.
    pub concurrency_limit: Option<u16>,
}

macro_rules! insert_columns {
    () => {
        "INSERT INTO job_queue (queue_name, kind, payload, priority, max_attempts, available_at, \
         dedupe_key, dedupe_until, ordering_key, concurrency_key, concurrency_limit, status, created_at) VALUES "
    };
}
macro_rules! insert_values {
    () => {
        "(?, ?, ?, ?, ?, IFNULL(?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND), ?, ?, ?, ?, ?, 'pending', \
         UTC_TIMESTAMP(6))"
    };
}
const INSERT_COLUMNS: &str = insert_columns!();
const INSERT_NARROW_COLUMNS: &str = "INSERT INTO job_queue (queue_name, kind, payload, priority, max_attempts, available_at, status, created_at) VALUES ";
const INSERT_NARROW_VALUES: &str = "(?, ?, ?, ?, ?, UTC_TIMESTAMP(6), 'pending', UTC_TIMESTAMP(6))";
const INSERT_VALUES: &str = insert_values!();
const INSERT_ONE_SQL: &str = concat!(
    "/* mysqlq:job_insert */ ",
    insert_columns!(),
    insert_values!()
);

fn bind_row<'q>(
    q: sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments>,
    r: &'q InsertRow,
) -> sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments> {
    q.bind(&r.queue)
        .bind(&r.kind)
        .bind(&r.payload)
        .bind(r.priority)
        .bind(r.max_attempts)
        .bind(r.run_at.as_deref())
        .bind(r.delay_us)
        .bind(r.dedupe_key.as_deref())
        .bind(if r.dedupe_until_started {
            "started"
        } else {
            "finished"
        })
        .bind(r.ordering_key.as_deref())
        .bind(r.concurrency_key.as_deref())
        .bind(r.concurrency_limit)
}

impl InsertRow {
    /// `true` when the row sets nothing beyond queue, kind, payload, priority and attempts.
    fn is_plain(&self) -> bool {
        self.delay_us == 0
            && self.run_at.is_none()
            && self.dedupe_key.is_none()
            && !self.dedupe_until_started
            && self.ordering_key.is_none()
            && self.concurrency_key.is_none()
            && self.concurrency_limit.is_none()
    }
}

/// `job_insert`: one job; a taken dedupe key returns the holder's id.
///
/// Outside a transaction (a pool or a bare connection: the statement is its own transaction)
/// a deadlock or lock wait timeout — possible when concurrent enqueuers race for one dedupe
/// key and the first rolls back — is retried here. Inside the caller's transaction it is
/// returned: the caller's transaction was rolled back and only the caller can redo it.
pub async fn job_insert_one(
    conn: &mut MySqlConnection,
    row: &InsertRow,
) -> Result<Enqueued, Error> {
    // A dedupe key's holder can finish between our failed INSERT and the lookup: try again.
    for _ in 0..5 {
        match bind_row(sqlx::query(INSERT_ONE_SQL), row)
            .execute(&mut *conn)
            .await
        {
            Ok(done) => return Ok(Enqueued::Inserted(JobId(done.last_insert_id()))),
            Err(e)
                if !conn.is_in_transaction()
                    && matches!(sqlx_error_number(&e), Some(1213 | 1205)) =>
            {
                tokio::time::sleep(Duration::from_millis(fastrand::u64(1..20))).await;
            }
            Err(e) if is_duplicate_key(&e) && row.dedupe_key.is_some() => {
                let key = row.dedupe_key.as_deref().unwrap_or_default();
                match job_dedupe_holder(conn, key).await {
                    Ok(Some(id)) => return Ok(Enqueued::Duplicate(id)),
                    Ok(None) => {}
                    Err(e) if !conn.is_in_transaction() && is_lock_error(&e) => {}
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::invalid(
        "dedupe key",
        "the key kept changing hands while enqueueing; try again".to_owned(),
    ))
}

/// `job_dedupe_holder`: the job holding a dedupe key. A plain read first (it takes no lock, so
/// it cannot deadlock with a worker claiming the holder); inside the caller's transaction, whose
/// snapshot may predate the holder, a locking read (which sees the latest committed row) if the
/// plain read found nothing.
pub(crate) async fn job_dedupe_holder(
    conn: &mut MySqlConnection,
    key: &str,
) -> Result<Option<JobId>, Error> {
    let id: Option<u64> = sqlx::query_scalar(
        "/* mysqlq:job_dedupe_holder */ SELECT id FROM job_queue WHERE dedupe_active = ?",
    )
    .bind(key)
    .fetch_optional(&mut *conn)
    .await?;
    if id.is_some() || !conn.is_in_transaction() {
        return Ok(id.map(JobId));
    }
    let id: Option<u64> = sqlx::query_scalar(
        "/* mysqlq:job_dedupe_holder */ SELECT id FROM job_queue WHERE dedupe_active = ? \
         LOCK IN SHARE MODE",
    )
    .bind(key)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(id.map(JobId))
}

/// `job_insert_many`: chunked multi-row INSERTs. Multi-row `INSERT … VALUES` is a "simple
/// insert", whose auto-increment ids are consecutive in every `innodb_autoinc_lock_mode`, so the
/// ids are `LAST_INSERT_ID() + i × auto_increment_increment`. Rows with a dedupe key go one
/// statement each, to report each duplicate.
pub async fn job_insert_many(
    conn: &mut MySqlConnection,
    rows: &[InsertRow],
) -> Result<Vec<Enqueued>, Error> {
    let step: u64 = sqlx::query_scalar(
        "/* mysqlq:job_insert_many */ SELECT CAST(@@session.auto_increment_increment AS UNSIGNED)",
    )
    .fetch_one(&mut *conn)
    .await?;
    let mut out = vec![Enqueued::Inserted(JobId(0)); rows.len()];
    let plain: Vec<usize> = (0..rows.len())
        .filter(|&i| rows[i].dedupe_key.is_none())
        .collect();
    for chunk in plain.chunks(INSERT_CHUNK_ROWS) {
        // Rows that only set what every job has (no delay, run-at or keys) bind 5 values
        // instead of 12: a third of the bytes for large bulk enqueues.
        let narrow = chunk.iter().all(|&i| rows[i].is_plain());
        let (columns, values) = if narrow {
            (INSERT_NARROW_COLUMNS, INSERT_NARROW_VALUES)
        } else {
            (INSERT_COLUMNS, INSERT_VALUES)
        };
        let mut sql = String::with_capacity(columns.len() + chunk.len() * (values.len() + 2) + 32);
        sql.push_str("/* mysqlq:job_insert_many */ ");
        sql.push_str(columns);
        for (n, _) in chunk.iter().enumerate() {
            if n > 0 {
                sql.push_str(", ");
            }
            sql.push_str(values);
        }
        let mut q = sqlx::query(AssertSqlSafe(sql));
        for &i in chunk {
            let r = &rows[i];
            q = if narrow {
                q.bind(&r.queue)
                    .bind(&r.kind)
                    .bind(&r.payload)
                    .bind(r.priority)
                    .bind(r.max_attempts)
            } else {
                bind_row(q, r)
            };
        }
        let first = q.execute(&mut *conn).await?.last_insert_id();
        for (n, &i) in chunk.iter().enumerate() {
            out[i] = Enqueued::Inserted(JobId(first + n as u64 * step.max(1)));
        }
    }
    for (i, row) in rows.iter().enumerate() {
        if row.dedupe_key.is_some() {
            out[i] = job_insert_one(conn, row).await?;
        }
    }
    Ok(out)
}

/// A job handed to a worker by [`job_claim`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedJob {
    /// `id`.
    pub id: JobId,
    /// `kind` (NULL for rows inserted by plain SQL without one).
    pub kind: Option<String>,
    /// `payload` as JSON text.
    pub payload: String,
    /// This attempt's number (`attempts` after the claim).
    pub attempt: u32,
    /// `max_attempts`.
    pub max_attempts: u32,
}

/// Parameters of [`job_claim`].
#[derive(Debug, Clone)]
pub struct ClaimParams<'a> {
    /// The queue to claim from (validated queue name).
    pub queue: &'a str,
    /// Most jobs to claim.
    pub limit: u32,
    /// `locked_by`: the worker's id.
    pub worker_id: &'a str,
    /// The new claim token (generated by the client, never by `UUID()` in SQL).
    pub token: &'a str,
    /// Lease length.
    pub lease: Duration,
}

/// The claim SELECT. The queue name (validated: letters, digits, `_-.:`) appears in the tag so a
/// DBA can attribute load per queue; every value is bound.
fn claim_select_sql(queue: &str, tag: &str) -> String {
    format!(
        "/* mysqlq:{tag} queue={queue} */ \
         SELECT j.id, j.kind, CAST(j.payload AS CHAR) AS payload, j.attempts, j.max_attempts, \
                j.concurrency_key, j.concurrency_limit \
         FROM job_queue j \
         WHERE j.queue_name = ? AND j.status = 'pending' AND j.available_at <= UTC_TIMESTAMP(6) \
           AND NOT EXISTS (SELECT 1 FROM mysqlq_queue pq WHERE pq.queue_name = ? AND pq.paused = 1) \
           AND (j.ordering_key IS NULL OR NOT EXISTS ( \
                 SELECT 1 FROM job_queue o WHERE o.ordering_key = j.ordering_key AND o.id <> j.id \
                 AND (o.status = 'processing' OR (o.status = 'pending' AND o.id < j.id)))) \
           AND (j.concurrency_key IS NULL OR ( \
                 SELECT COUNT(*) FROM job_queue c \
                 WHERE c.concurrency_key = j.concurrency_key AND c.status = 'processing') < j.concurrency_limit) \
         ORDER BY j.priority, j.available_at, j.id \
         LIMIT ? \
         FOR UPDATE SKIP LOCKED"
    )
}

/// `job_claim`: the article's short claim transaction at READ COMMITTED.
///
/// `SELECT … ORDER BY priority, available_at, id LIMIT n FOR UPDATE SKIP LOCKED` on
/// `idx_job_claim`, then `UPDATE … SET status = 'processing', locked_by, claim_token, lease,
/// attempts + 1 WHERE id IN (…) AND status = 'pending'`, then COMMIT. The jobs are owned only once
/// the COMMIT returned. A deadlock (1213) or lock wait timeout (1205) on any statement, COMMIT
/// included, rolls back and is returned to the caller, which redoes the whole claim
/// ([`is_lock_error`]). Paused queues return nothing; a job whose ordering key has an earlier
/// unfinished job, or a running one, is skipped without blocking the jobs behind it.
pub async fn job_claim(
    conn: &mut MySqlConnection,
    p: &ClaimParams<'_>,
) -> Result<Vec<ClaimedJob>, Error> {
    job_claim_tracked(conn, p).await.map_err(|f| f.error)
}

/// A claim that failed. When its COMMIT was sent but no reply came back (the connection broke),
/// the server may have committed it: `in_doubt` then holds the jobs it tried to claim, to be
/// resolved with [`job_claim_resolve`] under the same token. Empty when the claim certainly did
/// not commit.
#[derive(Debug)]
pub struct ClaimFailed {
    /// What went wrong.
    pub error: Error,
    /// The jobs of a claim whose COMMIT outcome is unknown.
    pub in_doubt: Vec<ClaimedJob>,
}

impl From<sqlx::Error> for ClaimFailed {
    fn from(e: sqlx::Error) -> Self {
        Self {
            error: e.into(),
            in_doubt: Vec::new(),
        }
    }
}

impl From<Error> for ClaimFailed {
    fn from(error: Error) -> Self {
        Self {
            error,
            in_doubt: Vec::new(),
        }
    }
}

/// [`job_claim`], telling a claim whose COMMIT outcome is unknown apart ([`ClaimFailed`]).
pub async fn job_claim_tracked(
    conn: &mut MySqlConnection,
    p: &ClaimParams<'_>,
) -> Result<Vec<ClaimedJob>, ClaimFailed> {
    crate::enqueue::validate_queue_name(p.queue)?;
    let select = AssertSqlSafe(claim_select_sql(p.queue, "job_claim"));
    let mut tx = conn
        .begin_with("/* mysqlq:job_claim */ SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION")
        .await?;
    let rows = sqlx::query(select)
        .bind(p.queue)
        .bind(p.queue)
        .bind(p.limit)
        .fetch_all(&mut *tx)
        .await?;
    if rows.is_empty() {
        tx.commit().await?;
        return Ok(Vec::new());
    }
    let mut jobs = Vec::with_capacity(rows.len());
    let mut limited: Vec<(String, u16, usize)> = Vec::new();
    for r in &rows {
        if let (Some(key), Some(limit)) = (
            r.try_get::<Option<String>, _>("concurrency_key")?,
            r.try_get::<Option<u16>, _>("concurrency_limit")?,
        ) {
            limited.push((key, limit, jobs.len()));
        }
        jobs.push(ClaimedJob {
            id: JobId(r.try_get("id")?),
            kind: r.try_get("kind")?,
            payload: r.try_get("payload")?,
            attempt: r.try_get::<u32, _>("attempts")?.saturating_add(1),
            max_attempts: r.try_get("max_attempts")?,
        });
    }
    if !limited.is_empty() {
        let dropped = concurrency_admit(&mut tx, &limited).await?;
        let mut i = 0;
        jobs.retain(|_| {
            i += 1;
            !dropped.contains(&(i - 1))
        });
        if jobs.is_empty() {
            tx.commit().await?;
            return Ok(Vec::new());
        }
    }
    let ids: Vec<JobId> = jobs.iter().map(|j| j.id).collect();
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:job_claim */ UPDATE job_queue SET status = 'processing', locked_by = ?, \
         claim_token = ?, lease_expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, \
         attempts = attempts + (attempts < 4294967295), first_claimed_at = IFNULL(first_claimed_at, UTC_TIMESTAMP(6)) \
         WHERE id IN ({}) AND status = 'pending'",
        placeholders(padded_len(ids.len()))
    ));
    let q = sqlx::query(sql)
        .bind(p.worker_id)
        .bind(p.token)
        .bind(micros(p.lease));
    let updated = bind_ids(q, &ids).execute(&mut *tx).await?.rows_affected();
    if updated != ids.len() as u64 {
        // Impossible while we hold the row locks; refuse to hand out jobs we may not own.
        tx.rollback().await?;
        return Err(ClaimFailed::from(Error::invalid(
            "claim",
            format!(
                "claimed {} rows but updated {updated}; the claim was rolled back",
                ids.len()
            ),
        )));
    }
    match tx.commit().await {
        Ok(()) => Ok(jobs),
        // A server error on COMMIT (a deadlock, a Galera certification failure) means it was
        // rolled back. Anything else (the connection broke) leaves the outcome unknown.
        Err(e @ sqlx::Error::Database(_)) => Err(e.into()),
        Err(e) => Err(ClaimFailed {
            error: e.into(),
            in_doubt: jobs,
        }),
    }
}

/// `job_claim_resolve`: which jobs of a claim whose COMMIT outcome is unknown the claim owns.
/// A locking read, so it waits for the in-doubt transaction to end (a transaction whose client
/// went away is committed or rolled back by the server) instead of reading the rows from before
/// it; the token was made by the client, so a row under it belongs to that claim and no other.
pub async fn job_claim_resolve(
    conn: &mut MySqlConnection,
    token: &str,
    in_doubt: &[ClaimedJob],
) -> Result<Vec<ClaimedJob>, Error> {
    if in_doubt.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<JobId> = in_doubt.iter().map(|j| j.id).collect();
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:job_claim_resolve */ SELECT id FROM job_queue WHERE id IN ({}) \
         AND status = 'processing' AND claim_token = ? LOCK IN SHARE MODE",
        placeholders(padded_len(ids.len()))
    ));
    let mut tx = conn
        .begin_with("/* mysqlq:job_claim_resolve */ SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION")
        .await?;
    let rows = bind_ids(sqlx::query(sql), &ids)
        .bind(token)
        .fetch_all(&mut *tx)
        .await?;
    tx.commit().await?;
    let owned: Vec<u64> = rows
        .iter()
        .map(|r| r.try_get::<u64, _>("id"))
        .collect::<Result<_, _>>()?;
    Ok(in_doubt
        .iter()
        .filter(|j| owned.contains(&j.id.0))
        .cloned()
        .collect())
}

/// The strict half of per-key concurrency limits, inside the claim transaction: for each key
/// among the candidates (in sorted order, so claimers never wait on each other in a cycle),
/// lock the key's row in `mysqlq_concurrency`, count the key's running jobs, and admit only as
/// many candidates as the limit leaves. Returns the indexes (into the candidates) not admitted;
/// they stay `pending`. The claim SELECT already skipped keys that looked full, so a full key
/// does not hold up other jobs.
async fn concurrency_admit(
    conn: &mut MySqlConnection,
    limited: &[(String, u16, usize)],
) -> Result<Vec<usize>, Error> {
    let mut keys: Vec<&str> = limited.iter().map(|(k, _, _)| k.as_str()).collect();
    keys.sort_unstable();
    keys.dedup();
    let mut dropped = Vec::new();
    for key in keys {
        sqlx::query(
            "/* mysqlq:job_claim_concurrency */ INSERT INTO mysqlq_concurrency (concurrency_key) VALUES (?) \
             ON DUPLICATE KEY UPDATE concurrency_key = concurrency_key",
        )
        .bind(key)
        .execute(&mut *conn)
        .await?;
        let running: i64 = sqlx::query_scalar(
            "/* mysqlq:job_claim_concurrency */ SELECT COUNT(*) FROM job_queue \
             WHERE concurrency_key = ? AND status = 'processing'",
        )
        .bind(key)
        .fetch_one(&mut *conn)
        .await?;
        let candidates: Vec<&(String, u16, usize)> =
            limited.iter().filter(|(k, _, _)| k == key).collect();
        let limit = candidates
            .iter()
            .map(|(_, l, _)| i64::from(*l))
            .min()
            .unwrap_or(1);
        let room = usize::try_from((limit - running).max(0)).unwrap_or(0);
        dropped.extend(candidates.iter().skip(room).map(|(_, _, i)| *i));
    }
    Ok(dropped)
}

/// A job a worker holds: its id and the token of the claim that gave it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owned {
    /// `id`.
    pub id: JobId,
    /// `claim_token`.
    pub token: String,
}

/// How a token-guarded write over many jobs went.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GuardedReport {
    /// Jobs written by this statement.
    pub done: u64,
    /// Jobs whose guard failed because someone else moved them: another claim owns them now,
    /// or the reaper took them back after their lease expired.
    pub lost: Vec<JobId>,
    /// Jobs whose guard failed because an earlier write under the same token already moved
    /// them out of `processing` (a retried write whose first COMMIT reply was lost, or a
    /// heartbeat racing the job's own completion): nothing was lost.
    pub settled: Vec<JobId>,
}

/// Runs a token-guarded UPDATE over `jobs` (`WHERE id IN (…) AND status = 'processing' AND
/// (id, claim_token) IN ((…))`), then names the jobs it did not change, split into lost and
/// already settled by this token ([`job_ownership`]).
async fn guarded_update(
    conn: &mut MySqlConnection,
    tag: &str,
    set: &str,
    leading: Option<i64>,
    jobs: &[Owned],
) -> Result<GuardedReport, Error> {
    if jobs.is_empty() {
        return Ok(GuardedReport::default());
    }
    let n = padded_len(jobs.len());
    let mut pairs = String::new();
    for i in 0..n {
        pairs.push_str(if i == 0 { "(?, ?)" } else { ", (?, ?)" });
    }
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:{tag} */ UPDATE job_queue SET {set} WHERE id IN ({}) \
         AND status = 'processing' AND (id, claim_token) IN ({pairs})",
        placeholders(n)
    ));
    let mut q = sqlx::query(sql);
    if let Some(v) = leading {
        q = q.bind(v);
    }
    let ids: Vec<JobId> = jobs.iter().map(|j| j.id).collect();
    q = bind_ids(q, &ids);
    for i in 0..n {
        let j = &jobs[i.min(jobs.len() - 1)];
        q = q.bind(j.id.0).bind(j.token.as_str());
    }
    let done = q.execute(&mut *conn).await?.rows_affected();
    let mut report = GuardedReport {
        done,
        ..GuardedReport::default()
    };
    if done < jobs.len() as u64 {
        let o = job_ownership(conn, jobs).await?;
        report.lost = o.lost;
        report.settled = o.settled;
    }
    Ok(report)
}

/// Where a set of jobs stands with respect to the tokens their holder has.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ownership {
    /// Still `processing` under the holder's token.
    pub owned: Vec<JobId>,
    /// Moved out of `processing` by a write under the holder's token (the token stays on the
    /// row until the next claim): the holder's own write committed.
    pub settled: Vec<JobId>,
    /// Held under another token, moved by the reaper (which clears the token), or deleted.
    pub lost: Vec<JobId>,
}

/// `job_ownership`: classifies `jobs` by their row's current status and token. A plain read:
/// call it after a guarded write, whose row locks mean the rows it saw are committed.
pub async fn job_ownership(conn: &mut MySqlConnection, jobs: &[Owned]) -> Result<Ownership, Error> {
    let mut out = Ownership::default();
    if jobs.is_empty() {
        return Ok(out);
    }
    let ids: Vec<JobId> = jobs.iter().map(|j| j.id).collect();
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:job_ownership */ SELECT id, CAST(status AS CHAR) AS status, claim_token \
         FROM job_queue WHERE id IN ({})",
        placeholders(padded_len(ids.len()))
    ));
    let rows = bind_ids(sqlx::query(sql), &ids)
        .fetch_all(&mut *conn)
        .await?;
    for j in jobs {
        let row = rows
            .iter()
            .find(|r| r.try_get::<u64, _>("id").ok() == Some(j.id.0));
        let (status, token) = match row {
            Some(r) => (
                r.try_get::<String, _>("status")?,
                r.try_get::<Option<String>, _>("claim_token")?,
            ),
            None => {
                out.lost.push(j.id);
                continue;
            }
        };
        match (status.as_str(), token.as_deref() == Some(j.token.as_str())) {
            ("processing", true) => out.owned.push(j.id),
            (_, true) => out.settled.push(j.id),
            _ => out.lost.push(j.id),
        }
    }
    Ok(out)
}

/// What the holder of a claim token keeps on a row after it moved the job out of `processing`:
/// `locked_by` and `claim_token` stay (they name the last attempt's worker and token, and let a
/// retried write recognise its own commit); only the lease goes. The token grants ownership only
/// together with `status = 'processing'`, and every claim writes a new one.
const CLEAR_OWNER: &str = "lease_expires_at = NULL";

/// `job_complete_many`: marks jobs `completed` in one statement (token-guarded).
pub async fn job_complete_many(
    conn: &mut MySqlConnection,
    jobs: &[Owned],
) -> Result<GuardedReport, Error> {
    let set = format!("status = 'completed', finished_at = UTC_TIMESTAMP(6), {CLEAR_OWNER}");
    guarded_update(conn, "job_complete_many", &set, None, jobs).await
}

/// `job_heartbeat`: extends the leases of in-flight jobs in one statement (token-guarded).
/// Returns the jobs whose lease was already lost.
pub async fn job_heartbeat(
    conn: &mut MySqlConnection,
    lease: Duration,
    jobs: &[Owned],
) -> Result<GuardedReport, Error> {
    let set = "lease_expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND";
    guarded_update(conn, "job_heartbeat", set, Some(micros(lease)), jobs).await
}

/// `job_release`: hands claimed jobs back to `pending` without consuming the attempt (worker
/// shutdown; jobs claimed but never started, or cancelled at the deadline).
pub async fn job_release(
    conn: &mut MySqlConnection,
    jobs: &[Owned],
) -> Result<GuardedReport, Error> {
    let set =
        format!("status = 'pending', attempts = IF(attempts > 0, attempts - 1, 0), {CLEAR_OWNER}");
    guarded_update(conn, "job_release", &set, None, jobs).await
}

/// Where a failed attempt sends a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Back to `pending`, runnable after `delay` (a retry).
    Retry {
        /// Delay before the next attempt.
        delay: Duration,
    },
    /// Back to `pending` after `delay` without consuming the attempt (snooze).
    Snooze {
        /// Delay before the next attempt.
        delay: Duration,
    },
    /// To `failed` (attempts exhausted or a permanent error).
    Fail,
    /// To `cancelled`.
    Cancel,
}

/// How a token-guarded write of one job went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// This statement wrote it.
    Now,
    /// An earlier write under the same token had already moved the job out of `processing`
    /// (a retried write whose first COMMIT reply was lost): nothing more to do.
    Already,
    /// Ownership was lost: another claim owns the job, or the reaper took it back.
    Lost,
}

impl Written {
    /// `true` unless ownership was lost.
    pub fn is_ok(self) -> bool {
        !matches!(self, Self::Lost)
    }
}

/// `available_at` for "now + ? microseconds", clamped to the largest `DATETIME` so that an
/// absurd delay (a snooze of `Duration::MAX`) schedules the job at the end of time instead of
/// failing the write with error 1441 (datetime overflow) forever.
macro_rules! at_delay {
    () => {
        "UTC_TIMESTAMP(6) + INTERVAL LEAST(?, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), \
         '9999-12-31 23:59:59')) MICROSECOND"
    };
}

/// `job_retry_at` / `job_snooze` / `job_fail` / `job_cancel`: records the end of one attempt,
/// token-guarded, with `last_error` (bounded to [`MAX_ERROR_BYTES`]). Delays are clamped to what
/// `DATETIME` holds. A write refused by the guard is told apart: [`Written::Already`] when this
/// token's own earlier write committed, [`Written::Lost`] when someone else moved the job.
pub async fn job_finish_attempt(
    conn: &mut MySqlConnection,
    job: &Owned,
    outcome: &Outcome,
    error: &str,
) -> Result<Written, Error> {
    let error = truncate_error(error);
    let (sql, delay): (&'static str, Option<Duration>) = match outcome {
        Outcome::Retry { delay } => (
            concat!(
                "/* mysqlq:job_retry_at */ UPDATE job_queue SET status = 'pending', available_at = ",
                at_delay!(),
                ", last_error = ?, lease_expires_at = NULL \
                 WHERE id = ? AND status = 'processing' AND claim_token = ?"
            ),
            Some(*delay),
        ),
        Outcome::Snooze { delay } => (
            concat!(
                "/* mysqlq:job_snooze */ UPDATE job_queue SET status = 'pending', available_at = ",
                at_delay!(),
                ", last_error = ?, attempts = IF(attempts > 0, attempts - 1, 0), \
                 lease_expires_at = NULL WHERE id = ? AND status = 'processing' AND claim_token = ?"
            ),
            Some(*delay),
        ),
        Outcome::Fail => (
            "/* mysqlq:job_fail */ UPDATE job_queue SET status = 'failed', \
             finished_at = UTC_TIMESTAMP(6), last_error = ?, lease_expires_at = NULL \
             WHERE id = ? AND status = 'processing' AND claim_token = ?",
            None,
        ),
        Outcome::Cancel => (
            "/* mysqlq:job_cancel */ UPDATE job_queue SET status = 'cancelled', \
             finished_at = UTC_TIMESTAMP(6), last_error = ?, lease_expires_at = NULL \
             WHERE id = ? AND status = 'processing' AND claim_token = ?",
            None,
        ),
    };
    let mut q = sqlx::query(sql);
    if let Some(d) = delay {
        q = q.bind(micros(d));
    }
    let done = q
        .bind(error)
        .bind(job.id.0)
        .bind(job.token.as_str())
        .execute(&mut *conn)
        .await?
        .rows_affected();
    if done == 1 {
        return Ok(Written::Now);
    }
    let o = job_ownership(conn, std::slice::from_ref(job)).await?;
    Ok(if o.settled.is_empty() {
        Written::Lost
    } else {
        Written::Already
    })
}

/// What [`job_reap_expired`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReapReport {
    /// Jobs returned to `pending` (attempts left).
    pub retried: u64,
    /// Jobs moved to `failed` (no attempts left).
    pub failed: u64,
}

/// `job_reap_expired`: the article's recovery SQL — expired leases go back to `pending` when
/// attempts remain, else to `failed` — in batches of `limit`, with `last_error` saying why.
pub async fn job_reap_expired(conn: &mut MySqlConnection, limit: u32) -> Result<ReapReport, Error> {
    let retried = sqlx::query(
        "/* mysqlq:job_reap_expired */ UPDATE job_queue \
         SET status = 'pending', available_at = UTC_TIMESTAMP(6), \
             last_error = CONCAT('lease expired while held by ', IFNULL(locked_by, '?'), \
                                 ' (worker presumed dead); attempt ', attempts), \
             locked_by = NULL, claim_token = NULL, lease_expires_at = NULL \
         WHERE status = 'processing' AND lease_expires_at < UTC_TIMESTAMP(6) \
           AND attempts < max_attempts \
         ORDER BY lease_expires_at LIMIT ?",
    )
    .bind(limit)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    let failed = sqlx::query(
        "/* mysqlq:job_reap_expired */ UPDATE job_queue \
         SET status = 'failed', finished_at = UTC_TIMESTAMP(6), \
             last_error = CONCAT('lease expired while held by ', IFNULL(locked_by, '?'), \
                                 ' on the last attempt (', attempts, ' of ', max_attempts, ')'), \
             locked_by = NULL, claim_token = NULL, lease_expires_at = NULL \
         WHERE status = 'processing' AND lease_expires_at < UTC_TIMESTAMP(6) \
           AND attempts >= max_attempts \
         ORDER BY lease_expires_at LIMIT ?",
    )
    .bind(limit)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    Ok(ReapReport { retried, failed })
}

/// `job_prune`: deletes up to `limit` jobs in `status` finished more than `older_than` ago,
/// oldest first (the article's batched cleanup). Returns rows deleted.
pub async fn job_prune(
    conn: &mut MySqlConnection,
    status: PruneStatus,
    older_than: Duration,
    limit: u32,
) -> Result<u64, Error> {
    let status = match status {
        PruneStatus::Completed => "completed",
        PruneStatus::Failed => "failed",
        PruneStatus::Cancelled => "cancelled",
    };
    let sql = "/* mysqlq:job_prune */ DELETE FROM job_queue WHERE status = ? \
               AND finished_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND ORDER BY finished_at LIMIT ?";
    Ok(sqlx::query(sql)
        .bind(status)
        .bind(micros(older_than))
        .bind(limit)
        .execute(&mut *conn)
        .await?
        .rows_affected())
}

/// Which finished jobs [`job_prune`] deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PruneStatus {
    /// `completed`.
    Completed,
    /// `failed`.
    Failed,
    /// `cancelled`.
    Cancelled,
}

/// `leader_elect`: takes or keeps the named leader lease for `ttl`. `true` when `leader_id`
/// holds it afterwards. The lease row exists from the migration.
pub async fn leader_elect(
    conn: &mut MySqlConnection,
    name: &str,
    leader_id: &str,
    ttl: Duration,
) -> Result<bool, Error> {
    let done = sqlx::query(
        "/* mysqlq:leader_elect */ UPDATE mysqlq_leader \
         SET elected_at = IF(leader_id <=> ?, elected_at, UTC_TIMESTAMP(6)), leader_id = ?, \
             expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND \
         WHERE name = ? AND (leader_id <=> ? OR expires_at < UTC_TIMESTAMP(6))",
    )
    .bind(leader_id)
    .bind(leader_id)
    .bind(micros(ttl))
    .bind(name)
    .bind(leader_id)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    Ok(done == 1)
}

/// `leader_resign`: gives the lease up at once (clean shutdown), so another worker takes over
/// without waiting for it to expire.
pub async fn leader_resign(
    conn: &mut MySqlConnection,
    name: &str,
    leader_id: &str,
) -> Result<(), Error> {
    sqlx::query(
        "/* mysqlq:leader_resign */ UPDATE mysqlq_leader SET leader_id = NULL, \
         expires_at = '1970-01-01 00:00:01' WHERE name = ? AND leader_id = ?",
    )
    .bind(name)
    .bind(leader_id)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// `queue_pause` / `queue_resume`: sets a queue's pause flag. Workers see it on their next claim.
pub async fn queue_set_paused(
    conn: &mut MySqlConnection,
    queue: &str,
    paused: bool,
) -> Result<(), Error> {
    crate::enqueue::validate_queue_name(queue)?;
    sqlx::query(
        "/* mysqlq:queue_pause */ INSERT INTO mysqlq_queue (queue_name, paused) VALUES (?, ?) \
         ON DUPLICATE KEY UPDATE paused = VALUES(paused)",
    )
    .bind(queue)
    .bind(paused)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The claim SELECT of [`job_claim`] for `EXPLAIN` (doctor, tests): same text, so the plan shown
/// is the plan used.
pub async fn job_claim_explain(
    conn: &mut MySqlConnection,
    queue: &str,
) -> Result<Vec<ExplainRow>, Error> {
    crate::enqueue::validate_queue_name(queue)?;
    let sql = AssertSqlSafe(format!(
        "EXPLAIN {}",
        claim_select_sql(queue, "job_claim_explain")
    ));
    let rows = sqlx::query(sql)
        .bind(queue)
        .bind(queue)
        .bind(100u32)
        .fetch_all(&mut *conn)
        .await?;
    let mut out = Vec::new();
    for r in rows {
        out.push(ExplainRow {
            table: r.try_get::<Option<String>, _>("table").unwrap_or_default(),
            key: r.try_get::<Option<String>, _>("key").unwrap_or_default(),
            extra: r.try_get::<Option<String>, _>("Extra").unwrap_or_default(),
            select_type: r
                .try_get::<Option<String>, _>("select_type")
                .unwrap_or_default(),
        });
    }
    Ok(out)
}

/// One row of `EXPLAIN`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExplainRow {
    /// `select_type`.
    pub select_type: Option<String>,
    /// `table`.
    pub table: Option<String>,
    /// `key`: the index used.
    pub key: Option<String>,
    /// `Extra` (look for `Using filesort`).
    pub extra: Option<String>,
}

/// `true` for a deadlock (1213) or lock wait timeout (1205): roll back and redo the whole
/// transaction from the start, at the outermost level.
pub fn is_lock_error(e: &Error) -> bool {
    matches!(db_error_number(e), Some(1213 | 1205))
}

/// `true` for errors that mean "reconnect and retry": I/O, a closed or timed-out pool, server
/// gone (2006, 2013), can't connect (2002, 2003), Galera node not ready (1047), server shutdown
/// in progress (1053), read-only during failover (1290, 1836).
pub fn is_transient(e: &Error) -> bool {
    match e {
        Error::Database(
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
            | sqlx::Error::Protocol(_)
            | sqlx::Error::Tls(_),
        ) => true,
        _ => matches!(
            db_error_number(e),
            Some(1047 | 1053 | 1205 | 1213 | 1290 | 1836 | 2002 | 2003 | 2006 | 2013)
        ),
    }
}

/// The server's error number, when `e` is a server error.
pub fn db_error_number(e: &Error) -> Option<u16> {
    match e {
        Error::Database(e) => sqlx_error_number(e),
        _ => None,
    }
}

fn sqlx_error_number(e: &sqlx::Error) -> Option<u16> {
    match e {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<MySqlDatabaseError>()
            .map(|d| d.number()),
        _ => None,
    }
}

fn is_duplicate_key(e: &sqlx::Error) -> bool {
    sqlx_error_number(e) == Some(1062)
}

/// Cuts an error message to [`MAX_ERROR_BYTES`] at a character boundary.
pub fn truncate_error(s: &str) -> &str {
    if s.len() <= MAX_ERROR_BYTES {
        return s;
    }
    let mut end = MAX_ERROR_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn padded_len(n: usize) -> usize {
    n.max(1).next_power_of_two()
}

fn placeholders(n: usize) -> String {
    let mut s = String::with_capacity(n * 3);
    for i in 0..n {
        s.push_str(if i == 0 { "?" } else { ", ?" });
    }
    s
}

fn bind_ids<'q>(
    mut q: sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments>,
    ids: &[JobId],
) -> sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments> {
    let n = padded_len(ids.len());
    for i in 0..n {
        q = q.bind(ids[i.min(ids.len() - 1)].0);
    }
    q
}

/// A duration in whole microseconds for `INTERVAL ? MICROSECOND`, saturating.
pub fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// `YYYY-MM-DD HH:MM:SS.ffffff` in UTC, for binding absolute times to `DATETIME(6)`.
pub fn datetime_utc(t: SystemTime) -> Result<String, Error> {
    let since = t
        .duration_since(UNIX_EPOCH)
        .map_err(|_| Error::invalid("run_at", "times before 1970 are not supported"))?;
    let secs = since.as_secs();
    let days = i64::try_from(secs / 86_400)
        .map_err(|_| Error::invalid("run_at", "too far in the future"))?;
    let rem = secs % 86_400;
    // Civil-from-days (proleptic Gregorian), Howard Hinnant's algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    if y > 9999 {
        return Err(Error::invalid("run_at", "must be before the year 10000"));
    }
    let mut s = String::with_capacity(26);
    let _ = write!(
        s,
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:06}",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60,
        since.subsec_micros()
    );
    Ok(s)
}

/// `job_list_pending_of_kind`: pending jobs of one kind, oldest first (for [`crate::testing`]).
pub async fn job_list_pending_of_kind(
    conn: &mut MySqlConnection,
    kind: &str,
) -> Result<Vec<(JobId, String)>, Error> {
    let rows: Vec<(u64, String)> = sqlx::query_as(
        "/* mysqlq:job_list_pending_of_kind */ SELECT id, CAST(payload AS CHAR) FROM job_queue \
         WHERE status = 'pending' AND kind = ? ORDER BY id LIMIT 10000",
    )
    .bind(kind)
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(|(id, p)| (JobId(id), p)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc_datetimes() {
        let t = UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        assert_eq!(datetime_utc(t).unwrap(), "2023-11-14 22:13:20.123456");
        assert_eq!(
            datetime_utc(UNIX_EPOCH).unwrap(),
            "1970-01-01 00:00:00.000000"
        );
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(&datetime_utc(leap).unwrap()[..10], "2000-02-29");
    }

    #[test]
    fn pads_id_lists_to_powers_of_two() {
        assert_eq!(padded_len(0), 1);
        assert_eq!(padded_len(3), 4);
        assert_eq!(padded_len(100), 128);
        assert_eq!(placeholders(3), "?, ?, ?");
    }

    #[test]
    fn truncates_errors_at_char_boundaries() {
        let long = "é".repeat(MAX_ERROR_BYTES);
        let cut = truncate_error(&long);
        assert!(cut.len() <= MAX_ERROR_BYTES && cut.chars().all(|c| c == 'é'));
        assert_eq!(truncate_error("short"), "short");
    }
}
