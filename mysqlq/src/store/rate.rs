//! Rate limits in SQL: the bucket rows a keyed enqueue makes sure of, and the claim's key lanes
//! (`docs/rate-limits.md`).
//!
//! A claim that serves rate keys locks the queue's open buckets (`open_at <= now`, longest-open
//! first) with `FOR UPDATE SKIP LOCKED`, reads each key's ready jobs from its own range of
//! `idx_job_rate`, lets [`crate::rate::decide`] admit at most what the key's sliding-window log
//! allows, and writes the log back in the same transaction. Full keys are never read; a key
//! another claim is deciding is skipped, never waited for.

use std::time::Duration;

use sqlx::{AssertSqlSafe, MySqlConnection, Row};

use super::claim::{CLAIM_COLUMNS, KEY_GATES};
use super::insert::InsertRow;
use super::limits::QUEUE_LIMIT_COLUMNS;
use crate::Error;
use crate::rate::{self, Entry, Rate};

/// Room and timing of a claim's key lanes.
#[derive(Debug, Clone)]
pub struct RatePlan {
    /// Keyed jobs the claim may take: running slots the worker holds free for them, so an
    /// admitted job starts at once (its start is what the limit counts).
    pub room: u32,
    /// The least slack ε of a decision ([`crate::rate::slack`]).
    pub slack_floor: Duration,
    /// When a key has nothing ready, the claims look at it again after this long.
    pub idle_recheck: Duration,
}

/// What a claim's key lanes saw, for the claim loop's timing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RateReport {
    /// The queue has a queue-wide rate (`mysqlq_queue.rate_limit`): every job of it must start
    /// right after its claim, as a keyed one.
    pub queue_rated: bool,
    /// An open key of the queue had a ready job: the worker should keep room for keys.
    pub keys_seen: bool,
    /// Until the earliest bucket of the queue that is full now opens again.
    pub next_open_in: Option<Duration>,
}

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

/// `rate_keys_lock`: the open buckets of `queue`, longest-open first, locked without waiting.
pub(super) async fn lock_open_keys(
    tx: &mut MySqlConnection,
    queue: &str,
    limit: u32,
) -> Result<Vec<LockedKey>, Error> {
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:rate_keys_lock queue={queue} */ SELECT b.rate_key, b.starts, b.slack_us, \
           b.rate_limit, b.rate_period_us, {NOW_US} AS now_us \
         FROM mysqlq_rate_bucket b \
         WHERE b.queue_name = ? AND b.rate_key <> '' AND b.open_at <= UTC_TIMESTAMP(6) \
           AND {KEY_NOT_HELD} \
         ORDER BY b.open_at LIMIT ? FOR UPDATE SKIP LOCKED"
    ));
    let rows = sqlx::query(sql)
        .bind(queue)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let key: String = r.try_get("rate_key")?;
        let bytes: Vec<u8> = r.try_get("starts")?;
        let log = rate::decode(&bytes);
        if log.is_empty() && !bytes.is_empty() {
            tracing::warn!(queue, key, "rate bucket log unreadable; counted from empty");
        }
        out.push(
            LockedKey {
                key,
                log,
                stored: stored_rate(r.try_get("rate_limit")?, r.try_get("rate_period_us")?),
                slack_us: r.try_get("slack_us")?,
                now_us: r.try_get("now_us")?,
            }
            .settled(),
        );
    }
    Ok(out)
}

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

/// `rate_key_candidates`: the ready jobs of one key, in claim order, locked without waiting.
pub(super) async fn key_candidates(
    tx: &mut MySqlConnection,
    queue: &str,
    key: &str,
    limit: u32,
) -> Result<Vec<sqlx::mysql::MySqlRow>, Error> {
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:rate_key_candidates queue={queue} */ SELECT {CLAIM_COLUMNS}, \
           j.rate_limit, j.rate_period_us, {QUEUE_LIMIT_COLUMNS} \
         FROM job_queue j FORCE INDEX (idx_job_rate) \
         WHERE j.queue_name = ? AND j.status = 'pending' AND j.rate_key = ? \
           AND j.available_at <= UTC_TIMESTAMP(6) \
           AND NOT EXISTS (SELECT 1 FROM mysqlq_queue pq WHERE pq.queue_name = ? AND pq.paused = 1) \
           AND {KEY_GATES} \
         ORDER BY j.priority, j.available_at, j.id LIMIT ? FOR UPDATE SKIP LOCKED"
    ));
    Ok(sqlx::query(sql)
        .bind(queue)
        .bind(queue)
        .bind(queue)
        .bind(queue)
        .bind(key)
        .bind(queue)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?)
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
const KEY_NOT_HELD: &str = "NOT EXISTS (SELECT 1 FROM mysqlq_rate_hold h \
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

