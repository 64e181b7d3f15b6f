//! Workflows and batches for operators: list, show, cancel every open step, retry the failed
//! steps (which brings back the steps their failure cancelled).

use super::{Admin, CancelReport, JobSelection, RetryReport, Selection};
use crate::Error;
use crate::store::workflow::admin as sql;
use crate::store::workflow::admin::{WorkflowDetail, WorkflowQuery, WorkflowSummary};

impl Admin {
    /// Workflows and batches, newest first ([`WorkflowQuery`]), with their steps by state.
    pub async fn workflows(&self, q: &WorkflowQuery<'_>) -> Result<Vec<WorkflowSummary>, Error> {
        let mut conn = self.pool.acquire().await?;
        sql::wf_list(&mut conn, q).await
    }

    /// One workflow or batch with every step: its job, state, attempts, dependencies (and
    /// each edge's state), rules.
    pub async fn workflow(&self, id: u64) -> Result<Option<WorkflowDetail>, Error> {
        let mut conn = self.pool.acquire().await?;
        sql::wf_get(&mut conn, id).await
    }

    /// Cancels every step of workflow `id` not final yet — waiting, pending and running (its
    /// worker stops it at its next heartbeat) — as [`cancel`](Self::cancel) does, recorded in
    /// the audit trail. Steps released meanwhile are cancelled too: it repeats until none is
    /// left open.
    pub async fn cancel_workflow(
        &self,
        id: u64,
        by: &str,
        reason: Option<&str>,
    ) -> Result<CancelReport, Error> {
        let mut report = CancelReport::default();
        loop {
            let open = {
                let mut conn = self.pool.acquire().await?;
                sql::wf_steps_in(&mut conn, id, &["waiting", "pending", "processing"]).await?
            };
            if open.is_empty() {
                return Ok(report);
            }
            let r = self
                .cancel(JobSelection::Ids(&open), by, reason, |_| {})
                .await?;
            if r.cancelled == 0 {
                // Each ended meanwhile (completed, failed, or cancelled by its upstream rule).
                let again = {
                    let mut conn = self.pool.acquire().await?;
                    sql::wf_steps_in(&mut conn, id, &["waiting", "pending", "processing"]).await?
                };
                if again == open {
                    return Ok(report);
                }
            }
            report.cancelled += r.cancelled;
            report.running.extend(r.running);
        }
    }

    /// Moves every failed step of workflow `id` back to `pending`, as
    /// [`retry_failed`](Self::retry_failed) does; the steps their failure had cancelled wait
    /// for them again ([`RetryReport::revived`]).
    pub async fn retry_workflow(&self, id: u64) -> Result<RetryReport, Error> {
        let failed = {
            let mut conn = self.pool.acquire().await?;
            sql::wf_steps_in(&mut conn, id, &["failed"]).await?
        };
        if failed.is_empty() {
            return Ok(RetryReport::default());
        }
        self.retry_failed(Selection::Ids(&failed), |_| {}).await
    }
}
