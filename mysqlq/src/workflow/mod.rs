//! Workflows and batches: jobs that wait for other jobs, enqueued all at once in the caller's
//! transaction (`docs/workflows.md`).
//!
//! ```no_run
//! # use mysqlq::{JobContext, JobError};
//! # #[mysqlq::job] async fn charge_card(order_id: u64) -> Result<(), JobError> { Ok(()) }
//! # #[mysqlq::job] async fn reserve_stock(order_id: u64) -> Result<(), JobError> { Ok(()) }
//! # #[mysqlq::job] async fn send_receipt(order_id: u64) -> Result<(), JobError> { Ok(()) }
//! # #[mysqlq::job] async fn ship(order_id: u64) -> Result<(), JobError> { Ok(()) }
//! use mysqlq::workflow::Workflow;
//!
//! # async fn place(pool: sqlx::MySqlPool, order_id: u64) -> Result<(), Box<dyn std::error::Error>> {
//! let mut tx = pool.begin().await?;
//! let wf = Workflow::new("checkout")
//!     .step("charge", ChargeCard { order_id })?
//!     .step_after("reserve", ReserveStock { order_id }, ["charge"])?
//!     .step_after("receipt", SendReceipt { order_id }, ["charge"])?
//!     .step_after("ship", Ship { order_id }, ["reserve", "receipt"])?;
//! let id = wf.enqueue(&mut tx).await?; // all steps or none, with the caller's rows
//! tx.commit().await?;
//! # let _ = id; Ok(()) }
//! ```
//!
//! A step is a job row. A step with dependencies waits (state `waiting`, never claimed) until
//! every dependency has completed; the transaction that records the completion of its last
//! dependency makes it `pending`, exactly once, also when two dependencies complete at the same
//! instant on two workers. When a dependency fails or is cancelled, its dependents are cancelled
//! ("upstream \`charge\` failed"), unless they were declared with
//! [`ignore_failed`](Workflow::ignore_failed) / [`ignore_cancelled`](Workflow::ignore_cancelled);
//! retrying the failed dependency (`failed retry`, [`crate::admin::Admin::retry_failed`]) brings
//! them back. A [`Batch`] is a workflow of independent jobs with callbacks.

use std::collections::HashMap;
use std::fmt;

use futures_util::future::BoxFuture;
use sqlx::{Acquire, Connection as _, MySql};

mod batch;
mod graft;
mod results;

pub use crate::error::WorkflowError;
pub use batch::Batch;
pub use graft::Graft;
pub use results::{BatchCounts, MAX_RESULT_BYTES};

use crate::hooks::global_hooks;
use crate::store::workflow::{StepRow, WfInserted, wf_insert};
use crate::{EnqueueOptions, Error, Job, NewJob};

/// Most steps in one workflow or batch.
pub const MAX_STEPS: usize = 100_000;
/// Longest step or workflow name, in characters.
pub const MAX_NAME: usize = 128;

/// A workflow's id (`mysqlq_workflow.id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct WorkflowId(pub u64);

impl fmt::Display for WorkflowId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A batch's id (a batch is a workflow: same id space).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct BatchId(pub u64);

impl fmt::Display for BatchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// One declared step.
#[derive(Debug, Clone)]
struct Step {
    name: String,
    ordinal: u32,
    job: NewJob,
    deps: Vec<usize>,
    ignore_failed: bool,
    ignore_cancelled: bool,
}

/// A graph of jobs, built step by step (each may depend only on steps declared before it, so it
/// has no cycle), then enqueued at once with [`Workflow::enqueue`].
#[derive(Debug, Clone)]
pub struct Workflow {
    name: String,
    kind: &'static str,
    steps: Vec<Step>,
    /// Name → the indexes of its steps (several for a fan-out).
    names: HashMap<String, Vec<usize>>,
    /// Steps added by the last call (what `ignore_*` applies to).
    last: std::ops::Range<usize>,
}

/// The rows of typed jobs with the same options (fan-outs, batch members).
fn new_jobs<J: Job>(
    jobs: impl IntoIterator<Item = J>,
    o: &EnqueueOptions,
) -> Result<Vec<NewJob>, Error> {
    jobs.into_iter().map(|j| NewJob::from_job(&j, o)).collect()
}

fn check_name(name: &str) -> Result<(), Error> {
    if name.is_empty() || name.chars().count() > MAX_NAME || name.contains('#') {
        return Err(WorkflowError::BadName {
            name: name.to_owned(),
            max: MAX_NAME,
        }
        .into());
    }
    Ok(())
}

