//! Rate limits in SQL, the parts every other statement builds on (`docs/rate-limits.md`): a
//! locked bucket and its decision written back, the bucket rows a keyed enqueue makes sure of,
//! 429 holds and the conditions that honour them, and the leader's housekeeping. The claim's key
//! lanes are `lanes.rs`, the queue-wide limits `limits.rs`.

use std::time::Duration;

use sqlx::{AssertSqlSafe, MySqlConnection};

use crate::Error;
use crate::rate::{self, Entry, Rate};

/// A bucket a claim locked.
#[derive(Debug)]
pub(super) struct LockedKey {
    pub key: String,
    pub log: Vec<Entry>,
    /// The limit its last decision applied (or its enqueue stored).
    pub stored: Option<Rate>,
    pub slack_us: u32,
    /// `UTC_TIMESTAMP(6)` of the locking statement, µs since the epoch.
    pub now_us: i64,
}

/// The database's clock, in µs since the epoch, without a time zone in between.
pub(super) const NOW_US: &str =
    "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))";

impl LockedKey {
    /// The bucket as a decision sees it: its slack ε only ever grows while starts it counted
    /// are inside the widest window used so far (the window property needs that), but once
    /// every recorded start is older than that window, no earlier decision constrains the next
    /// one and ε falls back to what the decision asks (a loaded moment does not slow the key
    /// for good).
    pub(super) fn settled(mut self) -> Self {
        let widest = self
            .stored
            .map(|r| r.period() + Duration::from_micros(u64::from(self.slack_us)));
        let widest_us = widest.map_or(0, |w| i64::try_from(w.as_micros()).unwrap_or(i64::MAX));
        if self
            .log
            .iter()
            .all(|e| e.t_us <= self.now_us.saturating_sub(widest_us))
        {
            self.slack_us = 0;
        }
        self
    }
}

/// A limit read back from `(rate_limit, rate_period_us)`.
pub(super) fn stored_rate(limit: Option<u32>, period_us: Option<u64>) -> Option<Rate> {
    let (n, p) = (limit?, period_us?);
    Rate::new(n, Duration::from_micros(p)).ok()
}

/// `rate_bucket_write`: a locked bucket's decision.
pub(super) async fn write_bucket(
    tx: &mut MySqlConnection,
    queue: &str,
    key: &str,
    decision: &rate::Decision,
    applied: Rate,
    slack: Duration,
) -> Result<(), Error> {
    sqlx::query(
        "/* mysqlq:rate_bucket_write */ UPDATE mysqlq_rate_bucket SET starts = ?, \
           open_at = '1970-01-01 00:00:00' + INTERVAL ? MICROSECOND, rate_limit = ?, \
           rate_period_us = ?, slack_us = ?, decided_at = UTC_TIMESTAMP(6), \
           decisions = decisions + 1 \
         WHERE queue_name = ? AND rate_key = ?",
    )
    .bind(rate::encode(&decision.log))
    .bind(decision.open_at_us)
    .bind(applied.count())
    .bind(super::sql::micros(applied.period()))
    .bind(u32::try_from(slack.as_micros()).unwrap_or(u32::MAX))
    .bind(queue)
    .bind(key)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// `rate_open_ready`: whether an open bucket of `queue` has a ready job — each open bucket one
/// probe of its key's range of `idx_job_rate`; a consistent read, no lock.
pub(super) async fn open_key_ready(tx: &mut MySqlConnection, queue: &str) -> Result<bool, Error> {
    let ready: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "/* mysqlq:rate_open_ready */ SELECT {OPEN_KEY_READY}"
    )))
    .bind(queue)
    .fetch_one(&mut *tx)
    .await?;
    Ok(ready != 0)
}

/// `EXISTS` an open bucket of the queue bound first whose key has a ready job.
pub(super) const OPEN_KEY_READY: &str = "EXISTS (SELECT 1 FROM mysqlq_rate_bucket b \
     JOIN job_queue k ON k.queue_name = b.queue_name AND k.status = 'pending' \
       AND k.rate_key = b.rate_key AND k.available_at <= UTC_TIMESTAMP(6) \
     WHERE b.queue_name = ? AND b.rate_key <> '' AND b.open_at <= UTC_TIMESTAMP(6) \
       AND NOT EXISTS (SELECT 1 FROM mysqlq_rate_hold h WHERE h.queue_name = b.queue_name \
         AND h.rate_key IN (b.rate_key, '') AND h.held_until > UTC_TIMESTAMP(6)))";

