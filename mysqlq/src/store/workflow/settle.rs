//! Completing steps: the completion and its settlement in one READ COMMITTED transaction.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use sqlx::{AssertSqlSafe, Connection as _, MySqlConnection, Row as _};

use super::handoff::{self, HandedOff, Handoff};
use super::plan::{Edge, Gate, Plan, plan};
use super::{EDGES_PER_SETTLEMENT, NO_GATE};
use crate::store::guarded::{GuardedReport, Owned, job_complete_many};
use crate::store::sql::{bind_ids, padded_len, placeholders};
use crate::{Error, JobId};

/// What [`wf_complete_steps`] did.
#[derive(Debug, Default)]
pub struct Settled {
    /// The completion statement's report over the completions written.
    pub report: GuardedReport,
    /// Steps completed (now, or before) whose settlement could not be written now: a gate or
    /// dependent they settle was held by another transaction. Their edges stay `open`; the
    /// caller passes them to a later [`wf_complete_steps`] as `earlier` (and the leader's sweep
    /// settles them, should the caller stop first).
    pub unsettled: Vec<JobId>,
    /// Dependents released (`waiting` → `pending`).
    pub released: Vec<JobId>,
    /// The queues of the dependents released `pending`, each once (those handed off are not).
    pub released_queues: Vec<String>,
    /// Dependents released and claimed for the worker in this transaction ([`super::handoff`]).
    pub handed_off: Vec<HandedOff>,
    /// When the statement that wrote [`Settled::handed_off`]'s leases was sent.
    pub lease_sent: Option<std::time::Instant>,
    /// Dependents an earlier attempt of this write claimed for the worker (its COMMIT reply was
    /// lost), still the worker's: their leases were written by that attempt.
    pub adopted: Vec<HandedOff>,
    /// Steps whose settlement this transaction began but did not finish: they have more open
    /// edges than one transaction settles ([`super::EDGES_PER_SETTLEMENT`]; a fan-out's root). The
    /// caller passes them to the next [`wf_complete_steps`] as `earlier`, at once.
    pub more: Vec<JobId>,
    /// How many of the steps completed now are in [`Settled::unsettled`] (the others there
    /// were deferred before).
    pub deferred_now: usize,
}

