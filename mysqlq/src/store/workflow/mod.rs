//! Workflow statements (`mysqlq::workflow`, migration 8): inserting a workflow's steps, edges
//! and gates; settling completed steps in the transaction that completes them, releasing each
//! dependent once; and the sweep that settles dependencies which ended any other way (failed,
//! cancelled, or completed by a path that does not settle) by the dependents' upstream rules.
//!
//! Locks: an edge of dependency `d` is written only by a transaction holding `d`'s row lock. A
//! worker's settlement waits only for its own jobs' rows; it takes gates and dependents with
//! `FOR UPDATE SKIP LOCKED` and hands back (writes a moment later) the completions whose rows it
//! could not lock, so settlements never wait for each other. The sweep waits (a background
//! service): it locks a dependency, then that dependency's dependents' gates in key order, then
//! the dependents.

pub mod admin;
pub mod graft;
mod handoff;
mod plan;
mod prune;
pub mod results;
mod settle;
mod sweep;

pub use handoff::{HandedOff, Handoff};
pub use prune::wf_prune;
pub use settle::wf_complete_steps;
pub use sweep::{Swept, wf_finish, wf_revive, wf_sweep};

use sqlx::{AssertSqlSafe, MySqlConnection};

use super::insert::{InsertRow, job_insert_many};
use super::sql::{bind_ids, padded_len, placeholders};
use crate::{Enqueued, Error, JobId};

/// Dependencies counted by one gate row.
pub const GATE_BLOCK: usize = 64;
/// The `block` of the edge of a step with exactly one dependency: such a step has no gate (the
/// settlement of its one edge, under the dependency's row lock, is all there is to count), so
/// its release costs no gate row — a fan-out's leaves and a chain's links are released by a
/// write of their own rows alone. A graft that adds dependencies to it gives it a gate then.
pub const NO_GATE: u32 = u32::MAX;
/// Most open edges of one dependency settled by one transaction. A fan-out's root settles its
/// steps a chunk per transaction — the first chunk with its completion, the next ones at once
/// after it (`Settled::more`) — so that the first steps are released (and can start) when
/// that transaction commits, and no transaction locks and writes ten thousand rows.
pub const EDGES_PER_SETTLEMENT: usize = 1000;
/// Rows per multi-row INSERT of a workflow's steps, edges and gates.
const INSERT_ROWS: usize = 500;
/// `cancelled_by` of a step cancelled because a dependency failed or was cancelled.
pub const UPSTREAM: &str = "mysqlq:upstream";

/// A step to insert: its job row, name, and the indexes (into the same slice) of its deps.
#[derive(Debug, Clone)]
pub struct StepRow {
    /// The step's name (a fan-out's steps share it).
    pub name: String,
    /// Index inside a fan-out (0 otherwise).
    pub ordinal: u32,
    /// The job.
    pub row: InsertRow,
    /// Indexes of the steps it depends on (declared before it).
    pub deps: Vec<usize>,
    /// Runs anyway when a dependency failed.
    pub ignore_failed: bool,
    /// Runs anyway when a dependency was cancelled.
    pub ignore_cancelled: bool,
}

/// What [`wf_insert`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WfInserted {
    /// The workflow's id and its steps' job ids, in the order given.
    Done(u64, Vec<JobId>),
    /// Step `step` (an index) has a dedupe key another job holds: roll back, nothing stays.
    Duplicate {
        /// The step's index.
        step: usize,
        /// The holder of the key.
        holder: JobId,
    },
    /// The auto-increment step changed mid-insert (Galera): roll back and insert again.
    Retry,
}

/// `wf_insert`: the workflow row, its jobs (`waiting` when they have deps), steps, edges and
/// gates. Only inserts (and one UPDATE of the rows just inserted), in the caller's transaction:
/// rolled back with it, nothing remains.
pub async fn wf_insert(
    conn: &mut MySqlConnection,
    kind: &str,
    name: &str,
    steps: &[StepRow],
) -> Result<WfInserted, Error> {
    let wf: u64 = sqlx::query(
        "/* mysqlq:wf_insert */ INSERT INTO mysqlq_workflow (kind, name, steps, created_at) \
         VALUES (?, ?, ?, UTC_TIMESTAMP(6))",
    )
    .bind(kind)
    .bind(name)
    .bind(u32::try_from(steps.len()).unwrap_or(u32::MAX))
    .execute(&mut *conn)
    .await?
    .last_insert_id();
    let outside = vec![Vec::new(); steps.len()];
    insert_steps(conn, wf, 0, steps, &outside).await
}

