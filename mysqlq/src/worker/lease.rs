//! Heartbeats: every interval, one statement extends the leases of all jobs this worker
//! holds (token-guarded). A job whose lease was lost is cancelled through its context and its
//! late result is never written over the new owner's state.

use std::sync::Arc;

use crate::CancelReason;
use crate::store::{self, Owned};
use crate::worker::{Shared, sleep_or_cancel};

/// Most jobs per heartbeat statement.
const CHUNK: usize = 1000;

pub(crate) async fn run(s: Arc<Shared>) {
    let every = s.config.heartbeat();
    while sleep_or_cancel(every, &s.stop_services).await {
        run_once(&s).await;
    }
}

/// One round of heartbeats; returns how many jobs were found lost.
pub(crate) async fn run_once(s: &Arc<Shared>) -> usize {
    let owned: Vec<Owned> = s
        .in_flight()
        .iter()
        .map(|(id, f)| Owned {
            id: *id,
            token: f.token.to_string(),
        })
        .collect();
    let mut lost_total = 0;
    for chunk in owned.chunks(CHUNK) {
        let result = async {
            let mut conn = s.pool.acquire().await?;
            store::job_heartbeat(&mut conn, s.config.lease, chunk).await
        }
        .await;
        match result {
            Ok(report) => {
                for id in &report.lost {
                    let entry = s.in_flight().remove(id);
                    if let Some(f) = entry {
                        f.ctx.cancel(CancelReason::LeaseLost);
                        if let Some(a) = &f.abort {
                            a.abort();
                        }
                    }
                }
                if !report.lost.is_empty() {
                    let m = &s.metrics;
                    m.add(&m.counters.lost, report.lost.len() as u64);
                    tracing::warn!(jobs = ?report.lost.iter().map(|j| j.0).collect::<Vec<_>>(), "lease lost: jobs cancelled");
                    lost_total += report.lost.len();
                }
            }
            Err(e) => {
                let m = &s.metrics;
                m.add(&m.counters.db_errors, 1);
                tracing::warn!(error = %crate::worker::executor::error_chain(&e), "heartbeat failed; will retry");
            }
        }
    }
    lost_total
}
