//! What a running step knows of its workflow: its id, the results its dependencies recorded
//! (`ctx.upstream`), recording its own (`ctx.record`), and a batch's counts for its callbacks.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{BatchId, WorkflowId};
use crate::store::workflow::results as sql;
use crate::{CancelReason, Error, JobContext};

/// Largest recorded result, in bytes of JSON (the meta's limit).
pub const MAX_RESULT_BYTES: usize = crate::MAX_META_BYTES;
/// Results read per statement by [`JobContext::upstream_all`].
const PAGE: u32 = 500;

/// A batch's members by state, as its callback sees them ([`JobContext::batch_counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BatchCounts {
    /// Members in all.
    pub total: u64,
    /// Completed.
    pub completed: u64,
    /// Failed.
    pub failed: u64,
    /// Cancelled.
    pub cancelled: u64,
    /// Not final yet (an `on_complete` callback sees 0; members added meanwhile count here).
    pub open: u64,
}

fn no_workflow(ctx: &JobContext) -> Error {
    Error::invalid(
        "workflow step",
        format!(
            "job {} is not a step of a workflow: enqueue it with mysqlq::workflow::Workflow",
            ctx.id()
        ),
    )
}

impl JobContext {
    /// The workflow this job is a step of, if it is one.
    pub fn workflow_id(&self) -> Option<WorkflowId> {
        self.workflow_raw().map(WorkflowId)
    }

    /// The batch this job belongs to (a member or a callback), if it was enqueued by a
    /// [`super::Batch`]: the same id as [`workflow_id`](Self::workflow_id).
    pub fn batch_id(&self) -> Option<BatchId> {
        self.workflow_raw().map(BatchId)
    }

    /// Records this step's result for its dependents ([`upstream`](Self::upstream)): serde
    /// JSON, at most [`MAX_RESULT_BYTES`], written now under this attempt's claim token (a later
    /// attempt overwrites it). When the claim was lost nothing is written, the context is
    /// cancelled and an error says so.
    pub async fn record<T: Serialize>(&self, value: &T) -> Result<(), Error> {
        let Some(_) = self.workflow_raw() else {
            return Err(no_workflow(self));
        };
        let json = serde_json::to_string(value).map_err(|source| Error::Serialize {
            kind: self.kind().to_owned(),
            source,
        })?;
        if json.len() > MAX_RESULT_BYTES {
            return Err(Error::invalid(
                "workflow step result",
                format!(
                    "{} bytes of JSON, over the limit of {MAX_RESULT_BYTES}; store large results in \
                     your own table and record their key",
                    json.len()
                ),
            ));
        }
        let Some(pool) = self.pool() else {
            return Ok(());
        };
        if self.claim_token().is_empty() {
            return Ok(());
        }
        let owned = crate::store::Owned {
            id: self.id(),
            token: self.claim_token().to_owned(),
        };
        let mut conn = pool.acquire().await?;
        if !sql::wf_record(&mut conn, &owned, &json).await? {
            drop(conn);
            self.cancel(CancelReason::LeaseLost);
            return Err(Error::invalid(
                "workflow step result",
                format!(
                    "job {} is no longer owned by this attempt (lease lost, or the job ended); \
                     nothing was recorded: stop the handler",
                    self.id()
                ),
            ));
        }
        Ok(())
    }

    /// The result recorded by step `step` of this job's workflow, if that step completed and
    /// recorded one. An error when the workflow has no such step, or `step` names a fan-out
    /// of several steps (use [`upstream_all`](Self::upstream_all)), or the result does not
    /// deserialise as `T`.
    pub async fn upstream<T: DeserializeOwned>(&self, step: &str) -> Result<Option<T>, Error> {
        let wf = self.workflow_raw().ok_or_else(|| no_workflow(self))?;
        let pool = self.pool().ok_or_else(|| no_pool(self))?;
        let mut conn = pool.acquire().await?;
        let rows = sql::wf_results(&mut conn, wf, step, None, 2).await?;
        match rows.as_slice() {
            [] => Err(Error::invalid(
                "upstream step",
                format!("workflow {wf} has no step `{step}`"),
            )),
            [(_, done, result)] => match (done, result) {
                (true, Some(json)) => decode(step, json).map(Some),
                _ => Ok(None),
            },
            _ => Err(Error::invalid(
                "upstream step",
                format!("`{step}` is a fan-out of several steps: read them with upstream_all"),
            )),
        }
    }

    /// The results recorded by every completed step named `step` (a fan-out), in fan-out
    /// order; steps that did not complete or recorded nothing are left out.
    pub async fn upstream_all<T: DeserializeOwned>(&self, step: &str) -> Result<Vec<T>, Error> {
        let wf = self.workflow_raw().ok_or_else(|| no_workflow(self))?;
        let pool = self.pool().ok_or_else(|| no_pool(self))?;
        let mut conn = pool.acquire().await?;
        let mut out = Vec::new();
        let mut after = None;
        loop {
            let rows = sql::wf_results(&mut conn, wf, step, after, PAGE).await?;
            if rows.is_empty() && after.is_none() {
                return Err(Error::invalid(
                    "upstream step",
                    format!("workflow {wf} has no step `{step}`"),
                ));
            }
            for (_, done, result) in &rows {
                if let (true, Some(json)) = (done, result) {
                    out.push(decode(step, json)?);
                }
            }
            match rows.last() {
                Some((ordinal, _, _)) if rows.len() == PAGE as usize => after = Some(*ordinal),
                _ => return Ok(out),
            }
        }
    }

    /// The batch's members by state, read now (for a callback: `on_complete` sees every member
    /// final, `on_success` every member completed).
    pub async fn batch_counts(&self) -> Result<BatchCounts, Error> {
        let wf = self.workflow_raw().ok_or_else(|| no_workflow(self))?;
        let pool = self.pool().ok_or_else(|| no_pool(self))?;
        let mut conn = pool.acquire().await?;
        let mut c = BatchCounts::default();
        for (status, n) in sql::wf_batch_counts(&mut conn, wf).await? {
            c.total += n;
            match status.as_str() {
                "completed" => c.completed += n,
                "failed" => c.failed += n,
                "cancelled" => c.cancelled += n,
                _ => c.open += n,
            }
        }
        Ok(c)
    }
}

fn no_pool(ctx: &JobContext) -> Error {
    Error::invalid(
        "workflow step",
        format!(
            "job {}'s context has no pool (a detached context)",
            ctx.id()
        ),
    )
}

fn decode<T: DeserializeOwned>(step: &str, json: &str) -> Result<T, Error> {
    serde_json::from_str(json).map_err(|e| {
        Error::invalid(
            "upstream result",
            format!("the result of step `{step}` does not fit the type asked for: {e}"),
        )
    })
}
