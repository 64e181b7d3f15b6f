//! Handing released steps to the worker whose completions released them: claimed in the
//! settlement's own transaction (`waiting` → `processing`, under the worker's token and lease),
//! so that a workflow's next step starts at once, without a claim transaction of its own and
//! without a second status write (`waiting` → `pending` → `processing`) — the release is the
//! claim. Only what a claim of the same worker would take: a step of a queue it has room in
//! (the caller reserved it), ready now, with no ordering or concurrency key (those are admitted
//! by the claim's rules), its queue not paused, and no job of a higher priority ready in its
//! queue. The rest is released `pending` as before.
//!
//! A settlement whose COMMIT reply was lost is written again ([`super::wf_complete_steps`]
//! recognises its own completions); the steps its first attempt handed off are then found by
//! the token, which the caller keeps for every attempt, and handed off again ([`adopt`]): a step
//! claimed in a COMMIT whose reply was lost is never left to its lease.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use sqlx::{AssertSqlSafe, MySqlConnection, Row as _};

use crate::store::admission::CLAIM_COLUMNS;
use crate::store::claim::{
    ClaimParams, Claimable, ClaimedJob, claimed_job, mark_claimed_from, restamp_if_slow,
};
use crate::store::sql::{bind_ids, padded_len, placeholders};
use crate::{Error, JobId};

/// Released steps a settlement may claim for the worker writing it.
#[derive(Debug, Clone)]
pub struct Handoff<'a> {
    /// `locked_by`: the worker's id.
    pub worker_id: &'a str,
    /// The claim token: the same for every attempt of one settlement write.
    pub token: &'a str,
    /// Lease length.
    pub lease: Duration,
    /// Most steps to claim per queue (the room the worker reserved for them).
    pub room: Vec<(String, u32)>,
}

/// A released step claimed for the worker by its settlement.
#[derive(Debug, Clone)]
pub struct HandedOff {
    /// Its queue.
    pub queue: String,
    /// The job, as a claim returns it.
    pub job: ClaimedJob,
}

/// What [`take`] claimed, and when the statement that wrote their leases was sent.
#[derive(Debug, Default)]
pub(super) struct Taken {
    pub(super) jobs: Vec<HandedOff>,
    pub(super) lease_sent: Option<Instant>,
}

/// Claims for the worker, among `released` (dependents this transaction releases, their rows
/// locked `waiting`; `queues` gives each one's queue), what [`Handoff::room`] allows and a claim
/// would take. Returns those claimed; the caller releases the others.
pub(super) async fn take(
    conn: &mut MySqlConnection,
    h: &Handoff<'_>,
    released: &[u64],
    queues: &HashMap<u64, String>,
) -> Result<Taken, Error> {
    let room: BTreeMap<&str, u32> = h.room.iter().map(|(q, n)| (q.as_str(), *n)).collect();
    let ids: Vec<JobId> = released
        .iter()
        .filter(|d| {
            queues
                .get(d)
                .is_some_and(|q| room.get(q.as_str()).is_some_and(|&n| n > 0))
        })
        .map(|&d| JobId(d))
        .collect();
    if ids.is_empty() {
        return Ok(Taken::default());
    }
    // Never more rows than the room: a fan-out's root releases thousands of steps.
    let total: u32 = room.values().sum();
    let mut rows = Vec::new();
    for chunk in ids.chunks(1000) {
        let want = (total as usize).saturating_sub(rows.len());
        if want == 0 {
            break;
        }
        let sql = AssertSqlSafe(format!(
            "/* mysqlq:wf_handoff */ SELECT {CLAIM_COLUMNS}, j.queue_name, CAST(j.priority AS SIGNED) AS priority \
             FROM job_queue j FORCE INDEX (PRIMARY) \
             WHERE j.id IN ({}) AND j.status = 'waiting' AND j.available_at <= UTC_TIMESTAMP(6) \
               AND j.ordering_key IS NULL AND j.concurrency_key IS NULL AND j.rate_key IS NULL \
               AND NOT EXISTS (SELECT 1 FROM mysqlq_queue pq WHERE pq.queue_name = j.queue_name \
                 AND (pq.paused = 1 OR pq.rate_limit IS NOT NULL OR pq.global_limit IS NOT NULL)) \
               AND NOT EXISTS (SELECT 1 FROM mysqlq_rate_hold h WHERE h.queue_name = j.queue_name \
                 AND h.rate_key = '' AND h.held_until > UTC_TIMESTAMP(6)) \
             ORDER BY j.priority, j.id LIMIT ?",
            placeholders(padded_len(chunk.len()))
        ));
        let q = bind_ids(sqlx::query(sql), chunk).bind(u32::try_from(want).unwrap_or(u32::MAX));
        rows.extend(q.fetch_all(&mut *conn).await?);
    }
    // A job of a higher priority ready in the queue goes first: its claim, not this handoff.
    let mut first: BTreeMap<String, Option<i64>> = BTreeMap::new();
    for r in &rows {
        let queue: String = r.try_get("queue_name")?;
        if let std::collections::btree_map::Entry::Vacant(e) = first.entry(queue) {
            let p = first_ready_priority(&mut *conn, e.key()).await?;
            e.insert(p);
        }
    }
    let mut left = room;
    let mut jobs = Vec::new();
    for r in &rows {
        let queue: String = r.try_get("queue_name")?;
        let priority: i64 = r.try_get("priority")?;
        if first
            .get(&queue)
            .copied()
            .flatten()
            .is_some_and(|p| p < priority)
        {
            continue;
        }
        let Some(n) = left.get_mut(queue.as_str()).filter(|n| **n > 0) else {
            continue;
        };
        *n -= 1;
        jobs.push(HandedOff {
            queue,
            job: released_now(claimed_job(r)?),
        });
    }
    if jobs.is_empty() {
        return Ok(Taken::default());
    }
    let ids: Vec<JobId> = jobs.iter().map(|j| j.job.id).collect();
    let p = ClaimParams {
        queue: "",
        limit: 0,
        skip: 0,
        worker_id: h.worker_id,
        token: h.token,
        lease: h.lease,
    };
    let sent = Instant::now();
    let updated =
        mark_claimed_from(&mut *conn, "wf_handoff", Claimable::Waiting, true, &ids, &p).await?;
    if updated != ids.len() as u64 {
        // Impossible while this transaction holds the rows; the caller rolls it back.
        return Err(Error::invalid(
            "workflow handoff",
            format!(
                "claimed {} released steps but updated {updated}; the settlement was rolled back",
                ids.len()
            ),
        ));
    }
    let restamped = restamp_if_slow(&mut *conn, "wf_handoff", &ids, &p, sent.elapsed()).await?;
    Ok(Taken {
        jobs,
        lease_sent: Some(restamped.unwrap_or(sent)),
    })
}

