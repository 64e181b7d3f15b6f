//! Cancelling and deleting jobs, and the history of their attempts.

use serde::Serialize;

use super::{Admin, Attempt, JobState};
use crate::store::admin as sql;
use crate::{Error, JobId};

/// Which jobs [`Admin::cancel`] touches.
#[derive(Debug, Clone, Copy)]
pub enum JobSelection<'a> {
    /// These ids (ids that are not waiting or running jobs are reported, not touched).
    Ids(&'a [JobId]),
    /// Every waiting (ready, scheduled, retrying) and running job of this queue and kind
    /// (`None`: any) when the cancel began, walked by id over both states at once: a job that
    /// moves between them meanwhile (retried, snoozed, released, reaped) is cancelled all the
    /// same. Jobs enqueued after the cancel began are not included.
    Filter {
        /// Only this queue.
        queue: Option<&'a str>,
        /// Only this kind.
        kind: Option<&'a str>,
    },
}

/// What [`Admin::cancel`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CancelReport {
    /// Jobs cancelled in all (waiting and running).
    pub cancelled: u64,
    /// Of those, the jobs that were running: their workers stop them at their next heartbeat
    /// (a third of the lease by default), and what they return then is not written.
    pub running: Vec<JobId>,
    /// Of the ids asked for, those that were not waiting or running jobs (unknown, or already
    /// completed, failed or cancelled).
    pub not_cancellable: Vec<JobId>,
}

/// What [`Admin::delete`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DeleteReport {
    /// Jobs deleted, with their attempt history.
    pub deleted: u64,
    /// Ids of running jobs, not deleted: cancel them first.
    pub running: Vec<JobId>,
    /// Ids of no job.
    pub unknown: Vec<JobId>,
    /// Ids of workflow steps, not deleted: a step goes with its workflow.
    pub in_workflow: Vec<JobId>,
}

/// Longest `cancelled_by`, in characters (the audit trail's actor holds as many).
const MAX_BY: usize = 128;
/// Longest `cancel_reason`, in characters.
const MAX_REASON: usize = 1024;

impl Admin {
    /// Cancels waiting (ready, scheduled, retrying) and running jobs: they move to
    /// `cancelled` with `cancelled_by = by`, `cancelled_at` and `cancel_reason = reason`, and
    /// release their dedupe, ordering and concurrency keys at once. A running job's worker
    /// sees it at its next heartbeat: the handler's [`crate::JobContext`] is cancelled with
    /// [`crate::CancelReason::Cancelled`] and whatever it returns afterwards is not written.
    /// `progress` is called with the number of jobs looked at after each page.
    pub async fn cancel(
        &self,
        which: JobSelection<'_>,
        by: &str,
        reason: Option<&str>,
        mut progress: impl FnMut(usize),
    ) -> Result<CancelReport, Error> {
        let by = by.trim();
        if by.is_empty() || by.chars().count() > MAX_BY {
            return Err(Error::invalid(
                "cancelled by",
                format!("name who cancels in 1 to {MAX_BY} characters (e.g. a user name)"),
            ));
        }
        let reason = reason.map(str::trim).filter(|r| !r.is_empty());
        if reason.is_some_and(|r| r.chars().count() > MAX_REASON) {
            return Err(Error::invalid(
                "cancel reason",
                format!("is longer than {MAX_REASON} characters; shorten it"),
            ));
        }
        let mut conn = self.pool.acquire().await?;
        let (queue, kind, detail) = match which {
            JobSelection::Ids(ids) => (None, None, super::audit::name_ids(ids)),
            JobSelection::Filter { queue, kind } => (
                queue,
                kind,
                "every job that was waiting or running when the cancel began".to_owned(),
            ),
        };
        let entry = sql::AuditEntry {
            actor: by,
            action: "cancel",
            queue,
            kind,
            reason: reason.or(self.reason.as_deref()),
            detail: Some(&detail),
        };
        let audit = self.record_as(&mut conn, &entry).await?;
        let params = sql::CancelParams { by, reason, audit };
        let mut report = CancelReport::default();
        let tally = |r: sql::CancelReport, report: &mut CancelReport| {
            report.cancelled += (r.waiting.len() + r.running.len()) as u64;
            report.running.extend(r.running);
            report.not_cancellable.extend(r.skipped);
        };
        match which {
            JobSelection::Ids(ids) => {
                for chunk in ids.chunks(sql::BULK_CHUNK) {
                    let r = cancel_chunk(&mut conn, chunk, &params).await?;
                    tally(r, &mut report);
                }
                progress(ids.len());
            }
            JobSelection::Filter { queue, kind } => {
                let page = sql::ActivePageParams { queue, kind };
                let mut cursor = sql::ActiveCursor::default();
                while !cursor.is_done() {
                    let ids = sql::job_active_page(&mut conn, &page, &mut cursor).await?;
                    if ids.is_empty() {
                        continue;
                    }
                    for chunk in ids.chunks(sql::BULK_CHUNK) {
                        let mut r = cancel_chunk(&mut conn, chunk, &params).await?;
                        // A job that finished between the page and the cancel is no concern of
                        // a filter: only ids asked for by name are reported.
                        r.skipped.clear();
                        tally(r, &mut report);
                    }
                    progress(ids.len());
                }
            }
        }
        Ok(report)
    }