/// `wf_complete_steps`: completes workflow steps (token-guarded, like [`job_complete_many`]) and
/// settles their edges in the same READ COMMITTED transaction, releasing every dependent whose
/// last dependency this was. Only rows still `processing` under the claim's token are settled,
/// so a write retried after a lost COMMIT reply settles nothing twice. Every completion is
/// written whatever the workflow rows' locks: a step whose gate, head or dependent another
/// transaction holds is completed without its settlement and returned in
/// [`Settled::unsettled`] — the completion never waits for, and is never held back by, another
/// settlement. `earlier`: steps completed before whose settlement was deferred so, settled in
/// this transaction when their rows can be locked now (with no `jobs`, a transaction that
/// only settles them).
///
/// With `handoff`, dependents released here that the worker has room for are claimed for it in
/// the same transaction ([`super::handoff`], [`Settled::handed_off`]); pass the same token to
/// every attempt of one write, so that a retry after a lost COMMIT reply finds what the first
/// attempt claimed.
pub async fn wf_complete_steps(
    conn: &mut MySqlConnection,
    jobs: &[Owned],
    earlier: &[JobId],
    handoff: Option<&Handoff<'_>>,
) -> Result<Settled, Error> {
    if jobs.is_empty() && earlier.is_empty() {
        return Ok(Settled::default());
    }
    let mut tx = conn
        .begin_with("/* mysqlq:wf_complete_steps */ SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION")
        .await?;
    let mut candidates: BTreeSet<u64> = BTreeSet::new();
    let mut again: Vec<JobId> = earlier.to_vec();
    // An earlier attempt of this write committed (its COMMIT reply was lost): `jobs` are
    // completed under their tokens already.
    let mut retried = false;
    if !jobs.is_empty() {
        // S0: the steps this transaction completes, locked: rows still `processing` under the
        // claim's token. By primary key only (FORCE INDEX), status and token checked here:
        // planned on `idx_job_recover` (`status = 'processing'`, chosen when few jobs run) the
        // locking read would wait for every running row another transaction holds, a stopped
        // worker's included.
        let ids: Vec<JobId> = jobs.iter().map(|j| j.id).collect();
        let sql = AssertSqlSafe(format!(
            "/* mysqlq:wf_settle_candidates */ SELECT id, CAST(status AS CHAR) AS status, claim_token \
             FROM job_queue FORCE INDEX (PRIMARY) WHERE id IN ({}) FOR UPDATE",
            placeholders(padded_len(ids.len()))
        ));
        for r in bind_ids(sqlx::query(sql), &ids).fetch_all(&mut *tx).await? {
            let id: u64 = r.try_get("id")?;
            let status: String = r.try_get("status")?;
            let token: Option<String> = r.try_get("claim_token")?;
            let ours = jobs
                .iter()
                .any(|j| j.id.0 == id && token.as_deref() == Some(j.token.as_str()));
            if status == "processing" && ours {
                candidates.insert(id);
            } else if status == "completed" && ours {
                // Completed by this claim already: a write retried after a lost COMMIT reply.
                // Its settlement may have been deferred then: settled now if it was.
                again.push(JobId(id));
                retried = true;
            }
        }
    }
    let fresh = candidates.clone();
    // What the earlier attempt handed off (before this attempt claims anything under the
    // token): dependents of any step it settled, its own completions' or the earlier ones'.
    let adopted = match handoff {
        Some(h) if retried => handoff::adopt(&mut tx, h.token, &again).await?,
        _ => Vec::new(),
    };
    let mut handed_off = Vec::new();
    // The completions first: their rows are this transaction's already (S0), and the gates
    // locked next are then held for the settlement's own writes only, not for this UPDATE too.
    let report = job_complete_many(&mut tx, jobs).await?;
    let mut held = lock_completed(&mut tx, &again, &mut candidates).await?;
    let (p, edges, queues, capped) = settle_planned(&mut tx, &candidates).await?;
    let mut lease_sent = None;
    let mut pending: Vec<u64> = p.release.clone();
    if !p.settle.is_empty() {
        write_settlement(&mut tx, &p, &edges, &capped).await?;
        if let Some(h) = handoff {
            let room = handoff::room_left(h, &adopted);
            let taken = handoff::take(&mut tx, &room, &p.release, &queues).await?;
            let claimed: BTreeSet<u64> = taken.jobs.iter().map(|j| j.job.id.0).collect();
            pending.retain(|d| !claimed.contains(d));
            lease_sent = taken.lease_sent;
            handed_off.extend(taken.jobs);
        }
        release(&mut tx, &pending).await?;
    }
    tx.commit().await?;
    held.extend(candidates.difference(&p.settle).map(|&d| JobId(d)));
    let more: Vec<JobId> = capped
        .iter()
        .filter(|d| p.settle.contains(d))
        .map(|&d| JobId(d))
        .collect();
    Ok(Settled {
        more,
        report,
        unsettled: held,
        released: p.release.iter().map(|&d| JobId(d)).collect(),
        released_queues: pending
            .iter()
            .filter_map(|d| queues.get(d).cloned())
            .collect::<BTreeSet<String>>()
            .into_iter()
            .collect(),
        handed_off,
        lease_sent,
        adopted,
        deferred_now: fresh.difference(&p.settle).count(),
    })
}

/// Locks the rows of `deps` (steps completed earlier, settlement deferred) `FOR UPDATE SKIP
/// LOCKED` — so that the sweep and an operator exclude them, and a held one is never waited
/// for — and adds those still `completed` to `candidates`. Returns those held by another
/// transaction (to be tried again); one no longer `completed` is left alone (an operator took
/// it over, and the sweep settles it by its final state). A step the sweep settled already has
/// no open edge left: it settles nothing twice.
async fn lock_completed(
    tx: &mut MySqlConnection,
    deps: &[JobId],
    candidates: &mut BTreeSet<u64>,
) -> Result<Vec<JobId>, Error> {
    let mut locked: BTreeSet<u64> = BTreeSet::new();
    for chunk in deps.chunks(1000) {
        let sql = AssertSqlSafe(format!(
            "/* mysqlq:wf_settle_completed */ SELECT id FROM job_queue FORCE INDEX (PRIMARY) \
             WHERE id IN ({}) AND status = 'completed' FOR UPDATE SKIP LOCKED",
            placeholders(padded_len(chunk.len()))
        ));
        for r in bind_ids(sqlx::query(sql), chunk)
            .fetch_all(&mut *tx)
            .await?
        {
            locked.insert(r.try_get("id")?);
        }
    }
    let missing: Vec<JobId> = deps
        .iter()
        .filter(|d| !locked.contains(&d.0))
        .copied()
        .collect();
    let mut held = Vec::new();
    for chunk in missing.chunks(1000) {
        let sql = AssertSqlSafe(format!(
            "/* mysqlq:wf_settle_completed */ SELECT id FROM job_queue FORCE INDEX (PRIMARY) \
             WHERE id IN ({}) AND status = 'completed'",
            placeholders(padded_len(chunk.len()))
        ));
        for r in bind_ids(sqlx::query(sql), chunk)
            .fetch_all(&mut *tx)
            .await?
        {
            held.push(JobId(r.try_get("id")?));
        }
    }
    candidates.extend(locked);
    Ok(held)
}

