//! Batched completion: handlers that returned `Ok` queue their job here; one statement per
//! flush marks them all `completed`, each guarded by its claim token. A flush starts as soon
//! as the previous one ended, so batching adds no waiting: under load a flush carries every
//! completion that arrived during the last one.
//!
//! A flush that hits a lock wait (an application transaction holds a lock on one of the rows)
//! or an error the server keeps refusing falls back to completing each job on its own, so one
//! blocked row never stalls the others. A completion whose COMMIT reply was lost is retried and
//! recognised as already written (the token stays on the row), never reported as lost.

use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use crate::store::{self, GuardedReport, Owned};
use crate::worker::write::{WriteFailed, write_retrying};
use crate::worker::{Key, Shared, WorkerEvent};

/// Most completions per statement.
const MAX_FLUSH: usize = 1000;

pub(crate) struct Completer {
    tx: mpsc::UnboundedSender<Key>,
    rx: Mutex<Option<mpsc::UnboundedReceiver<Key>>>,
}

impl Completer {
    pub(crate) fn new() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            tx,
            rx: Mutex::new(Some(rx)),
        }
    }

    /// Queues a completion (the handler has returned `Ok`).
    pub(crate) fn complete(&self, job: Key) {
        // The receiver lives as long as the worker; a send after it stopped is a job the lease
        // will bring back.
        let _ = self.tx.send(job);
    }
}

pub(crate) async fn run(s: Arc<Shared>) {
    let Some(mut rx) = s
        .completer
        .rx
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take()
    else {
        return;
    };
    let mut batch: Vec<Key> = Vec::with_capacity(MAX_FLUSH);
    loop {
        let first = tokio::select! {
            j = rx.recv() => j,
            () = s.stop_services.cancelled() => None,
        };
        match first {
            Some(j) => batch.push(j),
            None => {
                // Stopping: write whatever is still queued, then end.
                while let Ok(j) = rx.try_recv() {
                    batch.push(j);
                }
                if !batch.is_empty() {
                    flush(&s, &mut batch).await;
                }
                return;
            }
        }
        // Let the handlers finishing right now queue their completions too (a few scheduler
        // turns, no timer): one statement and one fsync then cover them all.
        for _ in 0..4 {
            while batch.len() < MAX_FLUSH {
                match rx.try_recv() {
                    Ok(j) => batch.push(j),
                    Err(_) => break,
                }
            }
            if batch.len() >= MAX_FLUSH {
                break;
            }
            tokio::task::yield_now().await;
        }
        flush(&s, &mut batch).await;
    }
}

async fn flush(s: &Arc<Shared>, batch: &mut Vec<Key>) {
    let keys = std::mem::take(batch);
    let jobs: Vec<Owned> = keys.iter().map(Key::owned).collect();
    let result = write_retrying(s, "complete jobs", keys.len() > 1, || complete(s, &jobs)).await;
    match result {
        Ok(report) => done(s, &keys, &report),
        Err(WriteFailed::Locked(_) | WriteFailed::Refused(_)) if keys.len() > 1 => {
            tracing::warn!(
                jobs = keys.len(),
                "completion batch blocked or refused; completing these jobs one by one"
            );
            for key in keys {
                let s = s.clone();
                tokio::spawn(async move {
                    let job = [key.owned()];
                    match write_retrying(&s, "complete job", false, || complete(&s, &job)).await {
                        Ok(report) => done(&s, std::slice::from_ref(&key), &report),
                        Err(e) => {
                            tracing::error!(id = key.id.0, error = %e, "completion not written; the lease will bring the job back");
                            s.forget(&key);
                        }
                    }
                });
            }
        }
        Err(e) => {
            tracing::error!(jobs = keys.len(), error = %e, "completions not written; the leases will bring the jobs back");
            for k in &keys {
                s.forget(k);
            }
        }
    }
}

async fn complete(s: &Shared, jobs: &[Owned]) -> Result<GuardedReport, crate::Error> {
    let mut conn = s.db.acquire().await?;
    let m = &s.metrics;
    m.add(&m.counters.completion_flushes, 1);
    store::job_complete_many(&mut conn, jobs).await
}

/// Counts what a completion statement did and lets go of exactly these claims.
fn done(s: &Shared, keys: &[Key], report: &GuardedReport) {
    let m = &s.metrics;
    m.add(
        &m.counters.completions,
        report.done + report.settled.len() as u64,
    );
    if !report.lost.is_empty() {
        m.add(&m.counters.lost, report.lost.len() as u64);
        tracing::warn!(
            jobs = ?report.lost.iter().map(|j| j.0).collect::<Vec<_>>(),
            "completion refused: the lease was lost and another worker owns these jobs now"
        );
    }
    {
        let mut map = s.in_flight();
        for k in keys {
            map.remove(k);
        }
    }
    for k in keys {
        s.settled(k);
    }
    for k in keys {
        // Cancelled by an operator before the flush: not completed (the row stays cancelled).
        if !report.lost.contains(&k.id) && !report.cancelled.contains(&k.id) {
            s.emit(WorkerEvent::Completed { id: k.id });
        }
    }
    s.slot_freed.notify_waiters();
}
