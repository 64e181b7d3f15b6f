//! Acting on jobs a search found (`Admin::act`): each chunk in one transaction locks the
//! candidates that still match the search and the action's guard, cuts them to what the
//! confirmed count allows, changes them and links them to the action's audit record.

use serde::Serialize;
use sqlx::{Connection as _, MySqlConnection, Row};

use super::run::{closed_queues, now};
use super::sql::{self, Bind, Sql};
use super::{Plan, Walk};
use crate::filter::Filter;
use crate::state::OpState;
use crate::store::admin::CancelParams;
use crate::{Error, JobId};

/// What an operator does to the jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Scheduled or retrying jobs become due now (`pending`, `available_at > now`). Keys,
    /// limits and a 429 hold still apply at the claim.
    RunNow,
    /// Failed jobs run again (attempts reset), as `retry_failed` does.
    Retry,
    /// Waiting, pending and running jobs are cancelled.
    Cancel,
    /// Jobs in any state but running, and not workflow steps, are deleted.
    Delete,
}

impl Action {
    /// The audit trail's name of the action.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RunNow => "run_now",
            Self::Retry => "retry",
            Self::Cancel => "cancel",
            Self::Delete => "delete",
        }
    }

    /// The operator states the action can change: run now scheduled and retrying jobs, retry
    /// failed ones, cancel any not finished, delete any but running ones.
    pub fn states(self) -> &'static [OpState] {
        use OpState as O;
        match self {
            Self::RunNow => &[O::Scheduled, O::Retrying],
            Self::Retry => &[O::Failed],
            Self::Cancel => &[
                O::Waiting,
                O::Ready,
                O::RateLimited,
                O::Scheduled,
                O::Retrying,
                O::Running,
            ],
            Self::Delete => &[
                O::Waiting,
                O::Ready,
                O::RateLimited,
                O::Scheduled,
                O::Retrying,
                O::Completed,
                O::Failed,
                O::Cancelled,
            ],
        }
    }

    /// `filter` narrowed to the [`states`](Self::states) the action can change (those of its
    /// states among them, or all of them when it names none), so that a count of it is what
    /// the action can reach; `None` when it can change none of the states searched.
    pub fn narrow(self, filter: &Filter) -> Option<Filter> {
        let ok = self.states();
        let mut f = filter.clone();
        f.states = if filter.states.is_empty() {
            ok.to_vec()
        } else {
            filter
                .states
                .iter()
                .copied()
                .filter(|s| ok.contains(s))
                .collect()
        };
        (!f.states.is_empty()).then_some(f)
    }

    /// The jobs the action may change, as SQL on `j` (with `now` bound).
    fn guard(self, s: &mut Sql, now: crate::state::Timestamp) {
        match self {
            Self::RunNow => {
                s.push(" AND j.status = 'pending' AND j.available_at > ")
                    .bind(Bind::Ts(now));
            }
            Self::Retry => {
                s.push(" AND j.status = 'failed'");
            }
            Self::Cancel => {
                s.push(" AND j.status IN ('waiting', 'pending', 'processing')");
            }
            Self::Delete => {
                s.push(" AND j.status <> 'processing' AND j.workflow_id IS NULL");
            }
        }
    }
}

/// What one chunk did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chunk {
    /// Jobs changed.
    pub changed: Vec<JobId>,
    /// Candidates that no longer matched the search or the guard (left alone).
    pub left: u64,
}

/// Who acts: the audit record and, for a cancel, the name and reason written on the job.
#[derive(Debug, Clone, Copy)]
pub struct Actor<'a> {
    /// The action's audit record.
    pub audit: u64,
    /// `cancelled_by`.
    pub by: &'a str,
    /// `cancel_reason`.
    pub reason: Option<&'a str>,
}

