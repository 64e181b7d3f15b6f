//! Batched completion: handlers that returned `Ok` queue their job here; one statement per
//! flush marks them all `completed`, each guarded by its claim token. A flush starts as soon
//! as the previous one ended, so batching adds no waiting: under load a flush carries every
//! completion that arrived during the last one.

use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use crate::store::{self, Owned};
use crate::worker::Shared;

/// Most completions per statement.
const MAX_FLUSH: usize = 1000;

pub(crate) struct Completer {
    tx: mpsc::UnboundedSender<Owned>,
    rx: Mutex<Option<mpsc::UnboundedReceiver<Owned>>>,
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
    pub(crate) fn complete(&self, job: Owned) {
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
    let mut batch: Vec<Owned> = Vec::with_capacity(MAX_FLUSH);
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

async fn flush(s: &Arc<Shared>, batch: &mut Vec<Owned>) {
    let jobs = std::mem::take(batch);
    let report = crate::worker::executor::retry_write(s, "complete jobs", || {
        let pool = s.pool.clone();
        let jobs = &jobs;
        async move {
            let mut conn = pool.acquire().await?;
            store::job_complete_many(&mut conn, jobs).await
        }
    })
    .await;
    let m = &s.metrics;
    if let Some(report) = report {
        m.add(&m.counters.completions, report.done);
        if !report.lost.is_empty() {
            m.add(&m.counters.lost, report.lost.len() as u64);
            tracing::warn!(
                jobs = ?report.lost.iter().map(|j| j.0).collect::<Vec<_>>(),
                "completion refused: lease lost, another worker owns these jobs now"
            );
        }
    }
    {
        let mut map = s.in_flight();
        for j in &jobs {
            map.remove(&j.id);
        }
    }
    s.slot_freed.notify_waiters();
    batch.clear();
}
