//! Queue-wide limits (`docs/rate-limits.md`): a rate for the whole queue and a global
//! concurrency limit, stored in `mysqlq_queue` and obeyed by every claim of the queue, whatever
//! the worker was started with.
//!
//! Every claim's candidates carry the queue's stored limits (three uncorrelated scalar
//! subqueries in the claim's own SELECTs, so an unlimited queue pays no extra statement). When
//! they are set, the claim locks the queue's bucket (`rate_key = ''`) with `FOR UPDATE SKIP
//! LOCKED` — a claim that does not get it takes nothing from the queue this round —, counts
//! the queue's running jobs afresh (the global limit), keeps what fits, and writes the queue's
//! log back with the rest of the claim.

use std::time::Duration;

use sqlx::{MySqlConnection, Row};

use super::rate::{LockedKey, NOW_US, slack_of, stored_rate, write_bucket};
use crate::Error;
use crate::rate::{self, Rate};

/// A queue's limits, as stored in `mysqlq_queue`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueLimits {
    /// At most this many handler starts per period across every worker.
    pub rate: Option<Rate>,
    /// At most this many jobs of the queue `processing` at once across every worker.
    pub global: Option<u32>,
}

impl QueueLimits {
    /// No limit at all.
    pub fn is_none(&self) -> bool {
        self.rate.is_none() && self.global.is_none()
    }
}

/// The columns that give each candidate of a claim its queue's limits; binds the queue three
/// times.
pub(super) const QUEUE_LIMIT_COLUMNS: &str = "\
    (SELECT q.rate_limit FROM mysqlq_queue q WHERE q.queue_name = ?) AS q_rate_limit, \
    (SELECT q.rate_period_us FROM mysqlq_queue q WHERE q.queue_name = ?) AS q_rate_period_us, \
    (SELECT q.global_limit FROM mysqlq_queue q WHERE q.queue_name = ?) AS q_global_limit";

/// The limits a candidate read with [`QUEUE_LIMIT_COLUMNS`] carries.
pub(super) fn limits_of(r: &sqlx::mysql::MySqlRow) -> Result<QueueLimits, sqlx::Error> {
    Ok(QueueLimits {
        rate: stored_rate(r.try_get("q_rate_limit")?, r.try_get("q_rate_period_us")?),
        global: r.try_get("q_global_limit")?,
    })
}

/// `queue_limits`: the stored limits of `queue`.
pub async fn queue_limits(conn: &mut MySqlConnection, queue: &str) -> Result<QueueLimits, Error> {
    let row: Option<(Option<u32>, Option<u64>, Option<u32>)> = sqlx::query_as(
        "/* mysqlq:queue_limits */ SELECT rate_limit, rate_period_us, global_limit \
         FROM mysqlq_queue WHERE queue_name = ?",
    )
    .bind(queue)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(
        row.map_or_else(QueueLimits::default, |(n, p, g)| QueueLimits {
            rate: stored_rate(n, p),
            global: g,
        }),
    )
}

/// `queue_limits_set`: stores `queue`'s limits (`None`s clear them; the pause flag is left as it
/// is) and makes sure its bucket exists. Returns the limits stored before.
pub async fn queue_limits_set(
    conn: &mut MySqlConnection,
    queue: &str,
    limits: QueueLimits,
) -> Result<QueueLimits, Error> {
    crate::queue::validate_queue_name(queue)?;
    let before = queue_limits(conn, queue).await?;
    let (n, p) = match limits.rate {
        Some(r) => (Some(r.count()), Some(super::sql::micros(r.period()))),
        None => (None, None),
    };
    sqlx::query(
        "/* mysqlq:queue_limits_set */ INSERT INTO mysqlq_queue \
         (queue_name, paused, rate_limit, rate_period_us, global_limit) VALUES (?, 0, ?, ?, ?) \
         ON DUPLICATE KEY UPDATE rate_limit = VALUES(rate_limit), \
           rate_period_us = VALUES(rate_period_us), global_limit = VALUES(global_limit)",
    )
    .bind(queue)
    .bind(n)
    .bind(p)
    .bind(limits.global)
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "/* mysqlq:rate_bucket_create */ INSERT IGNORE INTO mysqlq_rate_bucket \
         (queue_name, rate_key) VALUES (?, '')",
    )
    .bind(queue)
    .execute(&mut *conn)
    .await?;
    Ok(before)
}

