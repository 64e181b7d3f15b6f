//! Growing a workflow at run time: a running step adds steps ([`JobContext::graft`]), e.g. a
//! fan-out whose width it only now knows, or more members of its batch
//! ([`JobContext::batch_add`]). Every step still waiting for the grafter waits for what it
//! added too.

use super::{MAX_STEPS, check_name, new_jobs};
use crate::error::WorkflowError;
use crate::hooks::global_hooks;
use crate::store::workflow::StepRow;
use crate::store::workflow::graft::{Grafted, wf_graft, wf_step_name};
use crate::{CancelReason, EnqueueOptions, Error, Job, JobContext, JobId, NewJob};

/// Steps a running step adds to its workflow ([`JobContext::graft`]). Names are unique within
/// the graft (they may repeat names of the workflow: a batch member adds more `jobs`); a
/// dependency names an earlier step of the graft, or the grafter's own step name (then the new
/// step waits for the grafter to complete).
#[derive(Debug)]
pub struct Graft {
    ctx: JobContext,
    steps: Vec<GraftStep>,
}

/// A name of a graft: (name, its jobs, deps by name, ignore_failed, ignore_cancelled).
type GraftStep = (String, Vec<NewJob>, Vec<String>, bool, bool);

impl JobContext {
    /// Adds steps to this step's workflow: see [`Graft`]. Every step waiting for this one
    /// waits for each added step as well.
    pub fn graft(&self) -> Graft {
        Graft {
            ctx: self.clone(),
            steps: Vec::new(),
        }
    }

    /// Adds members to this job's batch (from a running member): they run at once, and the
    /// batch's callbacks wait for them too (Sidekiq's "jobs added from inside a batch").
    pub fn batch_add(&self) -> Graft {
        self.graft()
    }
}

impl Graft {
    /// A step with no dependencies (it starts as soon as the graft commits).
    pub fn step<J: Job>(self, name: &str, job: J) -> Result<Self, Error> {
        self.step_after_with(name, job, [""; 0], &EnqueueOptions::new())
    }

    /// A step after `deps`: earlier steps of this graft, or the grafter's own step name.
    pub fn step_after<J: Job, S: AsRef<str>>(
        self,
        name: &str,
        job: J,
        deps: impl IntoIterator<Item = S>,
    ) -> Result<Self, Error> {
        self.step_after_with(name, job, deps, &EnqueueOptions::new())
    }

    /// [`step`](Self::step) with enqueue options (queue, priority, attempts, delay, keys, meta).
    /// A dedupe key held by another job refuses the whole graft
    /// ([`WorkflowError::Duplicate`](crate::workflow::WorkflowError::Duplicate), naming the
    /// holder); a retried grafter gets the steps it added before by name, key and all.
    pub fn step_with<J: Job>(self, name: &str, job: J, o: &EnqueueOptions) -> Result<Self, Error> {
        self.step_after_with(name, job, [""; 0], o)
    }

    /// [`step_after`](Self::step_after) with enqueue options.
    pub fn step_after_with<J: Job, S: AsRef<str>>(
        self,
        name: &str,
        job: J,
        deps: impl IntoIterator<Item = S>,
        o: &EnqueueOptions,
    ) -> Result<Self, Error> {
        let deps: Vec<String> = deps.into_iter().map(|d| d.as_ref().to_owned()).collect();
        self.add(name, vec![NewJob::from_job(&job, o)?], &deps)
    }

    /// A fan-out: one step per job, all named `name`, all after `deps`.
    pub fn fan_out<J: Job, S: AsRef<str>>(
        self,
        name: &str,
        jobs: impl IntoIterator<Item = J>,
        deps: impl IntoIterator<Item = S>,
    ) -> Result<Self, Error> {
        let jobs = new_jobs(jobs, &EnqueueOptions::new())?;
        let deps: Vec<String> = deps.into_iter().map(|d| d.as_ref().to_owned()).collect();
        self.add(name, jobs, &deps)
    }

    /// Batch members (from [`JobContext::batch_add`]): steps `jobs`, no dependencies.
    pub fn jobs<J: Job>(self, jobs: impl IntoIterator<Item = J>) -> Result<Self, Error> {
        self.fan_out("jobs", jobs, [""; 0])
    }

    /// The step(s) added last run even when a dependency failed.
    #[must_use]
    pub fn ignore_failed(mut self) -> Self {
        if let Some(s) = self.steps.last_mut() {
            s.3 = true;
        }
        self
    }

    /// The step(s) added last run even when a dependency was cancelled.
    #[must_use]
    pub fn ignore_cancelled(mut self) -> Self {
        if let Some(s) = self.steps.last_mut() {
            s.4 = true;
        }
        self
    }

    fn add<S: AsRef<str>>(
        mut self,
        name: &str,
        jobs: Vec<NewJob>,
        deps: &[S],
    ) -> Result<Self, Error> {
        check_name(name)?;
        if self.steps.iter().any(|s| s.0 == name) {
            return Err(WorkflowError::DuplicateName {
                workflow: "(graft)".to_owned(),
                step: name.to_owned(),
            }
            .into());
        }
        let total: usize = self.steps.iter().map(|s| s.1.len()).sum::<usize>() + jobs.len();
        if total > MAX_STEPS {
            return Err(WorkflowError::TooManySteps {
                workflow: "(graft)".to_owned(),
                steps: total,
                limit: MAX_STEPS,
            }
            .into());
        }
        if jobs.iter().any(|j| j.row.dedupe_replace) {
            return Err(WorkflowError::DedupeReplace {
                step: name.to_owned(),
            }
            .into());
        }
        let deps = deps.iter().map(|d| d.as_ref().to_owned()).collect();
        self.steps.push((name.to_owned(), jobs, deps, false, false));
        Ok(self)
    }