/// S1–S4 for `candidates` (rows this transaction holds): their open edges, then the gates,
/// heads and dependents their settlement writes, each locked `SKIP LOCKED`; the plan settles
/// the candidates whose rows were all locked. Also returns the queues of the dependents locked.
async fn settle_planned(
    tx: &mut MySqlConnection,
    candidates: &BTreeSet<u64>,
) -> Result<(Plan, Vec<Edge>, HashMap<u64, String>, BTreeSet<u64>), Error> {
    let mut queues = HashMap::new();
    if candidates.is_empty() {
        return Ok((Plan::default(), Vec::new(), queues, BTreeSet::new()));
    }
    // S1: their unsettled edges (a plain read: only holders of the deps' locks write them), at
    // most EDGES_PER_SETTLEMENT per dependency.
    let (edges, capped) = cap_edges(edges_open(tx, candidates).await?);
    // S2: the gates those edges count in, never waited for.
    let keys: BTreeSet<(u64, u32)> = edges
        .iter()
        .filter(|e| e.block != NO_GATE)
        .map(|e| (e.dependent, e.block))
        .collect();
    let mut gates = lock_gates(tx, &keys, true).await?;
    let mut heads_tried = BTreeSet::new();
    let mut rows: HashMap<u64, Option<String>> = HashMap::new();
    loop {
        let p = plan(candidates, &edges, &gates, &heads_tried, &rows)?;
        if !p.need_heads.is_empty() {
            // S3: heads of blocks that close.
            let keys = p.need_heads.iter().map(|&d| (d, 0)).collect();
            gates.extend(lock_gates(tx, &keys, true).await?);
            heads_tried.extend(p.need_heads.iter().copied());
            continue;
        }
        if !p.need_rows.is_empty() {
            // S4: the dependents that would be released.
            let locked = lock_rows(tx, &p.need_rows, true).await?;
            for d in &p.need_rows {
                rows.insert(*d, locked.get(d).map(|r| r.status.clone()));
            }
            queues.extend(locked.into_iter().map(|(d, r)| (d, r.queue)));
            continue;
        }
        return Ok((p, edges, queues, capped));
    }
}

/// `wf_edges_open`: the unsettled out-edges of `deps`, by the primary key (`dep_id` first): with
/// a long id list and stale statistics the server chose to scan every edge instead.
async fn edges_open(conn: &mut MySqlConnection, deps: &BTreeSet<u64>) -> Result<Vec<Edge>, Error> {
    let ids: Vec<JobId> = deps.iter().map(|&d| JobId(d)).collect();
    let mut out = Vec::new();
    for chunk in ids.chunks(1000) {
        let sql = AssertSqlSafe(format!(
            "/* mysqlq:wf_edges_open */ SELECT dep_id, dependent_id, block FROM mysqlq_wf_edge \
             FORCE INDEX (PRIMARY) WHERE dep_id IN ({}) AND state = 'open'",
            placeholders(padded_len(chunk.len()))
        ));
        for r in bind_ids(sqlx::query(sql), chunk)
            .fetch_all(&mut *conn)
            .await?
        {
            out.push(Edge {
                dep: r.try_get("dep_id")?,
                dependent: r.try_get("dependent_id")?,
                block: r.try_get("block")?,
            });
        }
    }
    Ok(out)
}

