//! The operator's reads of workflows: a keyset list with each workflow's step counts by state,
//! and one workflow's steps with their dependencies.

use serde::Serialize;
use sqlx::{MySqlConnection, Row as _};

use crate::state::Timestamp;
use crate::{Error, JobId};

/// Steps of a workflow by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StepCounts {
    /// Waiting for their dependencies.
    pub waiting: u64,
    /// Released, not claimed yet (ready or scheduled).
    pub pending: u64,
    /// Running.
    pub processing: u64,
    /// Completed.
    pub completed: u64,
    /// Failed.
    pub failed: u64,
    /// Cancelled (by an operator, or by their upstream rule).
    pub cancelled: u64,
}

impl StepCounts {
    /// Every step.
    pub fn total(&self) -> u64 {
        self.waiting
            + self.pending
            + self.processing
            + self.completed
            + self.failed
            + self.cancelled
    }

    /// `waiting 2, running 1, completed 5`: the states that have steps, in the order of a
    /// step's life (`no steps` when none has).
    pub fn summary(&self) -> String {
        let parts: Vec<String> = [
            ("waiting", self.waiting),
            ("pending", self.pending),
            ("running", self.processing),
            ("completed", self.completed),
            ("failed", self.failed),
            ("cancelled", self.cancelled),
        ]
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(s, n)| format!("{s} {n}"))
        .collect();
        if parts.is_empty() {
            "no steps".to_owned()
        } else {
            parts.join(", ")
        }
    }
}

/// One workflow or batch, as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkflowSummary {
    /// `mysqlq_workflow.id`.
    pub id: u64,
    /// `workflow` or `batch`.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// `running`, `completed`, `failed` or `cancelled` (marked by the workflow sweep, at most
    /// a maintenance interval after its last step ended).
    pub state: String,
    /// When it was enqueued.
    pub created_at: Timestamp,
    /// When the sweep found it finished.
    pub finished_at: Option<Timestamp>,
    /// Its steps by state.
    pub steps: StepCounts,
}

/// One step of a workflow ([`WorkflowDetail`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkflowStep {
    /// The step's job.
    pub job: JobId,
    /// Its name (a fan-out's steps share it, told apart by `ordinal`).
    pub name: String,
    /// Index inside a fan-out.
    pub ordinal: u32,
    /// The job's kind.
    pub kind: Option<String>,
    /// The job's queue.
    pub queue: String,
    /// The job's state.
    pub state: String,
    /// Attempts taken.
    pub attempts: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// The steps it depends on, with each edge's state: `open`, `met`, or `broken` (it was
    /// cancelled because of that one).
    pub deps: Vec<(JobId, String)>,
    /// Runs when a dependency failed.
    pub ignore_failed: bool,
    /// Runs when a dependency was cancelled.
    pub ignore_cancelled: bool,
    /// Why it was cancelled, when it was.
    pub cancel_reason: Option<String>,
}

/// A workflow with its steps ([`crate::admin::Admin::workflow`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkflowDetail {
    /// The workflow.
    pub workflow: WorkflowSummary,
    /// Its steps, by name and ordinal.
    pub steps: Vec<WorkflowStep>,
}

/// Which workflows [`Admin::workflows`](crate::admin::Admin::workflows) returns, newest first.
#[derive(Debug, Clone, Copy, Default)]
pub struct WorkflowQuery<'a> {
    /// Only in this state (`running`, `completed`, `failed`, `cancelled`).
    pub state: Option<&'a str>,
    /// Only `workflow`s or only `batch`es.
    pub kind: Option<&'a str>,
    /// Only with this name.
    pub name: Option<&'a str>,
    /// Only ids below this one (the next page).
    pub before: Option<u64>,
    /// Most workflows returned.
    pub limit: u32,
}

const SUMMARY: &str = "SELECT w.id, CAST(w.kind AS CHAR) AS kind, CAST(w.name AS CHAR) AS name, \
    CAST(w.state AS CHAR) AS state, w.created_at, w.finished_at, \
    CAST(COALESCE(SUM(j.workflow_status = 'waiting'), 0) AS SIGNED) AS n_waiting, \
    CAST(COALESCE(SUM(j.workflow_status = 'pending'), 0) AS SIGNED) AS n_pending, \
    CAST(COALESCE(SUM(j.workflow_status = 'processing'), 0) AS SIGNED) AS n_processing, \
    CAST(COALESCE(SUM(j.workflow_status = 'completed'), 0) AS SIGNED) AS n_completed, \
    CAST(COALESCE(SUM(j.workflow_status = 'failed'), 0) AS SIGNED) AS n_failed, \
    CAST(COALESCE(SUM(j.workflow_status = 'cancelled'), 0) AS SIGNED) AS n_cancelled \
    FROM mysqlq_workflow w LEFT JOIN job_queue j ON j.workflow_id = w.id";

