//! The leader's queue gauges (`mysqlq_queue_*{queue}`, `mysqlq_rate_limited_jobs`), read from
//! the database with `mysqlq_jobs` ([`super::jobs`]).

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{Labels, QueueGauges, escape_label, help, jobs};

/// How one queue gauge is read from a [`QueueGauges`].
pub(crate) type ReadGauge = fn(&QueueGauges) -> u64;

/// The queue gauges that are counts: name, help text, reading.
pub(crate) const QUEUE_COUNTS: [(&str, &str, ReadGauge); 6] = [
    (
        "mysqlq_rate_limited_jobs",
        "Ready jobs waiting for a rate limit, a global limit or a 429 hold (not for a worker).",
        |g| g.rate_limited,
    ),
    (
        "mysqlq_queue_waiting",
        "Workflow steps waiting for their dependencies.",
        |g| g.waiting,
    ),
    (
        "mysqlq_queue_ready",
        "Jobs ready to run (pending, available_at passed).",
        |g| g.ready,
    ),
    (
        "mysqlq_queue_scheduled",
        "Jobs pending with a future available_at.",
        |g| g.scheduled,
    ),
    (
        "mysqlq_queue_running",
        "Jobs processing (claimed by a worker).",
        |g| g.running,
    ),
    (
        "mysqlq_queue_failed",
        "Jobs failed and not yet pruned.",
        |g| g.failed,
    ),
];

pub(super) fn register_queue_gauges(registry: &mut Registry, queues: &[QueueGauges]) {
    for (name, text, read) in QUEUE_COUNTS {
        let family = Family::<Labels, Gauge>::default();
        for g in queues {
            let n = i64::try_from(read(g)).unwrap_or(i64::MAX);
            family.get_or_create(&queue_labels(g)).set(n);
        }
        registry.register(name, help(text), family);
    }
    let age = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    for g in queues {
        let secs = g.oldest_ready_age.map_or(0.0, |d| d.as_secs_f64());
        age.get_or_create(&queue_labels(g)).set(secs);
    }
    registry.register(
        "mysqlq_queue_oldest_ready_age_seconds",
        help("How long the oldest ready job has waited (0 when none is ready)."),
        age,
    );
    jobs::register(registry, queues);
}

fn queue_labels(g: &QueueGauges) -> Labels {
    vec![("queue".to_owned(), escape_label(&g.queue))]
}