/// `wf_gates_lock`: locks gate rows in key order; with `skip`, those another transaction holds
/// are passed over (absent from the answer) instead of waited for.
pub(super) async fn lock_gates(
    conn: &mut MySqlConnection,
    keys: &BTreeSet<(u64, u32)>,
    skip: bool,
) -> Result<HashMap<(u64, u32), Gate>, Error> {
    let keys: Vec<(u64, u32)> = keys.iter().copied().collect();
    let mut out = HashMap::new();
    for chunk in keys.chunks(1000) {
        let n = padded_len(chunk.len());
        let sql = AssertSqlSafe(format!(
            "/* mysqlq:wf_gates_lock */ SELECT step_id, block, remaining, open_blocks \
             FROM mysqlq_wf_gate FORCE INDEX (PRIMARY) WHERE {} ORDER BY step_id, block FOR UPDATE{}",
            gate_keys(n),
            if skip { " SKIP LOCKED" } else { "" }
        ));
        let mut q = sqlx::query(sql);
        for i in 0..n {
            let (d, b) = chunk[i.min(chunk.len() - 1)];
            q = q.bind(d).bind(b);
        }
        for r in q.fetch_all(&mut *conn).await? {
            out.insert(
                (r.try_get("step_id")?, r.try_get("block")?),
                Gate {
                    remaining: r.try_get("remaining")?,
                    open_blocks: r.try_get("open_blocks")?,
                },
            );
        }
    }
    Ok(out)
}

/// A job row locked by [`lock_rows`].
#[derive(Debug, Clone)]
pub(super) struct RowLock {
    /// Its status when locked.
    pub(super) status: String,
    /// Its queue (a release wakes the claim loops of that queue).
    pub(super) queue: String,
}

/// `wf_release_lock`: locks job rows in id order (with `skip`, passing over held ones) and
/// returns each locked row's status and queue.
pub(super) async fn lock_rows(
    conn: &mut MySqlConnection,
    ids: &BTreeSet<u64>,
    skip: bool,
) -> Result<HashMap<u64, RowLock>, Error> {
    let ids: Vec<JobId> = ids.iter().map(|&d| JobId(d)).collect();
    let mut out = HashMap::new();
    for chunk in ids.chunks(1000) {
        let sql = AssertSqlSafe(format!(
            "/* mysqlq:wf_release_lock */ SELECT id, CAST(status AS CHAR) AS status, queue_name \
             FROM job_queue FORCE INDEX (PRIMARY) WHERE id IN ({}) ORDER BY id FOR UPDATE{}",
            placeholders(padded_len(chunk.len())),
            if skip { " SKIP LOCKED" } else { "" }
        ));
        for r in bind_ids(sqlx::query(sql), chunk)
            .fetch_all(&mut *conn)
            .await?
        {
            out.insert(
                r.try_get("id")?,
                RowLock {
                    status: r.try_get("status")?,
                    queue: r.try_get("queue_name")?,
                },
            );
        }
    }
    Ok(out)
}

/// Keeps at most [`EDGES_PER_SETTLEMENT`] edges per dependency, the lowest dependent ids; returns
/// them and the dependencies that had more.
fn cap_edges(mut edges: Vec<Edge>) -> (Vec<Edge>, BTreeSet<u64>) {
    edges.sort_by_key(|e| (e.dep, e.dependent));
    let mut capped = BTreeSet::new();
    let mut kept = Vec::with_capacity(edges.len());
    let mut run = (None, 0usize);
    for e in edges {
        if run.0 != Some(e.dep) {
            run = (Some(e.dep), 0);
        }
        run.1 += 1;
        if run.1 > EDGES_PER_SETTLEMENT {
            capped.insert(e.dep);
        } else {
            kept.push(e);
        }
    }
    (kept, capped)
}