fn summary(r: &sqlx::mysql::MySqlRow) -> Result<WorkflowSummary, sqlx::Error> {
    let n = |c: &str| {
        r.try_get::<i64, _>(c)
            .map(|v| u64::try_from(v).unwrap_or(0))
    };
    Ok(WorkflowSummary {
        id: r.try_get("id")?,
        kind: r.try_get("kind")?,
        name: r.try_get("name")?,
        state: r.try_get("state")?,
        created_at: r.try_get("created_at")?,
        finished_at: r.try_get("finished_at")?,
        steps: StepCounts {
            waiting: n("n_waiting")?,
            pending: n("n_pending")?,
            processing: n("n_processing")?,
            completed: n("n_completed")?,
            failed: n("n_failed")?,
            cancelled: n("n_cancelled")?,
        },
    })
}

/// `wf_list`: workflows newest first, filtered, with their step counts (each workflow's steps
/// on `idx_job_workflow`).
pub async fn wf_list(
    conn: &mut MySqlConnection,
    q: &WorkflowQuery<'_>,
) -> Result<Vec<WorkflowSummary>, Error> {
    let sql = format!(
        "/* mysqlq:wf_list */ {SUMMARY} WHERE (? IS NULL OR w.state = ?) AND (? IS NULL OR w.kind = ?) \
         AND (? IS NULL OR w.name = ?) AND (? IS NULL OR w.id < ?) \
         GROUP BY w.id ORDER BY w.id DESC LIMIT ?"
    );
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(q.state)
        .bind(q.state)
        .bind(q.kind)
        .bind(q.kind)
        .bind(q.name)
        .bind(q.name)
        .bind(q.before)
        .bind(q.before)
        .bind(q.limit)
        .fetch_all(&mut *conn)
        .await?;
    Ok(rows.iter().map(summary).collect::<Result<_, _>>()?)
}

/// `wf_get`: one workflow and its steps, each with its dependencies.
pub async fn wf_get(conn: &mut MySqlConnection, id: u64) -> Result<Option<WorkflowDetail>, Error> {
    let sql = format!("/* mysqlq:wf_get */ {SUMMARY} WHERE w.id = ? GROUP BY w.id");
    let Some(row) = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?
    else {
        return Ok(None);
    };
    let workflow = summary(&row)?;
    let rows = sqlx::query(
        "/* mysqlq:wf_get */ SELECT s.job_id, CAST(s.name AS CHAR) AS name, s.ordinal, \
         s.ignore_failed <> 0 AS ignore_failed, s.ignore_cancelled <> 0 AS ignore_cancelled, \
         CAST(j.kind AS CHAR) AS kind, CAST(j.queue_name AS CHAR) AS queue_name, \
         CAST(j.status AS CHAR) AS status, j.attempts, j.max_attempts, \
         CAST(j.cancel_reason AS CHAR) AS cancel_reason \
         FROM mysqlq_wf_step s JOIN job_queue j ON j.id = s.job_id \
         WHERE s.workflow_id = ? ORDER BY s.job_id",
    )
    .bind(id)
    .fetch_all(&mut *conn)
    .await?;
    let edges: Vec<(u64, u64, String)> = sqlx::query_as(
        "/* mysqlq:wf_get */ SELECT e.dependent_id, e.dep_id, CAST(e.state AS CHAR) \
         FROM mysqlq_wf_edge e JOIN mysqlq_wf_step s ON s.job_id = e.dependent_id \
         WHERE s.workflow_id = ? ORDER BY e.dependent_id, e.dep_id",
    )
    .bind(id)
    .fetch_all(&mut *conn)
    .await?;
    let mut steps = Vec::with_capacity(rows.len());
    for r in &rows {
        let job: u64 = r.try_get("job_id")?;
        steps.push(WorkflowStep {
            job: JobId(job),
            name: r.try_get("name")?,
            ordinal: r.try_get("ordinal")?,
            kind: r.try_get("kind")?,
            queue: r.try_get("queue_name")?,
            state: r.try_get("status")?,
            attempts: r.try_get("attempts")?,
            max_attempts: r.try_get("max_attempts")?,
            deps: edges
                .iter()
                .filter(|(t, _, _)| *t == job)
                .map(|(_, d, s)| (JobId(*d), s.clone()))
                .collect(),
            ignore_failed: r.try_get("ignore_failed")?,
            ignore_cancelled: r.try_get("ignore_cancelled")?,
            cancel_reason: r.try_get("cancel_reason")?,
        });
    }
    steps.sort_by(|a, b| (a.name.as_str(), a.ordinal).cmp(&(b.name.as_str(), b.ordinal)));
    Ok(Some(WorkflowDetail { workflow, steps }))
}

/// The steps of workflow `id` in `states`, by id.
pub async fn wf_steps_in(
    conn: &mut MySqlConnection,
    id: u64,
    states: &[&str],
) -> Result<Vec<JobId>, Error> {
    let list = vec!["?"; states.len()].join(", ");
    let sql = format!(
        "/* mysqlq:wf_steps_in */ SELECT id FROM job_queue WHERE workflow_id = ? AND workflow_status IN ({list}) ORDER BY id"
    );
    let mut q = sqlx::query_scalar::<_, u64>(sqlx::AssertSqlSafe(sql)).bind(id);
    for s in states {
        q = q.bind(*s);
    }
    Ok(q.fetch_all(&mut *conn)
        .await?
        .into_iter()
        .map(JobId)
        .collect())
}
