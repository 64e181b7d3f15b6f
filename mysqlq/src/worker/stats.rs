//! Flushes the worker's counters and latency histograms to the statistics tables every
//! interval, and keeps the worker's row in `mysqlq_worker` fresh, in one transaction: a failed
//! flush is rolled back whole and its counts go into the next one, never twice. An idle worker
//! (only polls since the last flush) flushes every [`IDLE_FLUSH_EVERY`] intervals instead. The
//! worker's row is written at start with its settings ([`config_json`]).

use std::sync::Arc;

use tokio::time::Instant;

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
            config: &config_json(&s.config, s.settled.is_some()).to_string(),
        },
    )
    .await
}

/// `mysqlq_worker.config`: the settings the worker started with, for the workers and queues
/// pages. Per queue it claims from: its concurrency (`null` when it shares the worker's slots)
/// and the queue-wide rate and global limit this worker set at start (absent when it set none);
/// the worker's concurrency, lease (ms), version and whether it runs over Redis Streams.
pub(crate) fn config_json(c: &super::Config, redis: bool) -> serde_json::Value {
    let queues: serde_json::Map<String, serde_json::Value> = c
        .queues
        .iter()
        .map(|q| {
            let mut o = serde_json::Map::new();
            o.insert(
                "concurrency".into(),
                c.queue_concurrency.get(q).copied().into(),
            );
            if let Some(rate) = c.queue_rate.get(q) {
                o.insert("rate".into(), rate.to_string().into());
            }
            if let Some(global) = c.queue_global_limit.get(q) {
                o.insert("global".into(), (*global).into());
            }
            (q.clone(), o.into())
        })
        .collect();
    serde_json::json!({
        "queues": queues,
        "concurrency": c.concurrency,
        "lease_ms": u64::try_from(c.lease.as_millis()).unwrap_or(u64::MAX),
        "version": crate::VERSION,
        "redis": redis,
    })
}

pub(crate) async fn unregister_worker(s: &Arc<Shared>) {
    if let Ok(mut conn) = s.db.acquire().await {
        let _ = store::worker_stopped(&mut conn, &s.worker_id).await;
    }
}

/// Flushes skipped in a row by an idle worker: when only its polls changed (nothing claimed,
/// run or failed, the running count unchanged), it flushes every sixth interval (30 s at the
/// default interval), so that it does not send a transaction every interval to add its empty
/// polls (the counters are kept per minute anyway); its `last_seen_at` is then at most six
/// intervals old.
pub(crate) const IDLE_FLUSH_EVERY: u32 = 6;

/// `true` when `d` holds nothing but polls (and probes, which are polls).
fn only_polls(d: &CounterSnapshot) -> bool {
    let polls = CounterSnapshot {
        polls: d.polls,
        empty_polls: d.empty_polls,
        probes: d.probes,
        ..CounterSnapshot::default()
    };
    *d == polls
}

pub(crate) async fn run(s: Arc<Shared>) {
    let mut flushed = CounterSnapshot::default();
    let mut kinds_flushed: std::collections::HashMap<String, crate::metrics::KindStats> =
        std::collections::HashMap::new();
    let mut last_flush = Instant::now();
    let mut last_running = 0;
    loop {
        let go_on = sleep_or_cancel(s.config.stats_interval, &s.stop_services).await;
        let now = s.metrics.counters.snapshot();
        let kinds = s.metrics.kinds();
        let delta = now.delta(&flushed);
        let running = s.metrics.running();
        if go_on
            && only_polls(&delta)
            && running == last_running
            && last_flush.elapsed() + s.config.stats_interval
                <= s.config.stats_interval * IDLE_FLUSH_EVERY
        {
            continue;
        }
        // Taken only now that the flush is certain: given back below if it fails.
        let latency = s.metrics.latency_take();
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
            let flush = store::StatsFlush {
                counters: &delta,
                kinds: &kind_deltas,
                latency: &latency,
                running,
            };
            store::stats_flush(&mut conn, &s.worker_id, &flush).await
        }
        .await;
        match result {
            Ok(()) => {
                flushed = now;
                kinds_flushed = kinds;
                last_flush = Instant::now();
                last_running = running;
            }
            Err(e) => {
                let m = &s.metrics;
                m.latency_put_back(latency);
                m.add(&m.counters.db_errors, 1);
                tracing::warn!(error = %crate::worker::write::error_chain(&e), "statistics flush failed (rolled back); its counts go into the next flush")
            }
        }
        if !go_on {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_polls_is_true_for_an_idle_delta_alone() {
        let idle = CounterSnapshot {
            polls: 12,
            empty_polls: 12,
            probes: 11,
            ..CounterSnapshot::default()
        };
        assert!(only_polls(&idle));
        assert!(only_polls(&CounterSnapshot::default()));
        for busy in [
            CounterSnapshot { claims: 1, ..idle },
            CounterSnapshot {
                lock_waits: 1,
                ..idle
            },
            CounterSnapshot {
                released: 1,
                ..CounterSnapshot::default()
            },
        ] {
            assert!(!only_polls(&busy), "{busy:?}");
        }
    }
}