/// `rate_buckets_ensure`: the bucket of every `(queue, rate key)` of `rows` exists, made before
/// the rows are inserted (a bucket without jobs is harmless; a keyed job without its bucket
/// would never be claimed). A consistent read first: an existing bucket is not touched, so an
/// enqueue never locks a bucket that claims are deciding. Only a missing one is inserted
/// (`INSERT IGNORE`, in the caller's transaction: claims skip it until the caller commits).
pub(super) async fn buckets_ensure(
    conn: &mut MySqlConnection,
    rows: &[&InsertRow],
) -> Result<(), Error> {
    let mut pairs: Vec<(&str, &str, u32, u64)> = rows
        .iter()
        .filter_map(|r| {
            let (key, n, p) = r.rate.as_ref()?;
            Some((r.queue.as_str(), key.as_str(), *n, *p))
        })
        .collect();
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

/// One key lane of a claim: its locked bucket and the candidates read for it.
#[derive(Debug)]
struct Lane {
    locked: LockedKey,
    /// Read for this claim (else it got no room: its bucket is left as it was).
    served: bool,
    /// Candidates, in claim order, with the limit each carries.
    ids: Vec<(crate::JobId, Option<Rate>)>,
    /// More ready jobs than were read.
    more: bool,
    /// The decision to write, the limit it applied and its slack.
    decision: Option<(rate::Decision, Rate, Duration)>,
}

/// The key lanes of one claim: read before the plain lane, decided after admission, written
/// before COMMIT.
#[derive(Debug, Default)]
pub(super) struct Lanes {
    lanes: Vec<Lane>,
    /// The candidates' rows ([`CLAIM_COLUMNS`]), lane after lane.
    pub rows: Vec<sqlx::mysql::MySqlRow>,
    plan: Option<RatePlan>,
    /// An open key has a ready job (read, or seen by [`open_key_ready`] when there was no room).
    ready_seen: bool,
}

impl Lanes {
    /// Locks the open buckets and reads each key's candidates, at most what its log allows and
    /// what is left of the plan's room, keys longest-open first.
    pub(super) async fn read(
        tx: &mut MySqlConnection,
        queue: &str,
        plan: &RatePlan,
    ) -> Result<Self, Error> {
        let mut out = Self {
            plan: Some(plan.clone()),
            ..Self::default()
        };
        if plan.room == 0 {
            out.ready_seen = open_key_ready(tx, queue).await?;
            return Ok(out);
        }
        let keys = lock_open_keys(tx, queue, plan.room.saturating_add(8).min(64)).await?;
        let mut room = plan.room;
        for locked in keys {
            let mut lane = Lane {
                locked,
                served: room > 0,
                ids: Vec::new(),
                more: false,
                decision: None,
            };
            if lane.served {
                let allowed = match lane.locked.stored {
                    Some(r) => rate::decide(&input(&lane.locked, r, plan, room, false)).admit,
                    None => room,
                };
                if allowed > 0 {
                    let mut rows =
                        key_candidates(tx, queue, &lane.locked.key, allowed.saturating_add(1))
                            .await?;
                    lane.more = rows.len() > allowed as usize;
                    out.ready_seen |= !rows.is_empty();
                    rows.truncate(allowed as usize);
                    room = room.saturating_sub(u32::try_from(rows.len()).unwrap_or(u32::MAX));
                    for r in &rows {
                        let id = crate::JobId(r.try_get("id")?);
                        lane.ids.push((
                            id,
                            stored_rate(r.try_get("rate_limit")?, r.try_get("rate_period_us")?),
                        ));
                    }
                    out.rows.extend(rows);
                }
            }
            out.lanes.push(lane);
        }
        Ok(out)
    }

    /// The ids of every keyed candidate.
    pub(super) fn keyed_ids(&self) -> impl Iterator<Item = crate::JobId> + '_ {
        self.lanes
            .iter()
            .flat_map(|l| l.ids.iter().map(|(id, _)| *id))
    }

    /// Decides every served key over its candidates still in after admission (`kept`): returns
    /// the ids admitted with their slack ε; the key's other candidates stay `pending`.
    pub(super) fn decide(
        &mut self,
        kept: &std::collections::HashSet<crate::JobId>,
    ) -> Vec<(crate::JobId, Duration)> {
        let Some(plan) = self.plan.clone() else {
            return Vec::new();
        };
        let mut admitted = Vec::new();
        for lane in self.lanes.iter_mut().filter(|l| l.served) {
            let survivors: Vec<&(crate::JobId, Option<Rate>)> = lane
                .ids
                .iter()
                .filter(|(id, _)| kept.contains(id))
                .collect();
            let strictest = survivors
                .iter()
                .filter_map(|(_, r)| *r)
                .chain(lane.locked.stored)
                .min_by(|a, b| strictness(*a, *b));
            let Some(applied) = strictest else {
                // No limit anywhere (a plain-SQL row without one): nothing to count.
                admitted.extend(survivors.iter().map(|(id, _)| (*id, plan.slack_floor)));
                continue;
            };
            let want = u32::try_from(survivors.len()).unwrap_or(u32::MAX);
            let d = rate::decide(&input(&lane.locked, applied, &plan, want, lane.more));
            let slack = slack_of(&lane.locked, applied, plan.slack_floor);
            admitted.extend(
                survivors
                    .iter()
                    .take(d.admit as usize)
                    .map(|(id, _)| (*id, slack)),
            );
            lane.decision = Some((d, applied, slack));
        }
        admitted
    }

    /// Writes every decision, then reports what the claim loop needs to know.
    pub(super) async fn write(
        &self,
        tx: &mut MySqlConnection,
        queue: &str,
    ) -> Result<RateReport, Error> {
        if self.plan.is_none() {
            return Ok(RateReport::default());
        }
        for lane in &self.lanes {
            if let Some((d, applied, slack)) = &lane.decision {
                write_bucket(tx, queue, &lane.locked.key, d, *applied, *slack).await?;
            }
        }
        let next_open_in = next_open_in(tx, queue).await?;
        Ok(RateReport {
            queue_rated: false,
            keys_seen: self.ready_seen,
            next_open_in,
        })
    }
}