    /// How many jobs [`cancel`](Self::cancel) would take now: the waiting and running jobs of
    /// a filter, or of the ids given.
    pub async fn cancel_count(&self, which: JobSelection<'_>) -> Result<u64, Error> {
        let mut conn = self.pool.acquire().await?;
        match which {
            JobSelection::Filter { queue, kind } => {
                sql::job_active_count(&mut conn, &sql::ActivePageParams { queue, kind }).await
            }
            JobSelection::Ids(ids) => {
                let mut n = 0;
                for id in super::audit::unique(ids) {
                    if let Some(job) = sql::job_get(&mut conn, id).await?
                        && matches!(job.state, JobState::Pending | JobState::Processing)
                    {
                        n += 1;
                    }
                }
                Ok(n)
            }
        }
    }

    /// Deletes jobs in any state but running (waiting, scheduled, completed, failed,
    /// cancelled), with their attempt history; a deleted job's keys are free at once. Running
    /// jobs are reported in [`DeleteReport::running`] and left alone: [`cancel`](Self::cancel)
    /// them first.
    pub async fn delete(&self, ids: &[JobId]) -> Result<DeleteReport, Error> {
        let mut conn = self.pool.acquire().await?;
        let detail = super::audit::name_ids(ids);
        let audit = self
            .record_entry(&mut conn, "delete", None, None, Some(&detail))
            .await?;
        let mut report = DeleteReport::default();
        // One transaction's worth at a time, each retried alone (see `cancel_chunk`).
        for chunk in ids.chunks(sql::BULK_CHUNK) {
            let mut tries = 0;
            let r = loop {
                match sql::job_delete_many(&mut conn, chunk, audit).await {
                    Err(e) if retry_deadlock(&e, &mut tries).await => {}
                    other => break other?,
                }
            };
            report.deleted += r.deleted.len() as u64;
            for id in r.running {
                if !report.running.contains(&id) {
                    report.running.push(id);
                }
            }
            for id in r.in_workflow {
                if !report.in_workflow.contains(&id) {
                    report.in_workflow.push(id);
                }
            }
            for id in r.unknown {
                if !report.unknown.contains(&id) {
                    report.unknown.push(id);
                }
            }
        }
        Ok(report)
    }

    /// The recorded attempts of job `id` that did not complete, newest first (at most the
    /// workers' `attempt_history` of them; empty for an unknown job).
    pub async fn attempts(&self, id: JobId) -> Result<Vec<Attempt>, Error> {
        let mut conn = self.pool.acquire().await?;
        crate::store::job_attempts(&mut conn, id).await
    }
}

/// Cancels at most [`sql::BULK_CHUNK`] ids — one transaction of [`sql::job_cancel_many`] —
/// retried alone after a deadlock. A retry of more than the transaction that failed would meet
/// jobs an earlier transaction of it had cancelled and committed, and report them as not
/// cancellable instead of counting them.
async fn cancel_chunk(
    conn: &mut sqlx::MySqlConnection,
    chunk: &[JobId],
    params: &sql::CancelParams<'_>,
) -> Result<sql::CancelReport, Error> {
    debug_assert!(chunk.len() <= sql::BULK_CHUNK);
    let mut tries = 0;
    loop {
        match sql::job_cancel_many(conn, chunk, params).await {
            Err(e) if retry_deadlock(&e, &mut tries).await => {}
            other => return other,
        }
    }
}

/// `true` (after a short wait) when one of our own short transactions should run again: the
/// server picked it as a deadlock victim and rolled it back whole. A few times at most.
async fn retry_deadlock(e: &Error, tries: &mut u64) -> bool {
    if e.server_code() != Some(1213) || *tries >= 5 {
        return false;
    }
    *tries += 1;
    tokio::time::sleep(std::time::Duration::from_millis(10 * *tries)).await;
    true
}
