//! The worker, one job at a time, in the caller's task: what `mysqlq::testing`'s `drain` and
//! `work_one` run. A worker's shared state made by the builder ([`super::WorkerBuilder`]'s
//! `shared`: settings, registry, state, hooks, the server and the schema checked), the claim of
//! one job with a fresh token (`store::job_claim_next`), the executor's supervisor awaited in
//! place ([`executor::run_here`]: decode, timeout, panic capture, retry decision, attempt
//! history, hooks), the completer's flush ([`completer::flush_now`]), and the lease service
//! while it runs (heartbeats, an operator's cancel). No claim loops, maintenance, statistics
//! or service thread: everything runs on the caller's runtime.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::{self, error::TryRecvError};
use tokio::task::JoinHandle;

use super::{Shared, WorkerBuilder, WorkerEvent, completer, executor, lease, workflow};
use crate::store::{self, ClaimNext, Next};
use crate::{Error, JobId};

/// A worker that runs the jobs it is asked to, one at a time (see the module docs). Stops its
/// lease service when dropped.
pub(crate) struct Inline {
    s: Arc<Shared>,
    services: Vec<JoinHandle<()>>,
    events: broadcast::Receiver<WorkerEvent>,
}

/// One attempt [`Inline::run_next`] ran.
#[derive(Debug, Clone)]
pub(crate) struct Ran {
    pub(crate) id: JobId,
    pub(crate) kind: Option<String>,
    pub(crate) queue: String,
    pub(crate) attempt: u32,
    pub(crate) max_attempts: u32,
    /// What was written: `completed`, `retry`, `snooze`, `fail`, `cancel` (the handler's), or
    /// `cancelled` (an operator's, while it ran); `None` when nothing of this attempt was written
    /// (the claim was lost, or handed back).
    pub(crate) outcome: Option<&'static str>,
    /// The handler panicked.
    pub(crate) panicked: bool,
    /// The handler ran past its timeout.
    pub(crate) timed_out: bool,
}

impl Inline {
    /// Builds the worker's state from `builder` and starts its lease service on this runtime.
    pub(crate) async fn start(builder: WorkerBuilder) -> Result<Self, Error> {
        let app = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::Config("mysqlq::testing must be awaited inside a Tokio runtime".into())
        })?;
        let s = builder.shared(app.clone(), app, None).await?;
        let events = s.events.subscribe();
        let services = vec![
            tokio::spawn(lease::run(s.clone())),
            tokio::spawn(lease::watchdog(s.clone())),
        ];
        Ok(Self {
            s,
            services,
            events,
        })
    }

    /// The queues it serves (those given, or every registered job's).
    pub(crate) fn queues(&self) -> &[String] {
        &self.s.config.queues
    }

    /// The worker's own pool, for reads about the jobs it ran.
    pub(crate) fn db(&self) -> &sqlx::MySqlPool {
        &self.s.db
    }

    /// Claims the job `next` names (with `scheduled`, also one whose time has not come) and runs
    /// it to its end: its outcome is written when this returns. `None` when no job qualifies.
    pub(crate) async fn run_next(
        &mut self,
        next: Next<'_>,
        scheduled: bool,
    ) -> Result<Option<Ran>, Error> {
        let s = &self.s;
        let token = uuid::Uuid::new_v4().to_string();
        let sent = tokio::time::Instant::now();
        let claimed = {
            let mut conn = s.db.acquire().await?;
            let p = ClaimNext {
                next,
                scheduled,
                worker_id: &s.worker_id,
                token: &token,
                lease: s.config.lease,
            };
            store::job_claim_next(&mut conn, &p)
                .await
                .map_err(|f| f.error)?
        };
        let Some((job, queue)) = claimed else {
            return Ok(None);
        };
        let m = &s.metrics;
        m.add(&m.counters.claims, 1);
        let before = m.counters.snapshot();
        let mut ran = Ran {
            id: job.id,
            kind: job.kind.clone(),
            queue: queue.clone(),
            attempt: job.attempt,
            max_attempts: job.max_attempts,
            outcome: None,
            panicked: false,
            timed_out: false,
        };
        let slot = s
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Error::Config("the worker's slots were closed".into()))?;
        let lease_from = job.lease_sent.map_or(sent, tokio::time::Instant::from_std);
        let step = job.workflow.is_some();
        executor::run_here(s, job, &queue, Arc::from(token), slot, lease_from).await;
        completer::flush_now(s).await;
        self.settle(ran.id).await?;
        if step {
            // No sweep service here: apply the dependents' upstream rules now, as a worker
            // does when one of its steps fails or is cancelled.
            workflow::sweep(s).await;
        }
        let after = m.counters.snapshot().delta(&before);
        ran.panicked = after.panics > 0;
        ran.timed_out = after.timeouts > 0;
        ran.outcome = self.outcome_of(ran.id);
        Ok(Some(ran))
    }

    /// Waits until this worker holds no job: the outcome of the last one is written (a
    /// completion the completer hands to a task of its own, when its batch hit a lock, lands
    /// a moment later).
    async fn settle(&self, id: JobId) -> Result<(), Error> {
        let s = &self.s;
        let limit = s.config.lease;
        let waited = tokio::time::timeout(limit, async {
            loop {
                let freed = s.slot_freed.notified();
                tokio::pin!(freed);
                freed.as_mut().enable();
                if s.in_flight().is_empty() {
                    return;
                }
                tokio::select! {
                    () = freed => {}
                    () = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
            }
        })
        .await;
        waited.map_err(|_| {
            Error::invalid(
                "drain",
                format!(
                    "the outcome of job {id} was not written within {} (is a transaction of the \
                     test holding its row locked?)",
                    crate::backoff::format_duration(limit)
                ),
            )
        })
    }

    /// The outcome the worker's events report for job `id` since the last call.
    fn outcome_of(&mut self, id: JobId) -> Option<&'static str> {
        let mut outcome = None;
        loop {
            match self.events.try_recv() {
                Ok(WorkerEvent::Completed { id: i }) if i == id => outcome = Some("completed"),
                Ok(WorkerEvent::Recorded { id: i, outcome: o }) if i == id => outcome = Some(o),
                Ok(WorkerEvent::CancelledByOperator { id: i }) if i == id => {
                    outcome = Some("cancelled");
                }
                Ok(_) | Err(TryRecvError::Lagged(_)) => {}
                Err(TryRecvError::Empty | TryRecvError::Closed) => return outcome,
            }
        }
    }

    /// Stops the lease service and closes the worker's pool.
    pub(crate) async fn stop(mut self) {
        self.s.stop_services.cancel();
        for t in std::mem::take(&mut self.services) {
            let _ = t.await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), self.s.db.close()).await;
    }
}

impl Drop for Inline {
    fn drop(&mut self) {
        self.s.stop_services.cancel();
    }
}
