//! Settling dependencies that ended without a settling completion (failed, cancelled, or
//! completed by a path that does not settle), marking finished workflows, and reviving
//! upstream-cancelled steps when an operator retries their dependency.

use std::collections::{BTreeSet, HashMap};

use sqlx::{AssertSqlSafe, Connection as _, MySqlConnection, Row as _};

use super::plan::{Edge, plan};
use super::settle::{count_down, gate_keys, lock_gates, lock_rows, release};
use super::{NO_GATE, UPSTREAM};
use crate::store::sql::{bind_ids, padded_len, placeholders};
use crate::{Error, JobId};

/// What one [`wf_sweep`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    /// Dependencies whose edges were settled.
    pub deps: u64,
    /// Dependents released.
    pub released: u64,
    /// Dependents cancelled by their upstream rule.
    pub cancelled: u64,
    /// Dependencies that could not be settled (logged, passed over).
    pub errors: u64,
    /// Dependencies passed over because a row they need was held: settled in a later round.
    pub busy: u64,
}

/// `wf_sweep`: settles the edges of dependencies that ended — failed, cancelled, or completed by
/// a path that does not settle (the transaction that completes a step normally settles it, so
/// it has no open edge left) — in running workflows: at most `limit` dependencies with ids above
/// `after`. An edge whose dependent accepts that end (completed; failed with `ignore_failed`;
/// cancelled with `ignore_cancelled`) is met and counted down (releasing the dependent at
/// zero); any other breaks, and the dependent, if still waiting, is cancelled with "upstream `x`
/// failed". Each dependency in its own transaction; one that cannot be settled (an error) is
/// logged, counted and passed over, so it never holds up the others. Dependents cancelled here
/// are ended dependencies for the next pass. Returns what it did and, when the page was full,
/// the id to go on after.
pub async fn wf_sweep(
    conn: &mut MySqlConnection,
    after: u64,
    limit: u32,
) -> Result<(Swept, Option<u64>), Error> {
    let found: Vec<u64> = sqlx::query_scalar(
        "/* mysqlq:wf_sweep_find */ SELECT j.id FROM mysqlq_workflow w \
         JOIN job_queue j ON j.workflow_id = w.id AND j.workflow_status IN ('completed', 'failed', 'cancelled') \
         WHERE w.state = 'running' AND j.id > ? AND EXISTS (SELECT 1 FROM mysqlq_wf_edge e \
           WHERE e.dep_id = j.id AND e.state = 'open') \
         ORDER BY j.id LIMIT ?",
    )
    .bind(after)
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?;
    let mut out = Swept::default();
    let next = (found.len() == limit as usize)
        .then(|| found.last().copied())
        .flatten();
    for dep in found {
        let mut tx = conn
            .begin_with("/* mysqlq:wf_sweep */ SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION")
            .await?;
        match sweep_one(&mut tx, dep).await {
            Ok(Some(s)) => {
                tx.commit().await?;
                out.deps += s.deps;
                out.released += s.released;
                out.cancelled += s.cancelled;
            }
            Ok(None) => {
                drop(tx);
                out.busy += 1;
            }
            // The connection broke, or a deadlock: the next round tries again.
            Err(e) if e.is_transient() => return Err(e),
            Err(e) => {
                drop(tx);
                out.errors += 1;
                tracing::error!(job = dep, error = %crate::error_chain(&e), "cannot settle this workflow step's dependents; passing over it");
            }
        }
    }
    Ok((out, next))
}