/// The writes of a plan but the releases: the settled deps' edges `met` (of a `capped`
/// dependency only the edges planned, by their keys), the gates counted down.
async fn write_settlement(
    conn: &mut MySqlConnection,
    p: &Plan,
    edges: &[Edge],
    capped: &BTreeSet<u64>,
) -> Result<(), Error> {
    for &dep in capped.iter().filter(|d| p.settle.contains(d)) {
        let ids: Vec<JobId> = edges
            .iter()
            .filter(|e| e.dep == dep)
            .map(|e| JobId(e.dependent))
            .collect();
        for chunk in ids.chunks(1000) {
            let sql = AssertSqlSafe(format!(
                "/* mysqlq:wf_edges_met */ UPDATE mysqlq_wf_edge FORCE INDEX (PRIMARY) SET state = 'met' \
                 WHERE dep_id = ? AND dependent_id IN ({}) AND state = 'open'",
                placeholders(padded_len(chunk.len()))
            ));
            bind_ids(sqlx::query(sql).bind(dep), chunk)
                .execute(&mut *conn)
                .await?;
        }
    }
    let settled: BTreeSet<u64> = edges
        .iter()
        .filter(|e| p.settle.contains(&e.dep) && !capped.contains(&e.dep))
        .map(|e| e.dep)
        .collect();
    if !settled.is_empty() {
        let ids: Vec<JobId> = settled.iter().map(|&d| JobId(d)).collect();
        for chunk in ids.chunks(1000) {
            let sql = AssertSqlSafe(format!(
                "/* mysqlq:wf_edges_met */ UPDATE mysqlq_wf_edge FORCE INDEX (PRIMARY) SET state = 'met' \
                 WHERE dep_id IN ({}) AND state = 'open'",
                placeholders(padded_len(chunk.len()))
            ));
            bind_ids(sqlx::query(sql), chunk)
                .execute(&mut *conn)
                .await?;
        }
    }
    count_down(conn, &p.dec, &p.closed).await
}

/// `n` gate keys, `(step_id = ? AND block = ?) OR …`, for a WHERE clause: a range over the
/// primary key on both servers. Not `(step_id, block) IN ((?, ?))`: MariaDB 10.11 plans a
/// one-element row `IN` in an UPDATE or DELETE as a scan of the whole table (every gate of every
/// workflow not yet pruned, each row locked and let go in turn).
pub(super) fn gate_keys(n: usize) -> String {
    vec!["(step_id = ? AND block = ?)"; n].join(" OR ")
}

/// `wf_gates_update`: decrements gates, one statement per distinct decrement (heads per
/// distinct pair of decrements).
pub(super) async fn count_down(
    conn: &mut MySqlConnection,
    dec: &BTreeMap<(u64, u32), u32>,
    closed: &BTreeMap<u64, u32>,
) -> Result<(), Error> {
    let mut by: BTreeMap<(u32, u32), Vec<(u64, u32)>> = BTreeMap::new();
    for (&(d, b), &n) in dec {
        if b > 0 {
            by.entry((n, 0)).or_default().push((d, b));
        }
    }
    let heads: BTreeSet<u64> = dec
        .keys()
        .filter(|(_, b)| *b == 0)
        .map(|(d, _)| *d)
        .chain(closed.keys().copied())
        .collect();
    for d in heads {
        let n0 = dec.get(&(d, 0)).copied().unwrap_or(0);
        let c = closed.get(&d).copied().unwrap_or(0);
        by.entry((n0, c)).or_default().push((d, 0));
    }
    for ((n, c), keys) in by {
        for chunk in keys.chunks(1000) {
            let m = padded_len(chunk.len());
            let sql = AssertSqlSafe(format!(
                "/* mysqlq:wf_gates_update */ UPDATE mysqlq_wf_gate FORCE INDEX (PRIMARY) SET remaining = remaining - ?, \
                 open_blocks = open_blocks - ? WHERE {}",
                gate_keys(m)
            ));
            let mut q = sqlx::query(sql).bind(n).bind(c);
            for i in 0..m {
                let (d, b) = chunk[i.min(chunk.len() - 1)];
                q = q.bind(d).bind(b);
            }
            q.execute(&mut *conn).await?;
        }
    }
    Ok(())
}

/// `wf_release`: `waiting` → `pending`; a step never runs before its release.
pub(super) async fn release(conn: &mut MySqlConnection, ids: &[u64]) -> Result<(), Error> {
    let ids: Vec<JobId> = ids.iter().map(|&d| JobId(d)).collect();
    for chunk in ids.chunks(1000) {
        let sql = AssertSqlSafe(format!(
            "/* mysqlq:wf_release */ UPDATE job_queue FORCE INDEX (PRIMARY) SET status = 'pending', \
             available_at = GREATEST(available_at, UTC_TIMESTAMP(6)) \
             WHERE id IN ({}) AND status = 'waiting'",
            placeholders(padded_len(chunk.len()))
        ));
        bind_ids(sqlx::query(sql), chunk)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}