impl Workflow {
    /// An empty workflow called `name` (shown by `workflow list`; need not be unique).
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            kind: "workflow",
            steps: Vec::new(),
            names: HashMap::new(),
            last: 0..0,
        }
    }

    /// A step with no dependencies: it starts as soon as the workflow is committed.
    pub fn step<J: Job>(self, name: &str, job: J) -> Result<Self, Error> {
        self.step_after_with(
            name,
            job,
            std::iter::empty::<&str>(),
            &EnqueueOptions::new(),
        )
    }

    /// A step that starts when every step in `deps` has completed.
    pub fn step_after<J: Job, S: AsRef<str>>(
        self,
        name: &str,
        job: J,
        deps: impl IntoIterator<Item = S>,
    ) -> Result<Self, Error> {
        self.step_after_with(name, job, deps, &EnqueueOptions::new())
    }

    /// [`step`](Self::step) with enqueue options (queue, priority, attempts, delay, keys, meta).
    pub fn step_with<J: Job>(self, name: &str, job: J, o: &EnqueueOptions) -> Result<Self, Error> {
        self.step_after_with(name, job, std::iter::empty::<&str>(), o)
    }

    /// [`step_after`](Self::step_after) with enqueue options. A delay counts from the enqueue;
    /// the step never runs before its dependencies completed.
    pub fn step_after_with<J: Job, S: AsRef<str>>(
        self,
        name: &str,
        job: J,
        deps: impl IntoIterator<Item = S>,
        o: &EnqueueOptions,
    ) -> Result<Self, Error> {
        let job = NewJob::from_job(&job, o)?;
        self.add(name, vec![job], deps)
    }

    /// An untyped step (tools, scripts): a [`NewJob`] by kind name and payload.
    pub fn step_job<S: AsRef<str>>(
        self,
        name: &str,
        job: NewJob,
        deps: impl IntoIterator<Item = S>,
    ) -> Result<Self, Error> {
        self.add(name, vec![job], deps)
    }

    /// A fan-out: one step per job, all named `name` (`name#0`, `name#1`, … in listings), all
    /// after `deps`. A step depending on `name` waits for every one of them.
    pub fn fan_out<J: Job, S: AsRef<str>>(
        self,
        name: &str,
        jobs: impl IntoIterator<Item = J>,
        deps: impl IntoIterator<Item = S>,
    ) -> Result<Self, Error> {
        let jobs = new_jobs(jobs, &EnqueueOptions::new())?;
        self.add(name, jobs, deps)
    }

    /// The step(s) added last run even when a dependency **failed** (instead of being cancelled).
    #[must_use]
    pub fn ignore_failed(mut self) -> Self {
        for s in &mut self.steps[self.last.clone()] {
            s.ignore_failed = true;
        }
        self
    }

    /// The step(s) added last run even when a dependency was **cancelled**.
    #[must_use]
    pub fn ignore_cancelled(mut self) -> Self {
        for s in &mut self.steps[self.last.clone()] {
            s.ignore_cancelled = true;
        }
        self
    }

    fn add<S: AsRef<str>>(
        mut self,
        name: &str,
        jobs: Vec<NewJob>,
        deps: impl IntoIterator<Item = S>,
    ) -> Result<Self, Error> {
        check_name(name)?;
        if self.names.contains_key(name) {
            return Err(WorkflowError::DuplicateName {
                workflow: self.name.clone(),
                step: name.to_owned(),
            }
            .into());
        }
        let mut dep_ids = Vec::new();
        for d in deps {
            let d = d.as_ref();
            if d == name {
                return Err(WorkflowError::Cycle {
                    step: name.to_owned(),
                }
                .into());
            }
            let Some(ix) = self.names.get(d) else {
                let mut known: Vec<&str> = self.names.keys().map(String::as_str).collect();
                known.sort_unstable();
                return Err(WorkflowError::UnknownDep {
                    workflow: self.name.clone(),
                    step: name.to_owned(),
                    dep: d.to_owned(),
                    known: if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    },
                }
                .into());
            };
            dep_ids.extend(ix.iter().copied());
        }
        dep_ids.sort_unstable();
        dep_ids.dedup();
        if self.steps.len() + jobs.len() > MAX_STEPS {
            return Err(WorkflowError::TooManySteps {
                workflow: self.name.clone(),
                steps: self.steps.len() + jobs.len(),
                limit: MAX_STEPS,
            }
            .into());
        }
        let first = self.steps.len();
        for (ordinal, job) in jobs.into_iter().enumerate() {
            if job.row.dedupe_replace {
                return Err(WorkflowError::DedupeReplace {
                    step: name.to_owned(),
                }
                .into());
            }
            self.steps.push(Step {
                name: name.to_owned(),
                ordinal: u32::try_from(ordinal).unwrap_or(u32::MAX),
                job,
                deps: dep_ids.clone(),
                ignore_failed: false,
                ignore_cancelled: false,
            });
        }
        self.names
            .insert(name.to_owned(), (first..self.steps.len()).collect());
        self.last = first..self.steps.len();
        Ok(self)
    }

    /// How many steps (a fan-out counts each job).
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// `true` with no step yet.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// Enqueues every step through `target` — `&mut tx` (the caller's transaction: all steps
    /// commit or roll back with it), `&pool` or `&mut conn` — and returns the workflow's id. A
    /// held dedupe key on a step refuses the whole workflow ([`WorkflowError::Duplicate`]).
    pub fn enqueue<'c, A>(self, target: A) -> BoxFuture<'c, Result<WorkflowId, Error>>
    where
        A: Acquire<'c, Database = MySql> + Send + 'c,
    {
        Box::pin(async move { self.insert(target).await.map(WorkflowId) })
    }

    async fn insert<'c, A>(self, target: A) -> Result<u64, Error>
    where
        A: Acquire<'c, Database = MySql> + Send + 'c,
    {
        if self.steps.is_empty() && self.kind == "workflow" {
            return Err(WorkflowError::NoSteps {
                workflow: self.name.clone(),
            }
            .into());
        }
        if self.name.is_empty() || self.name.chars().count() > MAX_NAME {
            return Err(WorkflowError::BadName {
                name: self.name.clone(),
                max: MAX_NAME,
            }
            .into());
        }
        let hooks = global_hooks();
        let mut rows = Vec::with_capacity(self.steps.len());
        for s in self.steps {
            let mut job = s.job;
            hooks.enqueue(&mut job).await?;
            rows.push(StepRow {
                name: s.name,
                ordinal: s.ordinal,
                row: job.row,
                deps: s.deps,
                ignore_failed: s.ignore_failed,
                ignore_cancelled: s.ignore_cancelled,
            });
        }
        let mut conn = target.acquire().await?;
        let owned = !conn.is_in_transaction();
        let mut tries = 0;
        let id = loop {
            tries += 1;
            // `begin` on a connection already in a transaction makes a savepoint.
            let mut tx = sqlx::Connection::begin(&mut *conn).await?;
            match wf_insert(&mut tx, self.kind, &self.name, &rows).await {
                Ok(WfInserted::Done(id, _)) => {
                    tx.commit().await?;
                    break id;
                }
                Ok(WfInserted::Duplicate { step, holder }) => {
                    drop(tx);
                    let s = &rows[step];
                    // A fan-out's steps share a name: `resize#3` says which (as the sweep's
                    // "upstream" reasons do).
                    let step = if rows.iter().filter(|r| r.name == s.name).count() > 1 {
                        format!("{}#{}", s.name, s.ordinal)
                    } else {
                        s.name.clone()
                    };
                    return Err(WorkflowError::Duplicate { step, holder }.into());
                }
                Ok(WfInserted::Retry) if tries < 5 => drop(tx),
                Ok(WfInserted::Retry) => {
                    return Err(Error::invalid(
                        "workflow enqueue",
                        "the cluster's auto_increment_increment kept changing during the call; try again",
                    ));
                }
                Err(e) if owned && tries < 5 && crate::store::is_lock_error(&e) => {
                    drop(tx);
                    tokio::time::sleep(std::time::Duration::from_millis(fastrand::u64(1..20)))
                        .await;
                }
                Err(e) => return Err(e),
            }
        };
        crate::wake::wake_local();
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(kind: &str) -> NewJob {
        NewJob::new(kind, "q", &serde_json::json!({}), &EnqueueOptions::new()).unwrap()
    }

    fn err(r: Result<Workflow, Error>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn bad_graphs_are_refused_with_what_to_fix() {
        let wf = Workflow::new("checkout")
            .step_job("charge", job("a"), [""; 0])
            .unwrap();
        let e = err(wf.clone().step_job("charge", job("b"), [""; 0]));
        assert!(e.contains("step `charge` is declared twice"), "{e}");
        let e = err(wf.clone().step_job("ship", job("b"), ["reciept"]));
        assert!(
            e.contains("depends on `reciept`") && e.contains("known: charge"),
            "{e}"
        );
        let e = err(wf.clone().step_job("loop", job("b"), ["loop"]));
        assert!(e.contains("depends on itself"), "{e}");
        let e = err(wf.clone().step_job("a#1", job("b"), [""; 0]));
        assert!(e.contains("invalid name `a#1`"), "{e}");
        let keyed = NewJob::new(
            "k",
            "q",
            &serde_json::json!({}),
            &EnqueueOptions::new().dedupe_key("x"),
        )
        .unwrap();
        // A waiting step holds its key (migration 8): allowed with dependencies too.
        assert!(
            wf.clone()
                .step_job("ship", keyed.clone(), ["charge"])
                .is_ok()
        );
        assert!(wf.clone().step_job("other", keyed, [""; 0]).is_ok());
        let replace = NewJob::new(
            "k",
            "q",
            &serde_json::json!({}),
            &EnqueueOptions::new().dedupe_key("x").dedupe_replace(),
        )
        .unwrap();
        let e = err(wf.step_job("r", replace, [""; 0]));
        assert!(e.contains("dedupe_replace"), "{e}");
    }

    #[test]
    fn a_fan_out_is_one_name_and_its_dependents_wait_for_all() {
        let wf = Workflow::new("w")
            .step_job("root", job("a"), [""; 0])
            .unwrap()
            .add("leaf", vec![job("b"), job("b"), job("b")], ["root"])
            .unwrap()
            .step_job("fanin", job("c"), ["leaf"])
            .unwrap()
            .ignore_failed();
        assert_eq!(wf.len(), 5);
        assert_eq!(wf.steps[4].deps, vec![1, 2, 3]);
        assert!(wf.steps[4].ignore_failed && !wf.steps[3].ignore_failed);
        assert_eq!(
            wf.steps[1..4].iter().map(|s| s.ordinal).collect::<Vec<_>>(),
            [0, 1, 2]
        );
    }
}