/// `job_act_chunk`: in one READ COMMITTED transaction, locks those of `candidates` (ids at
/// most `horizon`) that still match `filter` (when given) and the action's guard, at most
/// `budget` of them in id order, changes them, links them to the audit record, and sets the
/// record's progress time. A failed job's retry goes through `job_retry_failed` afterwards,
/// which guards and locks again (it also revives workflow steps and reports dedupe conflicts).
pub async fn job_act_chunk(
    conn: &mut MySqlConnection,
    action: Action,
    filter: Option<&Filter>,
    candidates: &[JobId],
    horizon: u64,
    budget: u64,
    who: &Actor<'_>,
) -> Result<Chunk, Error> {
    if candidates.is_empty() || budget == 0 {
        return Ok(Chunk::default());
    }
    let mut tx = conn
        .begin_with(
            "/* mysqlq:job_act */ SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION",
        )
        .await?;
    let now = now(&mut tx).await?;
    let mut s = Sql::default();
    s.push("/* mysqlq:job_act_lock */ SELECT j.id FROM job_queue j FORCE INDEX (PRIMARY) WHERE j.id IN (");
    for (i, id) in candidates.iter().enumerate() {
        if i > 0 {
            s.push(", ");
        }
        s.bind(Bind::U64(id.0));
    }
    s.push(") AND j.id <= ").bind(Bind::U64(horizon));
    action.guard(&mut s, now);
    if let Some(f) = filter {
        let closed = closed_queues(&mut tx, now).await?;
        let plan = Plan::of(f, now);
        s.append(sql::entry_filters(&plan));
        if !plan.states.is_empty() {
            s.push(" AND ")
                .append(sql::states_predicate(&plan.states, now, &closed));
        }
        s.append(sql::row_filters(&plan, Walk::Ids));
    }
    s.push(" ORDER BY j.id LIMIT ")
        .bind(Bind::U64(budget))
        .push(" FOR UPDATE");
    let ids: Vec<JobId> = s
        .query()
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|r| r.try_get("id").map(JobId))
        .collect::<Result<_, _>>()?;
    let mut unique = candidates.to_vec();
    unique.sort_unstable_by_key(|id| id.0);
    unique.dedup();
    let left = (unique.len() - ids.len()) as u64;
    if ids.is_empty() {
        tx.rollback().await?;
        return Ok(Chunk { changed: ids, left });
    }
    let changed = match action {
        Action::RunNow => {
            let mut u = Sql::default();
            // Due at the `now` the guard compares with, so a job whose due time passes while
            // the chunk runs is never moved later.
            u.push("/* mysqlq:job_run_now */ UPDATE job_queue j SET j.available_at = ")
                .bind(Bind::Ts(now))
                .push(" WHERE j.id IN (");
            for (i, id) in ids.iter().enumerate() {
                if i > 0 {
                    u.push(", ");
                }
                u.bind(Bind::U64(id.0));
            }
            u.push(")");
            action.guard(&mut u, now);
            u.query().execute(&mut *tx).await?;
            ids
        }
        Action::Cancel => {
            let p = CancelParams {
                by: who.by,
                reason: who.reason,
                audit: Some(who.audit),
            };
            crate::store::admin::cancel_locked(&mut tx, &ids, &p).await?;
            ids
        }
        Action::Delete => {
            crate::store::admin::delete_locked(&mut tx, &ids).await?;
            ids
        }
        Action::Retry => {
            // Checked under lock; `job_retry_failed` locks, guards and links them itself.
            tx.commit().await?;
            let r =
                crate::store::admin::job_retry_failed(&mut *conn, &ids, Some(who.audit)).await?;
            let left = left + (ids.len() - r.retried.len()) as u64;
            audit_progress(&mut *conn, who.audit).await?;
            return Ok(Chunk {
                changed: r.retried,
                left,
            });
        }
    };
    crate::store::admin::audit_jobs(&mut tx, Some(who.audit), &changed).await?;
    audit_progress(&mut tx, who.audit).await?;
    tx.commit().await?;
    Ok(Chunk { changed, left })
}

/// `audit_progress`: the action is alive (`progress_at`).
async fn audit_progress(conn: &mut MySqlConnection, audit: u64) -> Result<(), Error> {
    sqlx::query(
        "/* mysqlq:audit_progress */ UPDATE mysqlq_audit SET progress_at = UTC_TIMESTAMP(6) \
         WHERE id = ?",
    )
    .bind(audit)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// How a bulk action ended (`mysqlq_audit.state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BulkState {
    /// Still acting.
    Running,
    /// Walked the whole search, or reached its confirmed count.
    Done,
    /// Stopped by the operator.
    Stopped,
    /// Stopped by an error.
    Failed,
}

impl BulkState {
    fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Done => "done",
            Self::Stopped => "stopped",
            Self::Failed => "failed",
        }
    }
}

/// `audit_bulk_state`: a bulk action's confirmed count (once, when it starts) and state.
pub async fn audit_bulk_state(
    conn: &mut MySqlConnection,
    audit: u64,
    expected: Option<u64>,
    state: BulkState,
) -> Result<(), Error> {
    sqlx::query(
        "/* mysqlq:audit_bulk_state */ UPDATE mysqlq_audit SET expected = IFNULL(?, expected), \
         state = ?, progress_at = UTC_TIMESTAMP(6) WHERE id = ?",
    )
    .bind(expected)
    .bind(state.as_str())
    .bind(audit)
    .execute(&mut *conn)
    .await?;
    Ok(())
}
