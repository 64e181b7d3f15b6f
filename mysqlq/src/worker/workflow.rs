//! The workflow service: settles the dependencies of workflow steps that ended other than by
//! this worker's completion (failed, cancelled by a handler, the reaper or an operator, or
//! completed by a path that does not settle) by each dependent's upstream rule
//! ([`store::workflow::wf_sweep`]), and marks finished workflows. It runs on every worker (its
//! statements are index-backed and idempotent, and it never waits for a lock: a row another
//! transaction holds is passed over and tried again 100 ms later), when this worker recorded a
//! step's failure or cancel, and at least every maintenance interval. A step completed by a handler is settled in its completion's own
//! transaction ([`super::completer`]), not here.

use std::sync::Arc;

use crate::store::workflow::{Swept, wf_finish, wf_sweep};
use crate::worker::{Shared, WorkerEvent};

/// Dependencies settled per statement of a sweep.
const SWEEP_PAGE: u32 = 100;
/// Passes of one sweep at most (each level of an upstream cascade takes one).
const MAX_PASSES: usize = 64;
/// The next sweep after one that passed over held rows.
const BUSY_RETRY: std::time::Duration = std::time::Duration::from_millis(100);
/// Workflows marked finished per round.
const FINISH_PAGE: u32 = 500;

pub(crate) async fn run(s: Arc<Shared>) {
    loop {
        let r = sweep(&s).await;
        // Rows another transaction held were passed over: try them again soon.
        let next = if r.busy > 0 {
            BUSY_RETRY.min(s.config.maintenance_interval)
        } else {
            s.config.maintenance_interval
        };
        tokio::select! {
            () = s.workflow_wake.notified() => {}
            () = tokio::time::sleep(next) => {}
            () = s.stop_services.cancelled() => return,
        }
    }
}

/// One sweep: every ended dependency's edges settled (cascades included), then finished
/// workflows marked. Errors are logged; the next round tries again.
pub(crate) async fn sweep(s: &Shared) -> Swept {
    let mut total = Swept::default();
    let result: Result<(), crate::Error> = async {
        let mut conn = s.db.acquire().await?;
        // Passes over every ended dependency, by id; cancelled dependents are ended
        // dependencies in turn, so a pass that settled something is followed by another.
        for _ in 0..MAX_PASSES {
            let mut after = 0;
            let mut settled = 0;
            loop {
                let (r, next) = wf_sweep(&mut conn, after, SWEEP_PAGE).await?;
                settled += r.deps;
                total.deps += r.deps;
                total.released += r.released;
                total.cancelled += r.cancelled;
                total.errors += r.errors;
                total.busy += r.busy;
                match next {
                    Some(n) => after = n,
                    None => break,
                }
            }
            if settled == 0 {
                break;
            }
        }
        wf_finish(&mut conn, FINISH_PAGE).await?;
        Ok(())
    }
    .await;
    if let Err(e) = result {
        tracing::warn!(worker = %s.worker_id, error = %crate::error_chain(&e), "workflow sweep failed; trying again next round");
    }
    let m = &s.metrics;
    m.add(&m.counters.workflow_released, total.released);
    m.add(&m.counters.workflow_upstream_cancelled, total.cancelled);
    if total.released > 0 {
        crate::wake::wake_local();
    }
    if total.deps > 0 {
        s.emit(WorkerEvent::WorkflowSwept {
            deps: total.deps,
            released: total.released,
            cancelled: total.cancelled,
        });
    }
    total
}