/// Settles `dep`'s open edges in `tx`, never waiting for a lock: `Ok(None)` when a row it needs
/// (the dependency, a gate, a dependent) is held by another transaction — a worker's settlement,
/// another sweep, an operator — so the caller rolls back and the next round tries again. A
/// stalled holder then delays only this dependency's dependents, and no sweep holds a connection
/// or a lock while it waits.
async fn sweep_one(tx: &mut MySqlConnection, dep: u64) -> Result<Option<Swept>, Error> {
    let mut out = Swept::default();
    let row: Option<(String, Option<String>, Option<u32>, i64)> = sqlx::query_as(
        "/* mysqlq:wf_sweep_dep */ SELECT CAST(j.status AS CHAR), CAST(s.name AS CHAR), s.ordinal, \
         (SELECT COUNT(*) FROM mysqlq_wf_step o WHERE o.workflow_id = s.workflow_id AND o.name = s.name) \
         FROM job_queue j LEFT JOIN mysqlq_wf_step s ON s.job_id = j.id WHERE j.id = ? \
         FOR UPDATE SKIP LOCKED",
    )
    .bind(dep)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((status, name, ordinal, same_name)) = row else {
        // Held (an operator retrying it), or gone: next round.
        return Ok(None);
    };
    if !matches!(status.as_str(), "completed" | "failed" | "cancelled") {
        return Ok(Some(out));
    }
    let rules: Vec<(u64, u32, bool, bool)> = sqlx::query_as(
        "/* mysqlq:wf_upstream_edges */ SELECT e.dependent_id, e.block, s.ignore_failed <> 0, \
         s.ignore_cancelled <> 0 FROM mysqlq_wf_edge e JOIN mysqlq_wf_step s ON s.job_id = e.dependent_id \
         WHERE e.dep_id = ? AND e.state = 'open' ORDER BY e.dependent_id",
    )
    .bind(dep)
    .fetch_all(&mut *tx)
    .await?;
    if rules.is_empty() {
        return Ok(Some(out));
    }
    out.deps = 1;
    let accepts = |f: bool, c: bool| match status.as_str() {
        "completed" => true,
        "failed" => f,
        _ => c,
    };
    let met: Vec<(u64, u32)> = rules
        .iter()
        .filter(|r| accepts(r.2, r.3))
        .map(|r| (r.0, r.1))
        .collect();
    let broken: Vec<u64> = rules
        .iter()
        .filter(|r| !accepts(r.2, r.3))
        .map(|r| r.0)
        .collect();
    if !met.is_empty() {
        // Gates of the dependents that have them (one with a single dependency has none).
        let gated = met.iter().filter(|&&(_, b)| b != NO_GATE);
        let keys: BTreeSet<(u64, u32)> = gated
            .clone()
            .copied()
            .chain(gated.map(|&(d, _)| (d, 0)))
            .collect();
        let gates = lock_gates(tx, &keys, true).await?;
        if gates.len() < keys.len() {
            return missing_or_held(tx, dep, &keys).await;
        }
        let candidates = BTreeSet::from([dep]);
        let edges: Vec<Edge> = met
            .iter()
            .map(|&(d, b)| Edge {
                dep,
                dependent: d,
                block: b,
            })
            .collect();
        let heads: BTreeSet<u64> = met.iter().map(|&(d, _)| d).collect();
        let locked = lock_rows(tx, &heads, true).await?;
        if locked.len() < heads.len() {
            return Ok(None);
        }
        let rows: HashMap<u64, Option<String>> = heads
            .iter()
            .map(|d| (*d, locked.get(d).map(|r| r.status.clone())))
            .collect();
        let p = plan(&candidates, &edges, &gates, &heads, &rows)?;
        if p.settle.len() != 1 {
            return Err(Error::invalid(
                "workflow sweep",
                format!("gates of job {dep}'s dependents are missing"),
            ));
        }
        let ids: Vec<JobId> = met.iter().map(|&(d, _)| JobId(d)).collect();
        let sql = AssertSqlSafe(format!(
            "/* mysqlq:wf_edges_met */ UPDATE mysqlq_wf_edge FORCE INDEX (PRIMARY) SET state = 'met' \
             WHERE dep_id = ? AND dependent_id IN ({}) AND state = 'open'",
            placeholders(padded_len(ids.len()))
        ));
        bind_ids(sqlx::query(sql).bind(dep), &ids)
            .execute(&mut *tx)
            .await?;
        count_down(tx, &p.dec, &p.closed).await?;
        release(tx, &p.release).await?;
        out.released = p.release.len() as u64;
    }
    if !broken.is_empty() {
        let set: BTreeSet<u64> = broken.iter().copied().collect();
        if lock_rows(tx, &set, true).await?.len() < set.len() {
            return Ok(None);
        }
        let ids: Vec<JobId> = broken.iter().map(|&d| JobId(d)).collect();
        let sql = AssertSqlSafe(format!(
            "/* mysqlq:wf_edges_broken */ UPDATE mysqlq_wf_edge SET state = 'broken' \
             WHERE dep_id = ? AND dependent_id IN ({}) AND state = 'open'",
            placeholders(padded_len(ids.len()))
        ));
        bind_ids(sqlx::query(sql).bind(dep), &ids)
            .execute(&mut *tx)
            .await?;
        // A fan-out's steps share a name: `resize#3` says which.
        let step = match (name, ordinal) {
            (Some(n), Some(o)) if same_name > 1 => format!("{n}#{o}"),
            (Some(n), _) => n,
            (None, _) => format!("job {dep}"),
        };
        let reason = format!("upstream `{step}` {status}");
        let sql = AssertSqlSafe(format!(
            "/* mysqlq:wf_cancel_upstream */ UPDATE job_queue FORCE INDEX (PRIMARY) SET status = 'cancelled', \
             finished_at = UTC_TIMESTAMP(6), cancelled_at = UTC_TIMESTAMP(6), cancelled_by = ?, \
             cancel_reason = ? WHERE id IN ({}) AND status = 'waiting'",
            placeholders(padded_len(ids.len()))
        ));
        out.cancelled = bind_ids(sqlx::query(sql).bind(UPSTREAM).bind(reason), &ids)
            .execute(&mut *tx)
            .await?
            .rows_affected();
    }
    Ok(Some(out))
}