/// A claim's hold on its queue's limits: the queue's bucket, locked.
#[derive(Debug)]
pub(super) struct QueueGate {
    limits: QueueLimits,
    bucket: LockedKey,
    /// Jobs of the queue `processing` when the bucket was locked.
    running: u32,
    slack_floor: Duration,
    idle_recheck: Duration,
    decision: Option<(rate::Decision, Rate, Duration)>,
}

impl QueueGate {
    /// `rate_queue_lock` (and `rate_queue_running` for a global limit): `None` when another
    /// claim holds the queue's bucket (or it is missing): this claim takes nothing from the
    /// queue.
    pub(super) async fn lock(
        tx: &mut MySqlConnection,
        queue: &str,
        limits: QueueLimits,
        (slack_floor, idle_recheck): (Duration, Duration),
    ) -> Result<Option<Self>, Error> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "/* mysqlq:rate_queue_lock queue={queue} */ SELECT starts, slack_us, rate_limit, \
               rate_period_us, {NOW_US} AS now_us FROM mysqlq_rate_bucket \
             WHERE queue_name = ? AND rate_key = '' FOR UPDATE SKIP LOCKED"
        )))
        .bind(queue)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(r) = row else { return Ok(None) };
        let bucket = LockedKey {
            key: String::new(),
            log: rate::decode(&r.try_get::<Vec<u8>, _>("starts")?),
            stored: stored_rate(r.try_get("rate_limit")?, r.try_get("rate_period_us")?),
            slack_us: r.try_get("slack_us")?,
            now_us: r.try_get("now_us")?,
        }
        .settled();
        let running = match limits.global {
            None => 0,
            Some(_) => {
                // A fresh read at READ COMMITTED after the lock: every claim that counted
                // before this one has committed (or holds the lock still).
                let n: i64 = sqlx::query_scalar(
                    "/* mysqlq:rate_queue_running */ SELECT COUNT(*) FROM job_queue \
                     WHERE queue_name = ? AND status = 'processing'",
                )
                .bind(queue)
                .fetch_one(&mut *tx)
                .await?;
                u32::try_from(n).unwrap_or(u32::MAX)
            }
        };
        Ok(Some(Self {
            limits,
            bucket,
            running,
            slack_floor,
            idle_recheck,
            decision: None,
        }))
    }

    /// How many of `want` candidates the queue's limits allow now.
    pub(super) fn allowance(&self, want: usize) -> usize {
        let want32 = u32::try_from(want).unwrap_or(u32::MAX);
        let mut n = want32;
        if let Some(g) = self.limits.global {
            n = n.min(g.saturating_sub(self.running));
        }
        if let Some(r) = self.limits.rate {
            n = n.min(rate::decide(&self.input(r, want32, false)).admit);
        }
        n as usize
    }

    /// Records `admitted` starts in the queue's log (a rate limit only); returns how many it
    /// admits (all, when [`Self::allowance`] bounded them) and their slack ε.
    pub(super) fn decide(&mut self, admitted: usize, more: bool) -> (usize, Option<Duration>) {
        let Some(r) = self.limits.rate else {
            return (admitted, None);
        };
        let want = u32::try_from(admitted).unwrap_or(u32::MAX);
        let d = rate::decide(&self.input(r, want, more));
        let slack = self.slack(r);
        let n = d.admit as usize;
        self.decision = Some((d, r, slack));
        (n, Some(slack))
    }

    /// Writes the queue's decision.
    pub(super) async fn write(&self, tx: &mut MySqlConnection, queue: &str) -> Result<(), Error> {
        if let Some((d, r, slack)) = &self.decision {
            write_bucket(tx, queue, "", d, *r, *slack).await?;
        }
        Ok(())
    }

    fn slack(&self, r: Rate) -> Duration {
        slack_of(&self.bucket, r, self.slack_floor)
    }

    fn input(&self, r: Rate, want: u32, more_ready: bool) -> rate::DecideInput<'_> {
        rate::DecideInput {
            log: &self.bucket.log,
            rate: r,
            slack: self.slack(r),
            prev_window: self
                .bucket
                .stored
                .map(|s| s.period() + Duration::from_micros(u64::from(self.bucket.slack_us))),
            now_us: self.bucket.now_us,
            want,
            more_ready,
            idle_recheck: self.idle_recheck,
        }
    }
}

