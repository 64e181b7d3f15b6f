//! Grafting: a running step adds steps to its own workflow. The steps its graft adds are waited
//! for by every step still waiting for it (their edges are copied), so a consumer of the
//! grafter waits for everything it added, at every depth (a grafted step that grafts again
//! copies its own edges, which include the ones its graft gave it).

use std::collections::BTreeMap;

use sqlx::{AssertSqlSafe, Connection as _, MySqlConnection, Row as _};

use super::{GATE_BLOCK, NO_GATE, StepRow, WfInserted, insert_steps};
use crate::store::guarded::Owned;
use crate::{Error, JobId};

/// What [`wf_graft`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grafted {
    /// The new steps' job ids, in the order given (or those this grafter added before, when a
    /// later attempt grafts the same names again).
    Done(Vec<JobId>),
    /// The grafter no longer owns its job (lease lost, cancelled, ended): nothing written.
    LeaseLost,
    /// The grafter is not a workflow step.
    NotAStep,
    /// A step's dedupe key is held (its index, the holder): nothing written.
    Duplicate(usize, JobId),
    /// The auto-increment step changed mid-insert (Galera): graft again.
    Retry,
}

/// `wf_graft`: in one READ COMMITTED transaction, adds `steps` (scope: the grafter) to the
/// grafter's workflow, `after_grafter[i]` when step `i` depends on the grafter, and copies
/// every open edge of the grafter onto each new step (new gate blocks of its dependents, their
/// heads' `open_blocks` raised). The grafter's row is locked and checked first (`processing`
/// under its token); its open edges keep every dependent waiting while this runs.
pub async fn wf_graft(
    conn: &mut MySqlConnection,
    grafter: &Owned,
    steps: &[StepRow],
    after_grafter: &[bool],
) -> Result<Grafted, Error> {
    let mut tx = conn
        .begin_with("/* mysqlq:wf_graft */ SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION")
        .await?;
    let row: Option<(Option<u64>, String, Option<String>)> = sqlx::query_as(
        "/* mysqlq:wf_graft_lock */ SELECT workflow_id, CAST(status AS CHAR), claim_token \
         FROM job_queue FORCE INDEX (PRIMARY) WHERE id = ? FOR UPDATE",
    )
    .bind(grafter.id.0)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((wf, status, token)) = row else {
        return Ok(Grafted::LeaseLost);
    };
    if status != "processing" || token.as_deref() != Some(grafter.token.as_str()) {
        return Ok(Grafted::LeaseLost);
    }
    let Some(wf) = wf else {
        return Ok(Grafted::NotAStep);
    };
    // A later attempt grafting the same steps again gets the ones added before.
    let before: Vec<(String, u32, u64)> = sqlx::query_as(
        "/* mysqlq:wf_graft_before */ SELECT CAST(name AS CHAR), ordinal, job_id FROM mysqlq_wf_step \
         WHERE workflow_id = ? AND scope = ?",
    )
    .bind(wf)
    .bind(grafter.id.0)
    .fetch_all(&mut *tx)
    .await?;
    if !before.is_empty() {
        let found: Option<Vec<JobId>> = steps
            .iter()
            .map(|s| {
                before
                    .iter()
                    .find(|(n, o, _)| *n == s.name && *o == s.ordinal)
                    .map(|b| JobId(b.2))
            })
            .collect();
        if let Some(ids) = found {
            return Ok(Grafted::Done(ids));
        }
    }
    let outside: Vec<Vec<u64>> = after_grafter
        .iter()
        .map(|&a| if a { vec![grafter.id.0] } else { Vec::new() })
        .collect();
    let ids = match insert_steps(&mut tx, wf, grafter.id.0, steps, &outside).await? {
        WfInserted::Done(_, ids) => ids,
        WfInserted::Duplicate { step, holder } => return Ok(Grafted::Duplicate(step, holder)),
        WfInserted::Retry => return Ok(Grafted::Retry),
    };
    // Inheritance: every step still waiting for the grafter waits for each new step too.
    let dependents: Vec<(u64, u32)> = sqlx::query_as(
        "/* mysqlq:wf_graft_inherit */ SELECT dependent_id, block FROM mysqlq_wf_edge \
         WHERE dep_id = ? AND state = 'open' ORDER BY dependent_id",
    )
    .bind(grafter.id.0)
    .fetch_all(&mut *tx)
    .await?;
    // Edges from the new steps to the grafter's own new dependents are the graph's, not
    // inherited: only the dependents it had before.
    let new: Vec<u64> = ids.iter().map(|j| j.0).collect();
    for (d, block) in dependents.into_iter().filter(|(d, _)| !new.contains(d)) {
        if block == NO_GATE {
            // The grafter was its one dependency, so it had no gate: it gets one now, its
            // head counting the grafter's edge (still open: the grafter runs), the grafted
            // steps in blocks after it. Only the grafter's transactions write this edge and
            // only they settle it, and the grafter's row is ours: nothing else can race this.
            sqlx::query(
                "/* mysqlq:wf_graft_gate */ UPDATE mysqlq_wf_edge SET block = 0 \
                 WHERE dep_id = ? AND dependent_id = ?",
            )
            .bind(grafter.id.0)
            .bind(d)
            .execute(&mut *tx)
            .await?;
            sqlx::query(
                "/* mysqlq:wf_graft_gate */ INSERT INTO mysqlq_wf_gate (step_id, block, remaining, \
                 open_blocks) VALUES (?, 0, 1, 0)",
            )
            .bind(d)
            .execute(&mut *tx)
            .await?;
        }
        // The head waits: a settlement holds it for milliseconds, and hands back rather than
        // wait for us.
        let head = sqlx::query(
            "/* mysqlq:wf_graft_head */ SELECT (SELECT MAX(block) FROM mysqlq_wf_gate WHERE step_id = ?) AS top \
             FROM mysqlq_wf_gate FORCE INDEX (PRIMARY) WHERE step_id = ? AND block = 0 FOR UPDATE",
        )
        .bind(d)
        .bind(d)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(head) = head else {
            continue;
        };
        let top: u32 = head.try_get::<Option<u32>, _>("top")?.unwrap_or(0);
        let mut blocks: BTreeMap<u32, u32> = BTreeMap::new();
        let mut edges = Vec::with_capacity(new.len());
        for (n, dep) in new.iter().enumerate() {
            let block = top + 1 + u32::try_from(n / GATE_BLOCK).unwrap_or(u32::MAX);
            *blocks.entry(block).or_default() += 1;
            edges.push((*dep, block));
        }
        for chunk in edges.chunks(500) {
            let sql = AssertSqlSafe(format!(
                "/* mysqlq:wf_graft_inherit */ INSERT INTO mysqlq_wf_edge (dep_id, dependent_id, block) VALUES {}",
                vec!["(?, ?, ?)"; chunk.len()].join(", ")
            ));
            let mut q = sqlx::query(sql);
            for &(dep, block) in chunk {
                q = q.bind(dep).bind(d).bind(block);
            }
            q.execute(&mut *tx).await?;
        }
        let sql = AssertSqlSafe(format!(
            "/* mysqlq:wf_graft_inherit */ INSERT INTO mysqlq_wf_gate (step_id, block, remaining) VALUES {}",
            vec!["(?, ?, ?)"; blocks.len()].join(", ")
        ));
        let mut q = sqlx::query(sql);
        for (block, n) in &blocks {
            q = q.bind(d).bind(*block).bind(*n);
        }
        q.execute(&mut *tx).await?;
        sqlx::query(
            "/* mysqlq:wf_graft_inherit */ UPDATE mysqlq_wf_gate SET open_blocks = open_blocks + ? \
             WHERE step_id = ? AND block = 0",
        )
        .bind(u32::try_from(blocks.len()).unwrap_or(u32::MAX))
        .bind(d)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(Grafted::Done(ids))
}

/// The step name of job `id` (a workflow step), if it is one.
pub async fn wf_step_name(conn: &mut MySqlConnection, id: JobId) -> Result<Option<String>, Error> {
    Ok(sqlx::query_scalar(
        "/* mysqlq:wf_step_name */ SELECT CAST(name AS CHAR) FROM mysqlq_wf_step WHERE job_id = ?",
    )
    .bind(id.0)
    .fetch_optional(&mut *conn)
    .await?)
}
