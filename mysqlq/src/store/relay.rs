//! The statements of the Redis Streams transport (`docs/redis.md`): the relay's claim of pending
//! rows, a consumer's take of a relayed job, the sweeper's look at entries whose consumer went
//! away, and the counts `stats` shows.
//!
//! A relayed job is `processing` with `locked_by` starting with [`RELAY_PREFIX`] and the relay's
//! token and lease: it is in the stream, not running, and no attempt was taken. A consumer that
//! reads its entry *takes* it (`job_take`): guarded by the relay's token, it writes its own
//! token, `locked_by` and lease and takes the attempt, so MySQL always says where a job is and
//! every later write is guarded by the consumer's own token.
//!
//! The reaper's part (`job_relay_expire`, bringing back the jobs of a relay that died) is in
//! `maintenance.rs`, so that a build without the `redis` feature runs it too.
#![cfg_attr(
    not(any(feature = "redis", feature = "__internal-store")),
    allow(dead_code)
)]

use std::time::Duration;

use sqlx::{AssertSqlSafe, MySqlConnection, Row};

use super::claim::{claim_rows, claimed_job, mark_claimed};
use super::sql::{bind_ids, micros, padded_len, placeholders};
use super::{ClaimFailed, ClaimParams, ClaimedJob, Owned};
use crate::{Error, JobId};

/// `locked_by` of a job held by a relay (in a stream, not taken yet): `redis-relay:<instance>`.
pub const RELAY_PREFIX: &str = "redis-relay:";

/// `job_relay_claim`: the claim of [`super::job_claim_completing`] (same SELECT, ordering keys,
/// concurrency limits, paused queues) made by a relay: `processing` under the relay's token,
/// `locked_by` = the relay, with the relay's lease, **no attempt taken**. `attempt` of each job
/// is the attempt its take will start.
pub async fn job_relay_claim(
    conn: &mut MySqlConnection,
    p: &ClaimParams<'_>,
) -> Result<Vec<ClaimedJob>, ClaimFailed> {
    if !p.worker_id.starts_with(RELAY_PREFIX) {
        return Err(Error::invalid("relay", "a relay's id starts with `redis-relay:`").into());
    }
    Ok(claim_rows(
        conn,
        p,
        "job_relay_claim",
        false,
        &super::Completing::default(),
        None,
    )
    .await?
    .0)
}

/// A relayed job a consumer read from a stream: its id and the relay's token in the entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakeParams<'a> {
    /// The entries read: job id and the relay token each carries.
    pub jobs: &'a [Owned],
    /// `locked_by`: the consumer's worker id.
    pub worker_id: &'a str,
    /// The consumer's new claim token (client-made).
    pub token: &'a str,
    /// The consumer's lease.
    pub lease: Duration,
}

/// `job_take`: a consumer takes the relayed jobs it read, in one statement: `SET locked_by,
/// claim_token = <new>, lease, claimed_at, attempts + 1, first_claimed_at WHERE id IN (…) AND
/// status = 'processing' AND (id, claim_token) IN ((id, relay token), …)`. Returns the ids taken; an
/// entry whose row is no longer held under its relay token (taken already, released, reaped,
/// cancelled, finished) is not taken: it is a stale entry, to be acknowledged and dropped.
pub async fn job_take(conn: &mut MySqlConnection, p: &TakeParams<'_>) -> Result<Vec<JobId>, Error> {
    if p.jobs.is_empty() {
        return Ok(Vec::new());
    }
    let n = padded_len(p.jobs.len());
    let mut pairs = String::new();
    for i in 0..n {
        pairs.push_str(if i == 0 { "(?, ?)" } else { ", (?, ?)" });
    }
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:job_take */ UPDATE job_queue FORCE INDEX (PRIMARY) SET locked_by = ?, claim_token = ?, \
         lease_expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, claimed_at = UTC_TIMESTAMP(6), \
         attempts = attempts + (attempts < 4294967295), \
         first_claimed_at = IFNULL(first_claimed_at, UTC_TIMESTAMP(6)) \
         WHERE id IN ({}) AND status = 'processing' AND (id, claim_token) IN ({pairs})",
        placeholders(n)
    ));
    let ids: Vec<JobId> = p.jobs.iter().map(|j| j.id).collect();
    let mut q = sqlx::query(sql)
        .bind(p.worker_id)
        .bind(p.token)
        .bind(micros(p.lease));
    q = bind_ids(q, &ids);
    for i in 0..n {
        let j = &p.jobs[i.min(p.jobs.len() - 1)];
        q = q.bind(j.id.0).bind(j.token.as_str());
    }
    let done = q.execute(&mut *conn).await?.rows_affected();
    if done == p.jobs.len() as u64 {
        return Ok(ids);
    }
    // Some were stale: the rows under the new token are the ones taken (the token is new, so
    // nobody else can have written it).
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:job_take */ SELECT id FROM job_queue FORCE INDEX (PRIMARY) WHERE id IN ({}) AND claim_token = ?",
        placeholders(n)
    ));
    let rows = bind_ids(sqlx::query(sql), &ids)
        .bind(p.token)
        .fetch_all(&mut *conn)
        .await?;
    rows.iter()
        .map(|r| Ok(JobId(r.try_get::<u64, _>("id")?)))
        .collect()
}