/// The priority of the first job a claim of `queue` would take now, if any: one probe of
/// `idx_job_claim` (a correlated `NOT EXISTS` per step read every ready row of the queue).
async fn first_ready_priority(
    conn: &mut MySqlConnection,
    queue: &str,
) -> Result<Option<i64>, Error> {
    Ok(sqlx::query_scalar(
        "/* mysqlq:wf_handoff_first */ SELECT CAST(priority AS SIGNED) FROM job_queue \
         WHERE queue_name = ? AND status = 'pending' AND available_at <= UTC_TIMESTAMP(6) \
         ORDER BY priority LIMIT 1",
    )
    .bind(queue)
    .fetch_optional(&mut *conn)
    .await?)
}

/// `h` with its room reduced by what was `adopted` already (so that both together stay within
/// the room the worker reserved).
pub(super) fn room_left<'a>(h: &Handoff<'a>, adopted: &[HandedOff]) -> Handoff<'a> {
    let mut h = h.clone();
    for (queue, n) in &mut h.room {
        let used = adopted.iter().filter(|a| &a.queue == queue).count();
        *n = n.saturating_sub(u32::try_from(used).unwrap_or(u32::MAX));
    }
    h
}

/// The steps an earlier attempt of this settlement write handed off under `token`, found
/// among the dependents of `deps` (steps that attempt completed): still `processing` under the
/// token, they are this worker's to run.
pub(super) async fn adopt(
    conn: &mut MySqlConnection,
    token: &str,
    deps: &[JobId],
) -> Result<Vec<HandedOff>, Error> {
    let mut out = Vec::new();
    for chunk in deps.chunks(1000) {
        let sql = AssertSqlSafe(format!(
            "/* mysqlq:wf_handoff_adopt */ SELECT {CLAIM_COLUMNS}, j.queue_name \
             FROM mysqlq_wf_edge e JOIN job_queue j ON j.id = e.dependent_id \
             WHERE e.dep_id IN ({}) AND j.status = 'processing' AND j.claim_token = ? \
             ORDER BY j.id",
            placeholders(padded_len(chunk.len()))
        ));
        for r in bind_ids(sqlx::query(sql), chunk)
            .bind(token)
            .fetch_all(&mut *conn)
            .await?
        {
            out.push(HandedOff {
                queue: r.try_get("queue_name")?,
                job: released_now(claimed_job(&r)?),
            });
        }
    }
    out.sort_by_key(|h| h.job.id);
    out.dedup_by_key(|h| h.job.id);
    Ok(out)
}

/// A handed-off step was released and claimed in one statement: it waited for nothing
/// (`waited` counts from the release, not from the workflow's enqueue).
fn released_now(mut job: ClaimedJob) -> ClaimedJob {
    job.waited = Duration::ZERO;
    job
}