/// The jobs (`waiting` when they have dependencies), steps, edges and gates of `steps` in
/// workflow `wf`. `scope`: 0 for steps enqueued with the workflow, else the id of the running
/// step that adds them; `outside[i]`: jobs outside `steps` that step `i` also depends on (the
/// step that adds them). Only inserts, and one UPDATE of the rows just inserted.
pub(super) async fn insert_steps(
    conn: &mut MySqlConnection,
    wf: u64,
    scope: u64,
    steps: &[StepRow],
    outside: &[Vec<u64>],
) -> Result<WfInserted, Error> {
    let rows: Vec<InsertRow> = steps.iter().map(|s| s.row.clone()).collect();
    let Some(out) = job_insert_many(conn, &rows).await? else {
        return Ok(WfInserted::Retry);
    };
    let mut ids = Vec::with_capacity(out.len());
    for (i, e) in out.into_iter().enumerate() {
        match e {
            Enqueued::Inserted(id) => ids.push(id),
            Enqueued::Duplicate(holder) | Enqueued::Replaced(holder) => {
                return Ok(WfInserted::Duplicate { step: i, holder });
            }
        }
    }
    // The rows are this transaction's own and invisible to every other until it commits, so
    // inserting them `pending` and marking them here is the same as inserting them so.
    let (waiting, roots): (Vec<usize>, Vec<usize>) =
        (0..steps.len()).partition(|&i| !steps[i].deps.is_empty() || !outside[i].is_empty());
    for (set, of) in [
        ("workflow_id = ?, status = 'waiting'", &waiting),
        ("workflow_id = ?", &roots),
    ] {
        for chunk in of.chunks(1000) {
            let chunk_ids: Vec<JobId> = chunk.iter().map(|&i| ids[i]).collect();
            let sql = AssertSqlSafe(format!(
                "/* mysqlq:wf_insert */ UPDATE job_queue FORCE INDEX (PRIMARY) SET {set} WHERE id IN ({})",
                placeholders(padded_len(chunk_ids.len()))
            ));
            bind_ids(sqlx::query(sql).bind(wf), &chunk_ids)
                .execute(&mut *conn)
                .await?;
        }
    }
    for chunk in (0..steps.len()).collect::<Vec<_>>().chunks(INSERT_ROWS) {
        let sql = AssertSqlSafe(format!(
            "/* mysqlq:wf_insert */ INSERT INTO mysqlq_wf_step (job_id, workflow_id, name, scope, \
             ordinal, ignore_failed, ignore_cancelled) VALUES {}",
            vec!["(?, ?, ?, ?, ?, ?, ?)"; chunk.len()].join(", ")
        ));
        let mut q = sqlx::query(sql);
        for &i in chunk {
            let s = &steps[i];
            q = q
                .bind(ids[i].0)
                .bind(wf)
                .bind(&s.name)
                .bind(scope)
                .bind(s.ordinal)
                .bind(s.ignore_failed)
                .bind(s.ignore_cancelled);
        }
        q.execute(&mut *conn).await?;
    }
    let mut edges: Vec<(u64, u64, u32)> = Vec::new();
    let mut gates: Vec<(u64, u32, u32, u32)> = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        if s.deps.is_empty() && outside[i].is_empty() {
            continue;
        }
        let dependent = ids[i].0;
        let mut deps: Vec<u64> = s.deps.iter().map(|&d| ids[d].0).collect();
        deps.extend(outside[i].iter().copied());
        deps.sort_unstable();
        deps.dedup();
        // At most `MAX_STEPS` deps: every count here fits a u32.
        let n32 = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        if let [d] = deps[..] {
            edges.push((d, dependent, NO_GATE));
            continue;
        }
        let blocks = deps.len().div_ceil(GATE_BLOCK);
        for (n, d) in deps.iter().enumerate() {
            edges.push((*d, dependent, n32(n / GATE_BLOCK)));
        }
        for b in 0..blocks {
            let in_block = n32((deps.len() - b * GATE_BLOCK).min(GATE_BLOCK));
            let open = if b == 0 { n32(blocks - 1) } else { 0 };
            gates.push((dependent, n32(b), in_block, open));
        }
    }
    for chunk in edges.chunks(INSERT_ROWS) {
        let sql = AssertSqlSafe(format!(
            "/* mysqlq:wf_insert */ INSERT INTO mysqlq_wf_edge (dep_id, dependent_id, block) VALUES {}",
            vec!["(?, ?, ?)"; chunk.len()].join(", ")
        ));
        let mut q = sqlx::query(sql);
        for &(d, t, b) in chunk {
            q = q.bind(d).bind(t).bind(b);
        }
        q.execute(&mut *conn).await?;
    }
    for chunk in gates.chunks(INSERT_ROWS) {
        let sql = AssertSqlSafe(format!(
            "/* mysqlq:wf_insert */ INSERT INTO mysqlq_wf_gate (step_id, block, remaining, open_blocks) \
             VALUES {}",
            vec!["(?, ?, ?, ?)"; chunk.len()].join(", ")
        ));
        let mut q = sqlx::query(sql);
        for &(t, b, r, o) in chunk {
            q = q.bind(t).bind(b).bind(r).bind(o);
        }
        q.execute(&mut *conn).await?;
    }
    Ok(WfInserted::Done(wf, ids))
}
