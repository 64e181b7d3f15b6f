//! Flushes the worker's counters to the statistics tables every interval, and keeps the
//! worker's row in `mysqlq_worker` fresh, in one transaction: a failed flush is rolled back
//! whole and its counts go into the next one, never twice.

use std::sync::Arc;

use crate::metrics::CounterSnapshot;
use crate::store;
use crate::worker::{Shared, sleep_or_cancel};

pub(crate) async fn register_worker(s: &Arc<Shared>) -> Result<(), crate::Error> {
    let mut conn = s.db.acquire().await?;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    store::worker_register(
        &mut conn,
        &store::WorkerRow {
            worker_id: &s.worker_id,
            host: host.trim(),
            pid: std::process::id(),
            queues: &s.config.queues.join(","),
            concurrency: u32::try_from(s.config.concurrency).unwrap_or(u32::MAX),
        },
    )
    .await
}

pub(crate) async fn unregister_worker(s: &Arc<Shared>) {
    if let Ok(mut conn) = s.db.acquire().await {
        let _ = store::worker_stopped(&mut conn, &s.worker_id).await;
    }
}

pub(crate) async fn run(s: Arc<Shared>) {
    let mut flushed = CounterSnapshot::default();
    let mut kinds_flushed: std::collections::HashMap<String, crate::metrics::KindStats> =
        std::collections::HashMap::new();
    loop {
        let go_on = sleep_or_cancel(s.config.stats_interval, &s.stop_services).await;
        let now = s.metrics.counters.snapshot();
        let kinds = s.metrics.kinds();
        let delta = now.delta(&flushed);
        let kind_deltas: Vec<(String, crate::metrics::KindStats)> = kinds
            .iter()
            .filter_map(|(k, v)| {
                let before = kinds_flushed.get(k).copied().unwrap_or_default();
                let d = crate::metrics::KindStats {
                    runs: v.runs - before.runs,
                    errors: v.errors - before.errors,
                    total_us: v.total_us - before.total_us,
                    max_us: v.max_us,
                };
                (d.runs > 0).then(|| (k.clone(), d))
            })
            .collect();
        let result = async {
            let mut conn = s.db.acquire().await?;
            store::stats_flush(
                &mut conn,
                &s.worker_id,
                &delta,
                &kind_deltas,
                s.metrics.running(),
            )
            .await
        }
        .await;
        match result {
            Ok(()) => {
                flushed = now;
                kinds_flushed = kinds;
            }
            Err(e) => {
                let m = &s.metrics;
                m.add(&m.counters.db_errors, 1);
                tracing::warn!(error = %crate::worker::write::error_chain(&e), "statistics flush failed (rolled back); its counts go into the next flush")
            }
        }
        if !go_on {
            return;
        }
    }
}
