//! The claim's key lanes (`docs/rate-limits.md`): a claim that serves rate keys locks the
//! queue's open buckets (`open_at <= now`, longest-open first) with `FOR UPDATE SKIP LOCKED`,
//! reads each key's ready jobs from its own range of `idx_job_rate`, lets
//! [`crate::rate::decide`] admit at most what the key's sliding-window log allows, and writes the
//! log back in the same transaction. Full keys are never read; a key another claim is deciding
//! is skipped, never waited for.

use std::time::Duration;

use sqlx::{AssertSqlSafe, MySqlConnection, Row};

use super::admission::{CLAIM_COLUMNS, KEY_GATES};
use super::limits::QUEUE_LIMIT_COLUMNS;
use super::rate::{
    KEY_NOT_HELD, LockedKey, NOW_US, next_open_in, open_key_ready, slack_of, stored_rate,
    write_bucket,
};
use crate::Error;
use crate::rate::{self, Rate};

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
        if rate::unreadable(&bytes, &log) {
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
