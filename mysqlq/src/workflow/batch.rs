//! Batches: independent jobs with `on_success` / `on_complete` callbacks, as a workflow.

use futures_util::future::BoxFuture;
use sqlx::{Acquire, MySql};

use super::{BatchId, Workflow, WorkflowError, new_jobs};
use crate::{EnqueueOptions, Error, Job, NewJob};

/// Independent jobs with callbacks (Sidekiq's batches): [`on_success`](Batch::on_success) runs
/// once when every job completed, [`on_complete`](Batch::on_complete) once when every job is
/// final (completed, failed or cancelled). A failed job that an operator retries and that then
/// completes still leads to `on_success`.
#[derive(Debug, Clone)]
pub struct Batch {
    name: String,
    jobs: Vec<NewJob>,
    on_success: Option<NewJob>,
    on_complete: Option<NewJob>,
}

impl Batch {
    /// An empty batch called `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            jobs: Vec::new(),
            on_success: None,
            on_complete: None,
        }
    }

    /// Adds one job.
    pub fn job<J: Job>(mut self, job: J) -> Result<Self, Error> {
        self.jobs
            .push(NewJob::from_job(&job, &EnqueueOptions::new())?);
        Ok(self)
    }

    /// Adds jobs.
    pub fn jobs<J: Job>(mut self, jobs: impl IntoIterator<Item = J>) -> Result<Self, Error> {
        self.jobs.extend(new_jobs(jobs, &EnqueueOptions::new())?);
        Ok(self)
    }

    /// Adds jobs with options.
    pub fn jobs_with<J: Job>(
        mut self,
        jobs: impl IntoIterator<Item = J>,
        o: &EnqueueOptions,
    ) -> Result<Self, Error> {
        self.jobs.extend(new_jobs(jobs, o)?);
        Ok(self)
    }

    /// The job to run once every job of the batch completed (cancelled, "upstream … failed",
    /// when one fails or is cancelled; revived when that one is retried).
    pub fn on_success<J: Job>(mut self, job: J) -> Result<Self, Error> {
        self.on_success = Some(NewJob::from_job(&job, &EnqueueOptions::new())?);
        Ok(self)
    }

    /// The job to run once every job of the batch is final, however it ended.
    pub fn on_complete<J: Job>(mut self, job: J) -> Result<Self, Error> {
        self.on_complete = Some(NewJob::from_job(&job, &EnqueueOptions::new())?);
        Ok(self)
    }

    /// Enqueues the batch (as [`Workflow::enqueue`]): members are steps `jobs#0..n`, callbacks
    /// are steps depending on every member.
    pub fn enqueue<'c, A>(self, target: A) -> BoxFuture<'c, Result<BatchId, Error>>
    where
        A: Acquire<'c, Database = MySql> + Send + 'c,
    {
        let wf = self.into_workflow();
        Box::pin(async move { wf?.insert(target).await.map(BatchId) })
    }

    /// The workflow this batch is (kind `batch`): members are steps `jobs#0..n`, each callback
    /// a step depending on every member. [`enqueue`](Self::enqueue) enqueues exactly this.
    pub fn into_workflow(self) -> Result<Workflow, Error> {
        let mut wf = Workflow::new(self.name);
        wf.kind = "batch";
        let n = self.jobs.len();
        if n > 0 {
            wf = wf.add("jobs", self.jobs, std::iter::empty::<&str>())?;
        }
        let deps: Vec<&str> = if n > 0 { vec!["jobs"] } else { vec![] };
        if let Some(j) = self.on_success {
            wf = wf.add("on_success", vec![j], deps.iter().copied())?;
        }
        if let Some(j) = self.on_complete {
            wf = wf
                .add("on_complete", vec![j], deps.iter().copied())?
                .ignore_failed()
                .ignore_cancelled();
        }
        if wf.steps.is_empty() {
            return Err(WorkflowError::NoSteps {
                workflow: wf.name.clone(),
            }
            .into());
        }
        Ok(wf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(kind: &str) -> NewJob {
        NewJob::new(kind, "q", &serde_json::json!({}), &EnqueueOptions::new()).unwrap()
    }

    #[test]
    fn a_batch_is_members_and_callbacks_on_every_member() {
        let b = Batch {
            name: "import".into(),
            jobs: vec![job("a"), job("a")],
            on_success: Some(job("s")),
            on_complete: Some(job("c")),
        };
        let wf = b.into_workflow().unwrap();
        assert_eq!(wf.kind, "batch");
        assert_eq!(wf.steps[2].name, "on_success");
        assert_eq!(wf.steps[2].deps, vec![0, 1]);
        assert!(!wf.steps[2].ignore_failed);
        assert!(wf.steps[3].ignore_failed && wf.steps[3].ignore_cancelled);
        let empty = Batch::new("nothing").into_workflow().unwrap_err();
        assert!(empty.to_string().contains("has no steps"), "{empty}");
    }
}