/// No hold in force on bucket `b`'s key or on its whole queue.
pub(super) const KEY_NOT_HELD: &str = "NOT EXISTS (SELECT 1 FROM mysqlq_rate_hold h \
     WHERE h.queue_name = b.queue_name AND h.rate_key IN (b.rate_key, '') \
     AND h.held_until > UTC_TIMESTAMP(6))";

/// `rate_next_open`: how long until the earliest bucket of `queue` that is closed now opens
/// (`None`: none is closed). A consistent read (it sees this transaction's own writes).
pub(super) async fn next_open_in(
    tx: &mut MySqlConnection,
    queue: &str,
) -> Result<Option<Duration>, Error> {
    let us: Option<i64> = sqlx::query_scalar(
        "/* mysqlq:rate_next_open */ SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), MIN(open_at)) \
         FROM mysqlq_rate_bucket WHERE queue_name = ? AND open_at > UTC_TIMESTAMP(6)",
    )
    .bind(queue)
    .fetch_one(&mut *tx)
    .await?;
    Ok(us.map(|us| Duration::from_micros(u64::try_from(us).unwrap_or(0))))
}

/// `rate_buckets_ensure`: the bucket of every `(queue, rate key, limit, period µs)` exists, made before
/// the rows are inserted (a bucket without jobs is harmless; a keyed job without its bucket
/// would never be claimed). A consistent read first: an existing bucket is not touched, so an
/// enqueue never locks a bucket that claims are deciding. Only a missing one is inserted
/// (`INSERT IGNORE`, in the caller's transaction: claims skip it until the caller commits).
pub(super) async fn buckets_ensure(
    conn: &mut MySqlConnection,
    mut pairs: Vec<(&str, &str, u32, u64)>,
) -> Result<(), Error> {
    pairs.sort_unstable();
    pairs.dedup_by(|a, b| (a.0, a.1) == (b.0, b.1));
    for (queue, key, n, p) in pairs {
        let found: Option<String> = sqlx::query_scalar(
            "/* mysqlq:rate_bucket_find */ SELECT rate_key FROM mysqlq_rate_bucket \
             WHERE queue_name = ? AND rate_key = ?",
        )
        .bind(queue)
        .bind(key)
        .fetch_optional(&mut *conn)
        .await?;
        if found.is_none() {
            sqlx::query(
                "/* mysqlq:rate_bucket_create */ INSERT IGNORE INTO mysqlq_rate_bucket \
                 (queue_name, rate_key, rate_limit, rate_period_us) VALUES (?, ?, ?, ?)",
            )
            .bind(queue)
            .bind(key)
            .bind(n)
            .bind(p)
            .execute(&mut *conn)
            .await?;
        }
    }
    Ok(())
}

/// ε of a decision on `k` under `applied`: never less than the bucket's while its recorded
/// starts are live ([`LockedKey::settled`]). Written back as the bucket's `slack_us`.
pub(super) fn slack_of(k: &LockedKey, applied: Rate, floor: Duration) -> Duration {
    rate::slack(applied.period(), floor).max(Duration::from_micros(u64::from(k.slack_us)))
}