    /// Writes the graft in one transaction, checked against this attempt's claim (lost: nothing
    /// is written, the context is cancelled, an error says so). A later attempt of the grafter
    /// grafting the same names again gets the steps added before, not new ones. Returns the new
    /// steps' job ids, in the order declared.
    pub async fn enqueue(self) -> Result<Vec<JobId>, Error> {
        let ctx = self.ctx;
        let pool = ctx.pool().ok_or_else(|| {
            Error::invalid("graft", "the context has no pool (a detached context)")
        })?;
        if ctx.workflow_raw().is_none() {
            return Err(Error::invalid(
                "graft",
                format!("job {} is not a step of a workflow", ctx.id()),
            ));
        }
        // Closed, not handed back, if this future is dropped before it is done (the handler
        // timed out or was aborted): cut off while its START TRANSACTION is on the wire, the
        // connection would go back to the application's pool inside a transaction the server
        // opened (sqlx counts one as begun only once the reply is read), and the next
        // statements on it would never commit.
        let mut conn = CloseIfCut {
            conn: pool.acquire().await?,
            armed: true,
        };
        let me = wf_step_name(&mut conn, ctx.id()).await?.unwrap_or_default();
        let hooks = global_hooks();
        let mut rows: Vec<StepRow> = Vec::new();
        let mut after_grafter = Vec::new();
        let mut index: Vec<(String, Vec<usize>)> = Vec::new();
        for (name, jobs, deps, ignore_failed, ignore_cancelled) in self.steps {
            let mut dep_ix = Vec::new();
            let mut after_me = false;
            for d in &deps {
                if *d == me {
                    after_me = true;
                } else if let Some((_, ix)) = index.iter().find(|(n, _)| n == d) {
                    dep_ix.extend(ix.iter().copied());
                } else {
                    return Err(WorkflowError::UnknownDep {
                        workflow: "(graft)".to_owned(),
                        step: name.clone(),
                        dep: d.clone(),
                        known: std::iter::once(me.clone())
                            .chain(index.iter().map(|(n, _)| n.clone()))
                            .collect::<Vec<_>>()
                            .join(", "),
                    }
                    .into());
                }
            }
            let first = rows.len();
            for (ordinal, mut job) in jobs.into_iter().enumerate() {
                hooks.enqueue(&mut job).await?;
                rows.push(StepRow {
                    name: name.clone(),
                    ordinal: u32::try_from(ordinal).unwrap_or(u32::MAX),
                    row: job.row,
                    deps: dep_ix.clone(),
                    ignore_failed,
                    ignore_cancelled,
                });
                after_grafter.push(after_me);
            }
            index.push((name, (first..rows.len()).collect()));
        }
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let owned = crate::store::Owned {
            id: ctx.id(),
            token: ctx.claim_token().to_owned(),
        };
        for _ in 0..5 {
            conn.armed = true;
            let r = wf_graft(&mut conn, &owned, &rows, &after_grafter).await;
            // The transaction ended (committed or rolled back): the connection may go back.
            conn.armed = false;
            match r {
                Ok(Grafted::Done(ids)) => {
                    crate::wake::wake_local();
                    return Ok(ids);
                }
                Ok(Grafted::Retry) => {}
                Ok(Grafted::LeaseLost) => {
                    ctx.cancel(CancelReason::LeaseLost);
                    return Err(Error::invalid(
                        "graft",
                        format!(
                            "job {} is no longer owned by this attempt (lease lost, or the job \
                             ended); nothing was added: stop the handler",
                            ctx.id()
                        ),
                    ));
                }
                Ok(Grafted::NotAStep) => {
                    return Err(Error::invalid(
                        "graft",
                        format!("job {} is not a step of a workflow", ctx.id()),
                    ));
                }
                Ok(Grafted::Duplicate(i, holder)) => {
                    return Err(WorkflowError::Duplicate {
                        step: rows[i].name.clone(),
                        holder,
                    }
                    .into());
                }
                Err(e) if crate::store::is_lock_error(&e) => {
                    tokio::time::sleep(std::time::Duration::from_millis(fastrand::u64(1..20)))
                        .await;
                }
                Err(e) => return Err(e),
            }
        }
        Err(Error::invalid(
            "graft",
            "the graft kept losing lock races or the cluster's auto_increment_increment kept changing; try again",
        ))
    }
}

/// A pooled connection closed on drop while `armed` (from its acquire, and around each
/// transaction), handed back to the pool otherwise: see [`Graft::enqueue`].
struct CloseIfCut {
    conn: sqlx::pool::PoolConnection<sqlx::MySql>,
    armed: bool,
}

impl std::ops::Deref for CloseIfCut {
    type Target = sqlx::MySqlConnection;
    fn deref(&self) -> &Self::Target {
        &self.conn
    }
}

impl std::ops::DerefMut for CloseIfCut {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.conn
    }
}

impl Drop for CloseIfCut {
    fn drop(&mut self) {
        if self.armed {
            self.conn.close_on_drop();
        }
    }
}