/// Gates `sweep_one` could not lock: held by another transaction (`Ok(None)`: next round), or
/// missing (the tables were changed by hand: an error, logged by the sweep).
async fn missing_or_held(
    tx: &mut MySqlConnection,
    dep: u64,
    keys: &BTreeSet<(u64, u32)>,
) -> Result<Option<Swept>, Error> {
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:wf_gates_exist */ SELECT COUNT(*) FROM mysqlq_wf_gate WHERE {}",
        gate_keys(keys.len())
    ));
    let mut q = sqlx::query_scalar::<_, i64>(sql);
    for (d, b) in keys {
        q = q.bind(*d).bind(*b);
    }
    let found = q.fetch_one(&mut *tx).await?;
    if usize::try_from(found).unwrap_or(0) < keys.len() {
        return Err(Error::invalid(
            "workflow sweep",
            format!("gates of job {dep}'s dependents are missing (changed by hand?)"),
        ));
    }
    Ok(None)
}

/// `wf_finish`: marks running workflows with no step left to run `completed`, `failed` (a step
/// failed or was cancelled by its upstream rule) or `cancelled` (an operator cancelled a step);
/// at most `limit` workflows, oldest first. Returns how many it finished.
pub async fn wf_finish(conn: &mut MySqlConnection, limit: u32) -> Result<u64, Error> {
    let done: Vec<(u64, i64, i64)> = sqlx::query_as(
        "/* mysqlq:wf_finish_find */ SELECT w.id, \
           CAST(SUM(j.status = 'failed' OR (j.status = 'cancelled' AND j.cancelled_by = ?)) AS SIGNED), \
           CAST(SUM(j.status = 'cancelled' AND (j.cancelled_by IS NULL OR j.cancelled_by <> ?)) AS SIGNED) \
         FROM mysqlq_workflow w JOIN job_queue j ON j.workflow_id = w.id \
         WHERE w.state = 'running' \
         GROUP BY w.id \
         HAVING SUM(j.workflow_status IN ('waiting', 'pending', 'processing')) = 0 \
            AND SUM(EXISTS (SELECT 1 FROM mysqlq_wf_edge e WHERE e.dep_id = j.id AND e.state = 'open')) = 0 \
         ORDER BY w.id LIMIT ?",
    )
    .bind(UPSTREAM)
    .bind(UPSTREAM)
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?;
    let mut n = 0;
    for (id, failed, cancelled) in done {
        let state = if cancelled > 0 {
            "cancelled"
        } else if failed > 0 {
            "failed"
        } else {
            "completed"
        };
        // Guarded: a step revived or added meanwhile keeps the workflow running.
        n += sqlx::query(
            "/* mysqlq:wf_finish */ UPDATE mysqlq_workflow w SET w.state = ?, \
             w.finished_at = UTC_TIMESTAMP(6) WHERE w.id = ? AND w.state = 'running' \
             AND NOT EXISTS (SELECT 1 FROM job_queue j WHERE j.workflow_id = w.id \
               AND j.workflow_status IN ('waiting', 'pending', 'processing'))",
        )
        .bind(state)
        .bind(id)
        .execute(&mut *conn)
        .await?
        .rows_affected();
    }
    Ok(n)
}