/// Orders limits by the starts they allow per unit of time: the strictest first.
fn strictness(a: Rate, b: Rate) -> std::cmp::Ordering {
    let per = |r: Rate, other: Rate| u128::from(r.count()) * other.period().as_micros();
    per(a, b).cmp(&per(b, a))
}

/// ε of a decision on `k` under `applied`: never less than the bucket's while its recorded
/// starts are live ([`LockedKey::settled`]). Written back as the bucket's `slack_us`.
pub(super) fn slack_of(k: &LockedKey, applied: Rate, floor: Duration) -> Duration {
    rate::slack(applied.period(), floor).max(Duration::from_micros(u64::from(k.slack_us)))
}

/// The decision's input for bucket `k` under `applied`.
fn input<'a>(
    k: &'a LockedKey,
    applied: Rate,
    plan: &RatePlan,
    want: u32,
    more_ready: bool,
) -> rate::DecideInput<'a> {
    rate::DecideInput {
        log: &k.log,
        rate: applied,
        slack: slack_of(k, applied, plan.slack_floor),
        prev_window: k
            .stored
            .map(|r| r.period() + Duration::from_micros(u64::from(k.slack_us))),
        now_us: k.now_us,
        want,
        more_ready,
        idle_recheck: plan.idle_recheck,
    }
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