/// Three columns of the queue bound three times, whose ready jobs all wait for a limit when
/// [`queue_closed`] says so: a 429 hold of the whole queue in force, its bucket closed under a
/// queue-wide rate, its global limit.
pub(super) const QUEUE_CLOSED_COLUMNS: &str = "\
    EXISTS (SELECT 1 FROM mysqlq_rate_hold h WHERE h.queue_name = ? AND h.rate_key = '' \
      AND h.held_until > UTC_TIMESTAMP(6)), \
    EXISTS (SELECT 1 FROM mysqlq_queue q JOIN mysqlq_rate_bucket b \
      ON b.queue_name = q.queue_name AND b.rate_key = '' \
      WHERE q.queue_name = ? AND q.rate_limit IS NOT NULL AND b.open_at > UTC_TIMESTAMP(6)), \
    (SELECT q.global_limit FROM mysqlq_queue q WHERE q.queue_name = ?)";

/// Key bucket `b` admits nothing now: closed (full, or found nothing ready at its last
/// decision) or held by a 429 of its key.
pub(super) const KEY_CLOSED: &str = "(b.open_at > UTC_TIMESTAMP(6) \
    OR EXISTS (SELECT 1 FROM mysqlq_rate_hold h WHERE h.queue_name = b.queue_name \
      AND h.rate_key = b.rate_key AND h.held_until > UTC_TIMESTAMP(6)))";

/// Whether a queue's ready jobs all wait for a limit, from [`QUEUE_CLOSED_COLUMNS`] and the
/// queue's `processing` jobs: held, at its rate, or at its global limit.
pub(super) fn queue_closed(held: i64, full: i64, global: Option<u32>, running: u64) -> bool {
    held != 0 || full != 0 || global.is_some_and(|g| running >= u64::from(g))
}

/// `queue_rate_limited`: how many of `queue`'s `ready` jobs wait for a limit rather than for a
/// worker: all of them while the queue is held by a 429, at its global limit (`running` of
/// them), or at its rate (its bucket closed); otherwise the ready jobs of its keys that are
/// full or held. Consistent reads; each closed key one range of `idx_job_rate`. A key or queue
/// whose last decision found nothing ready also reads as closed, for up to one poll ceiling.
pub(super) async fn queue_rate_limited(
    conn: &mut MySqlConnection,
    queue: &str,
    ready: u64,
    running: u64,
) -> Result<u64, Error> {
    let (held, full, global, keyed): (i64, i64, Option<u32>, i64) =
        sqlx::query_as(sqlx::AssertSqlSafe(queue_rate_limited_sql()))
            .bind(queue)
            .bind(queue)
            .bind(queue)
            .bind(queue)
            .fetch_one(&mut *conn)
            .await?;
    Ok(if queue_closed(held, full, global, running) {
        ready
    } else {
        u64::try_from(keyed).unwrap_or(0).min(ready)
    })
}

/// The statement of [`queue_rate_limited`]; binds the queue four times.
pub(super) fn queue_rate_limited_sql() -> String {
    format!(
        "/* mysqlq:queue_rate_limited */ SELECT {QUEUE_CLOSED_COLUMNS}, \
           (SELECT COUNT(*) FROM mysqlq_rate_bucket b JOIN job_queue j \
              ON j.queue_name = b.queue_name AND j.status = 'pending' \
              AND j.rate_key = b.rate_key AND j.available_at <= UTC_TIMESTAMP(6) \
            WHERE b.queue_name = ? AND b.rate_key <> '' AND {KEY_CLOSED})"
    )
}