/// `wf_revive`: after an operator moved failed or cancelled `deps` back to `pending` (inside the
/// operator's transaction, which holds their row locks), reopens the edges they broke and moves
/// the dependents cancelled by the upstream rule back to `waiting` once no broken edge is left,
/// then does the same for those dependents' own dependents. Marks their workflows running
/// again. Returns the jobs revived, and those left cancelled because another job holds their
/// dedupe key now (a waiting step holds its key: reviving it would make two holders).
pub async fn wf_revive(
    conn: &mut MySqlConnection,
    deps: &[JobId],
) -> Result<(Vec<JobId>, Vec<JobId>), Error> {
    let mut revived = Vec::new();
    let mut blocked = Vec::new();
    let mut level: Vec<JobId> = deps.to_vec();
    while !level.is_empty() {
        let mut dependents: BTreeSet<u64> = BTreeSet::new();
        for chunk in level.chunks(1000) {
            let list = placeholders(padded_len(chunk.len()));
            let sql = AssertSqlSafe(format!(
                "/* mysqlq:wf_revive_edges */ SELECT dependent_id FROM mysqlq_wf_edge \
                 WHERE dep_id IN ({list}) AND state = 'broken'"
            ));
            let found: Vec<u64> = bind_ids(sqlx::query(sql), chunk)
                .fetch_all(&mut *conn)
                .await?
                .iter()
                .map(|r| r.try_get::<u64, _>(0))
                .collect::<Result<_, _>>()?;
            if found.is_empty() {
                continue;
            }
            dependents.extend(found);
            let sql = AssertSqlSafe(format!(
                "/* mysqlq:wf_revive_edges */ UPDATE mysqlq_wf_edge SET state = 'open' \
                 WHERE dep_id IN ({list}) AND state = 'broken'"
            ));
            bind_ids(sqlx::query(sql), chunk)
                .execute(&mut *conn)
                .await?;
        }
        if dependents.is_empty() {
            break;
        }
        lock_rows(conn, &dependents, false).await?;
        let ids: Vec<JobId> = dependents.iter().map(|&d| JobId(d)).collect();
        let sql = AssertSqlSafe(format!(
            "/* mysqlq:wf_revive */ SELECT id FROM job_queue FORCE INDEX (PRIMARY) WHERE id IN ({}) \
             AND status = 'cancelled' AND cancelled_by = ? \
             AND NOT EXISTS (SELECT 1 FROM mysqlq_wf_edge e WHERE e.dependent_id = job_queue.id \
               AND e.state = 'broken')",
            placeholders(padded_len(ids.len()))
        ));
        let back: Vec<u64> = bind_ids(sqlx::query(sql), &ids)
            .bind(UPSTREAM)
            .fetch_all(&mut *conn)
            .await?
            .iter()
            .map(|r| r.try_get::<u64, _>(0))
            .collect::<Result<_, _>>()?;
        level = back.iter().map(|&d| JobId(d)).collect();
        if level.is_empty() {
            break;
        }
        let (back, taken) = revive_rows(conn, &level).await?;
        blocked.extend(taken);
        level = back;
        revived.extend(level.iter().copied());
    }
    let mut all: Vec<JobId> = deps.to_vec();
    all.extend(revived.iter().copied());
    for chunk in all.chunks(1000) {
        let sql = AssertSqlSafe(format!(
            "/* mysqlq:wf_revive */ UPDATE mysqlq_workflow SET state = 'running', finished_at = NULL \
             WHERE state <> 'running' AND id IN (SELECT workflow_id FROM job_queue FORCE INDEX (PRIMARY) \
               WHERE id IN ({}) AND workflow_id IS NOT NULL)",
            placeholders(padded_len(chunk.len()))
        ));
        bind_ids(sqlx::query(sql), chunk)
            .execute(&mut *conn)
            .await?;
    }
    Ok((revived, blocked))
}

/// Moves `ids` (locked, cancelled upstream) back to `waiting`; one statement, or one per row
/// when that one hits a dedupe key held by another job (error 1062, which undoes only the
/// statement). Returns (revived, left cancelled for their key).
async fn revive_rows(
    conn: &mut MySqlConnection,
    ids: &[JobId],
) -> Result<(Vec<JobId>, Vec<JobId>), Error> {
    let sql = |n: usize| {
        AssertSqlSafe(format!(
            "/* mysqlq:wf_revive */ UPDATE job_queue FORCE INDEX (PRIMARY) SET status = 'waiting', finished_at = NULL, \
             cancelled_at = NULL, cancelled_by = NULL, cancel_reason = NULL WHERE id IN ({})",
            placeholders(padded_len(n))
        ))
    };
    match bind_ids(sqlx::query(sql(ids.len())), ids)
        .execute(&mut *conn)
        .await
    {
        Ok(_) => return Ok((ids.to_vec(), Vec::new())),
        Err(e) if crate::store::is_duplicate_key(&e) => {}
        Err(e) => return Err(e.into()),
    }
    let (mut back, mut taken) = (Vec::new(), Vec::new());
    for &id in ids {
        match bind_ids(sqlx::query(sql(1)), &[id])
            .execute(&mut *conn)
            .await
        {
            Ok(_) => back.push(id),
            Err(e) if crate::store::is_duplicate_key(&e) => taken.push(id),
            Err(e) => return Err(e.into()),
        }
    }
    Ok((back, taken))
}