/// `rate_hold`: job `id` (locked by this transaction, which just handed it back) was rate
/// limited by its service: its key — its queue, `''`, for a job without one — takes no new job
/// until `delay` from now. The row is the job's own, written by no one else, so this never
/// waits; claims read holds without locking them.
pub(super) async fn hold(
    tx: &mut MySqlConnection,
    id: crate::JobId,
    delay: Duration,
) -> Result<(), Error> {
    sqlx::query(
        "/* mysqlq:rate_hold */ INSERT INTO mysqlq_rate_hold (queue_name, rate_key, job_id, held_until) \
         SELECT queue_name, COALESCE(rate_key, ''), id, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND \
         FROM job_queue WHERE id = ? \
         ON DUPLICATE KEY UPDATE held_until = GREATEST(held_until, VALUES(held_until))",
    )
    .bind(super::sql::micros(delay))
    .bind(id.0)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// `NOT EXISTS` a hold of the queue bound first as a whole (`''`) in force.
pub(super) const QUEUE_NOT_HELD: &str = "NOT EXISTS (SELECT 1 FROM mysqlq_rate_hold h \
     WHERE h.queue_name = ? AND h.rate_key = '' AND h.held_until > UTC_TIMESTAMP(6))";

/// `rate_prune`: the leader's housekeeping of rate limits, a batch of each per round: expired
/// holds (a minute after they end), and the buckets of keys that no waiting or running job names
/// and no claim decided for an hour (a key used again gets its bucket back from its next
/// enqueue). Rows a claim or an enqueue holds are skipped. Returns the rows deleted.
pub async fn rate_prune(conn: &mut MySqlConnection, limit: u32) -> Result<u64, Error> {
    let mut deleted = 0;
    for (select, delete) in [
        (
            "/* mysqlq:rate_prune */ SELECT queue_name, rate_key, job_id FROM mysqlq_rate_hold \
             WHERE held_until < UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE LIMIT ? FOR UPDATE SKIP LOCKED",
            "/* mysqlq:rate_prune */ DELETE FROM mysqlq_rate_hold \
             WHERE queue_name = ? AND rate_key = ? AND job_id = ?",
        ),
        (
            "/* mysqlq:rate_prune */ SELECT b.queue_name, b.rate_key, CAST(0 AS UNSIGNED) FROM mysqlq_rate_bucket b \
             WHERE b.rate_key <> '' \
               AND (b.decided_at IS NULL OR b.decided_at < UTC_TIMESTAMP(6) - INTERVAL 1 HOUR) \
               AND NOT EXISTS (SELECT 1 FROM job_queue j WHERE j.queue_name = b.queue_name \
                 AND j.rate_key = b.rate_key AND j.status IN ('pending', 'processing', 'waiting')) \
             LIMIT ? FOR UPDATE SKIP LOCKED",
            "/* mysqlq:rate_prune */ DELETE FROM mysqlq_rate_bucket \
             WHERE queue_name = ? AND rate_key = ? AND 0 = ?",
        ),
    ] {
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        let rows: Vec<(String, String, u64)> = sqlx::query_as(select)
            .bind(limit)
            .fetch_all(&mut *tx)
            .await?;
        for (q, k, id) in &rows {
            deleted += sqlx::query(delete)
                .bind(q)
                .bind(k)
                .bind(id)
                .execute(&mut *tx)
                .await?
                .rows_affected();
        }
        tx.commit().await?;
    }
    Ok(deleted)
}

/// `rate_bucket_backstop`: makes the missing buckets of keys of `queue` that have pending jobs
/// (rows from a plain-SQL producer that wrote no bucket, or a bucket pruned while its key's
/// enqueue was on the way), at most 100 per call; they take their limit from the jobs. A loose
/// index scan of `idx_job_rate` (one entry per status and key), with `status` constrained outside
/// the derived table on purpose: constrained inside, MariaDB read every entry. Returns the
/// buckets made.
pub async fn rate_bucket_backstop(conn: &mut MySqlConnection, queue: &str) -> Result<u64, Error> {
    let keys: Vec<String> = sqlx::query_scalar(
        "/* mysqlq:rate_bucket_backstop */ SELECT g.rate_key FROM ( \
           SELECT j.status, j.rate_key FROM job_queue j \
           WHERE j.queue_name = ? AND j.rate_key IS NOT NULL \
           GROUP BY j.queue_name, j.status, j.rate_key) g \
         LEFT JOIN mysqlq_rate_bucket b ON b.queue_name = ? AND b.rate_key = g.rate_key \
         WHERE g.status = 'pending' AND b.rate_key IS NULL LIMIT 100",
    )
    .bind(queue)
    .bind(queue)
    .fetch_all(&mut *conn)
    .await?;
    let mut made = 0;
    for key in keys {
        made += sqlx::query(
            "/* mysqlq:rate_bucket_create */ INSERT IGNORE INTO mysqlq_rate_bucket \
             (queue_name, rate_key) VALUES (?, ?)",
        )
        .bind(queue)
        .bind(&key)
        .execute(&mut *conn)
        .await?
        .rows_affected();
        tracing::warn!(
            queue,
            key,
            "rate key with pending jobs had no bucket; made one"
        );
    }
    Ok(made)
}