/// Where a job of a stream entry stands in MySQL ([`job_relay_inspect`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryRow {
    /// `id`.
    pub id: JobId,
    /// `status`.
    pub status: String,
    /// `claim_token`.
    pub token: Option<String>,
    /// `locked_by`.
    pub locked_by: Option<String>,
    /// `lease_expires_at` has passed (database clock).
    pub lease_expired: bool,
    /// `attempts`.
    pub attempts: u32,
    /// `max_attempts`.
    pub max_attempts: u32,
}

/// `job_relay_inspect`: the rows behind stream entries the sweeper took over (a plain read by
/// primary key; every decision taken from it is a token-guarded write).
pub async fn job_relay_inspect(
    conn: &mut MySqlConnection,
    ids: &[JobId],
) -> Result<Vec<EntryRow>, Error> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:job_relay_inspect */ SELECT id, CAST(status AS CHAR) AS status, claim_token, \
         locked_by, CAST(IFNULL(lease_expires_at < UTC_TIMESTAMP(6), 0) AS SIGNED) AS expired, \
         attempts, max_attempts FROM job_queue FORCE INDEX (PRIMARY) WHERE id IN ({})",
        placeholders(padded_len(ids.len()))
    ));
    let rows = bind_ids(sqlx::query(sql), ids)
        .fetch_all(&mut *conn)
        .await?;
    rows.iter()
        .map(|r| {
            Ok(EntryRow {
                id: JobId(r.try_get("id")?),
                status: r.try_get("status")?,
                token: r.try_get("claim_token")?,
                locked_by: r.try_get("locked_by")?,
                lease_expired: r.try_get::<i64, _>("expired")? != 0,
                attempts: r.try_get("attempts")?,
                max_attempts: r.try_get("max_attempts")?,
            })
        })
        .collect()
}

/// What [`job_reap_taken`] did to one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reaped {
    /// Back to `pending`: attempts remain (the relay sends it again).
    Retried,
    /// To `failed`: the dead consumer held its last attempt (the dead letter).
    Failed,
    /// The row was no longer held under that token with an expired lease: nothing written.
    Untouched,
}

/// `job_reap_taken`: the reaper's recovery (transitions 10/11) for one job whose consumer died
/// after taking it — found by the sweeper's `XAUTOCLAIM` before the reaper's round: `pending`
/// when attempts remain, else `failed`, with `last_error` naming the consumer and the entry's
/// Redis delivery count, and the lost attempt in the job's history, guarded by the token the
/// row carries and its expired lease (a consumer that was only slow keeps its job).
pub async fn job_reap_taken(
    conn: &mut MySqlConnection,
    job: &Owned,
    deliveries: u64,
) -> Result<Reaped, Error> {
    let guard = "id = ? AND status = 'processing' AND claim_token = ? \
                 AND lease_expires_at < UTC_TIMESTAMP(6)";
    let why = "CONCAT('lease expired while held by ', IFNULL(locked_by, '?'), \
               ' (consumer presumed dead; stream entry delivered ', ?, ' times)')";
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    let history = AssertSqlSafe(format!(
        "/* mysqlq:job_attempt_reaped */ INSERT INTO mysqlq_job_attempt \
         (job_id, attempt, outcome, worker, started_at, finished_at, error, error_bytes) \
         SELECT id, attempts, IF(attempts < max_attempts, 'retry', 'fail'), locked_by, NULL, \
                UTC_TIMESTAMP(6), {why}, LENGTH({why}) \
         FROM job_queue WHERE {guard} FOR UPDATE"
    ));
    let logged = sqlx::query(history)
        .bind(deliveries)
        .bind(deliveries)
        .bind(job.id.0)
        .bind(job.token.as_str())
        .execute(&mut *tx)
        .await?
        .rows_affected();
    if logged == 0 {
        tx.rollback().await?;
        return Ok(Reaped::Untouched);
    }
    let failed: i64 = sqlx::query_scalar(
        "/* mysqlq:job_reap_taken */ SELECT CAST(attempts >= max_attempts AS SIGNED) \
         FROM job_queue WHERE id = ?",
    )
    .bind(job.id.0)
    .fetch_one(&mut *tx)
    .await?;
    let set = if failed != 0 {
        "status = 'failed', finished_at = UTC_TIMESTAMP(6)"
    } else {
        "status = 'pending', available_at = UTC_TIMESTAMP(6)"
    };
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:job_reap_taken */ UPDATE job_queue SET {set}, last_error = {why}, \
         locked_by = NULL, claim_token = NULL, lease_expires_at = NULL WHERE {guard}"
    ));
    sqlx::query(sql)
        .bind(deliveries)
        .bind(job.id.0)
        .bind(job.token.as_str())
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(if failed != 0 {
        Reaped::Failed
    } else {
        Reaped::Retried
    })
}

