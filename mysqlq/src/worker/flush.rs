//! The completer's writes of plain completions (not workflow steps) that no claim carried: one
//! statement per batch — one transaction when the worker deletes completed jobs — and, when
//! a row is locked or the batch refused, one write per job, each waited for on its own task so
//! that the others go on; and [`done`]: what a completion write did, counted, and its claims
//! let go of (also for those a claim carried and for step completions).

use std::sync::Arc;

use crate::store::{self, Deleting, GuardedReport, Owned};
use crate::worker::write::{WriteFailed, write_retrying};
use crate::worker::{Key, Shared, WorkerEvent};

/// Writes `batch` (taken), retried through lost connections; see the module docs.
pub(crate) async fn flush(s: &Arc<Shared>, batch: &mut Vec<Key>) {
    let mut keys = std::mem::take(batch);
    let receipts = &s.completer.receipts;
    s.completer.give_back(receipts.repeats(&mut keys));
    let jobs: Vec<Owned> = keys.iter().map(Key::owned).collect();
    let deleting = receipts.plan(&keys);
    let result = write_retrying(s, "complete jobs", true, || {
        complete(s, &jobs, deleting.as_ref())
    })
    .await;
    if result.is_ok() {
        receipts.known(deleting.as_ref(), &keys);
    } else {
        receipts.in_doubt(deleting.as_ref(), &keys);
    }
    match result {
        Ok(report) => done(s, &keys, &report),
        // A locked row is waited for by its own task (as is each job of a refused batch), so
        // that the completer goes on with the others.
        Err(e @ (WriteFailed::Locked(_) | WriteFailed::Refused(_)))
            if keys.len() > 1 || matches!(e, WriteFailed::Locked(_)) =>
        {
            tracing::warn!(
                jobs = keys.len(),
                "completion batch blocked or refused; completing these jobs one by one"
            );
            for key in keys {
                let s = s.clone();
                tokio::spawn(async move {
                    let job = [key.owned()];
                    let one = std::slice::from_ref(&key);
                    let receipts = &s.completer.receipts;
                    let d = receipts.plan(one);
                    match write_retrying(&s, "complete job", false, || {
                        complete(&s, &job, d.as_ref())
                    })
                    .await
                    {
                        Ok(report) => {
                            receipts.known(d.as_ref(), one);
                            done(&s, one, &report);
                        }
                        Err(e) => {
                            tracing::error!(id = key.id.0, error = %e, "completion not written; the lease will bring the job back");
                            receipts.forget(one);
                            s.forget(&key);
                        }
                    }
                });
            }
        }
        Err(e) => {
            tracing::error!(jobs = keys.len(), error = %e, "completions not written; the leases will bring the jobs back");
            receipts.forget(&keys);
            for k in &keys {
                s.forget(k);
            }
        }
    }
}

async fn complete(
    s: &Shared,
    jobs: &[Owned],
    delete: Option<&Deleting>,
) -> Result<GuardedReport, crate::Error> {
    let mut conn = s.db.acquire().await?;
    let m = &s.metrics;
    m.add(&m.counters.completion_flushes, 1);
    store::job_complete(&mut conn, &store::Completing { jobs, delete }).await
}

/// Counts what a completion statement did and lets go of exactly these claims.
pub(crate) fn done(s: &Shared, keys: &[Key], report: &GuardedReport) {
    let m = &s.metrics;
    m.add(
        &m.counters.completions,
        report.done + report.settled.len() as u64,
    );
    if !report.lost.is_empty() {
        m.add(&m.counters.lost, report.lost.len() as u64);
        tracing::warn!(
            jobs = ?report.lost.iter().map(|j| j.id.0).collect::<Vec<_>>(),
            gone = ?report.gone.iter().map(|j| j.id.0).collect::<Vec<_>>(),
            "completion refused: the lease was lost and another worker owns these jobs now (`gone`: their rows were deleted since, by whoever completed them or an operator)"
        );
    }
    let mut by_operator = Vec::new();
    {
        let mut map = s.in_flight();
        for k in keys {
            if let Some(f) = map.remove(k)
                && report.is_cancelled(k.id, &k.token)
            {
                by_operator.push(f.run);
            }
        }
    }
    // Cancelled by an operator before the completion was written: that is the outcome.
    for run in by_operator {
        s.operator_cancelled(run);
    }
    for k in keys {
        s.settled(k);
    }
    for k in keys {
        // Cancelled by an operator before the flush: not completed (the row stays cancelled).
        if !report.is_lost(k.id, &k.token) && !report.is_cancelled(k.id, &k.token) {
            s.emit(WorkerEvent::Completed { id: k.id });
        }
    }
    s.slot_freed.notify_waiters();
}