/// Jobs held by relays (in streams, not taken), per queue: `job_relay_counts`.
pub async fn job_relay_counts(conn: &mut MySqlConnection) -> Result<Vec<(String, u64)>, Error> {
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:job_relay_counts */ SELECT queue_name, CAST(COUNT(*) AS UNSIGNED) AS n \
         FROM job_queue WHERE status = 'processing' AND locked_by LIKE '{RELAY_PREFIX}%' \
         GROUP BY queue_name ORDER BY queue_name"
    ));
    let rows = sqlx::query(sql).fetch_all(&mut *conn).await?;
    rows.iter()
        .map(|r| Ok((r.try_get("queue_name")?, r.try_get::<u64, _>("n")?)))
        .collect()
}

/// A job [`job_relay_claim_ids`] claimed, with its queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayedJob {
    /// `queue_name`.
    pub queue: String,
    /// The job, as a claim returns it (`attempt`: the attempt its take starts).
    pub job: ClaimedJob,
}

/// `job_relay_claim_ids`: inside the fast producer's own transaction, right after its INSERT,
/// claims those of the new rows that a relay could claim at once — ready now, no ordering or
/// concurrency key, queue not paused — for a relay (`locked_by` [`RELAY_PREFIX`]…, `token`,
/// `lease`, no attempt taken). The others stay `pending` for the relays.
pub async fn job_relay_claim_ids(
    conn: &mut MySqlConnection,
    ids: &[JobId],
    p: &ClaimParams<'_>,
) -> Result<Vec<RelayedJob>, Error> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    if !p.worker_id.starts_with(RELAY_PREFIX) {
        return Err(Error::invalid(
            "relay",
            "a relay's id starts with `redis-relay:`",
        ));
    }
    let list = placeholders(padded_len(ids.len()));
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:job_relay_claim_ids */ SELECT j.id, j.queue_name, j.kind, \
         CAST(j.payload AS CHAR) AS payload, j.attempts, j.max_attempts, CAST(j.meta AS CHAR) AS meta, j.workflow_id, \
         TIMESTAMPDIFF(MICROSECOND, GREATEST(j.available_at, j.created_at), UTC_TIMESTAMP(6)) AS waited_us \
         FROM job_queue j FORCE INDEX (PRIMARY) WHERE j.id IN ({list}) AND j.status = 'pending' \
           AND j.available_at <= UTC_TIMESTAMP(6) AND j.ordering_key IS NULL \
           AND j.concurrency_key IS NULL AND j.rate_key IS NULL \
           AND NOT EXISTS (SELECT 1 FROM mysqlq_queue pq WHERE pq.queue_name = j.queue_name AND pq.paused = 1) \
         FOR UPDATE"
    ));
    let rows = bind_ids(sqlx::query(sql), ids)
        .fetch_all(&mut *conn)
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        out.push(RelayedJob {
            queue: r.try_get("queue_name")?,
            job: claimed_job(r)?,
        });
    }
    if out.is_empty() {
        return Ok(out);
    }
    let claimed: Vec<JobId> = out.iter().map(|r| r.job.id).collect();
    mark_claimed(conn, "job_relay_claim_ids", false, &claimed, p).await?;
    Ok(out)
}
