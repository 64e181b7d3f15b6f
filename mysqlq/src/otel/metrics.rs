//! The worker's metrics as OpenTelemetry instruments: the names, labels and help texts of the
//! Prometheus exposition ([`Metrics::render_prometheus`]), read from the same counters by
//! observable instruments, and the two histograms recorded where the Prometheus ones are
//! observed, with the same bucket bounds ([`HISTOGRAM_BUCKETS`]).
//!
//! Counters are observable counters, named without Prometheus's `_total` suffix, which an
//! OpenTelemetry-to-Prometheus exporter adds back (`mysqlq_claims` → `mysqlq_claims_total`);
//! gauges are observable gauges; durations have the unit `s`.

use std::sync::{Arc, Weak};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::Meter;

use crate::metrics::{
    GAUGED, HISTOGRAM_BUCKETS, Metrics, OtelHistograms, QUEUE_COUNTS, QueueGauges, kind_labels,
};

/// Registers `metrics`' instruments with `meter`. The callbacks hold the metrics weakly: they
/// report nothing once the worker is gone. Called once, before the worker starts, so that the
/// histograms see every attempt.
pub(crate) fn mirror(metrics: &Arc<Metrics>, meter: &Meter) {
    let histogram = |name: &'static str, help: &'static str| {
        meter
            .f64_histogram(name)
            .with_description(help)
            .with_unit("s")
            .with_boundaries(HISTOGRAM_BUCKETS.to_vec())
            .build()
    };
    let _ = metrics.otel.set(OtelHistograms {
        run: histogram(
            "mysqlq_job_run_seconds",
            "Handler time of each attempt, by kind",
        ),
        pickup: histogram(
            "mysqlq_job_pickup_seconds",
            "Time from ready (the later of available_at and created_at) to the claim, by kind",
        ),
    });
    worker_instruments(metrics, meter);
    queue_instruments(metrics, meter);
}

/// Reads `metrics` in a callback, when the worker still exists.
fn with<T>(weak: &Weak<Metrics>, f: impl FnOnce(&Metrics) -> T) -> Option<T> {
    weak.upgrade().map(|m| f(&m))
}

fn worker_label(m: &Metrics) -> [KeyValue; 1] {
    [KeyValue::new("worker", m.worker_id.clone())]
}

fn worker_instruments(metrics: &Arc<Metrics>, meter: &Meter) {
    for (i, (name, help, _)) in metrics.counters.snapshot().named().into_iter().enumerate() {
        let weak = Arc::downgrade(metrics);
        meter
            .u64_observable_counter(name)
            .with_description(help.strip_suffix('.').unwrap_or(help))
            .with_callback(move |o| {
                with(&weak, |m| {
                    let value = m.counters.snapshot().named()[i].2;
                    o.observe(value, &worker_label(m));
                });
            })
            .build();
    }
    let weak = Arc::downgrade(metrics);
    meter
        .u64_observable_gauge("mysqlq_running")
        .with_description("Jobs whose handlers are running now")
        .with_callback(move |o| {
            with(&weak, |m| o.observe(m.running(), &worker_label(m)));
        })
        .build();
    let weak = Arc::downgrade(metrics);
    meter
        .u64_observable_gauge("mysqlq_leader")
        .with_description("1 while this worker is the leader, which reports the queue gauges")
        .with_callback(move |o| {
            with(&weak, |m| {
                o.observe(u64::from(m.is_leader()), &worker_label(m))
            });
        })
        .build();
    type ReadKind = fn(&crate::KindStats) -> u64;
    let kinds: [(&'static str, &'static str, ReadKind); 2] = [
        ("mysqlq_job_runs", "Attempts finished, by kind", |k| k.runs),
        ("mysqlq_job_errors", "Attempts that failed, by kind", |k| {
            k.errors
        }),
    ];
    for (name, help, read) in kinds {
        let weak = Arc::downgrade(metrics);
        meter
            .u64_observable_counter(name)
            .with_description(help)
            .with_callback(move |o| {
                with(&weak, |m| {
                    for (kind, k) in m.kinds() {
                        o.observe(read(&k), &kind_labels(&m.worker_id, &kind));
                    }
                });
            })
            .build();
    }
    let weak = Arc::downgrade(metrics);
    meter
        .f64_observable_counter("mysqlq_job_seconds")
        .with_description("Handler time, by kind")
        .with_unit("s")
        .with_callback(move |o| {
            with(&weak, |m| {
                for (kind, k) in m.kinds() {
                    let secs = Duration::from_micros(k.total_us).as_secs_f64();
                    o.observe(secs, &kind_labels(&m.worker_id, &kind));
                }
            });
        })
        .build();
}

/// The leader's gauges: reported only while [`Metrics::queue_gauges`] has a reading.
fn queue_instruments(metrics: &Arc<Metrics>, meter: &Meter) {
    let queue = |g: &QueueGauges| [KeyValue::new("queue", g.queue.clone())];
    for (name, help, read) in QUEUE_COUNTS {
        let weak = Arc::downgrade(metrics);
        meter
            .u64_observable_gauge(name)
            .with_description(help.strip_suffix('.').unwrap_or(help))
            .with_callback(move |o| {
                for g in with(&weak, Metrics::queue_gauges)
                    .flatten()
                    .unwrap_or_default()
                {
                    o.observe(read(&g), &queue(&g));
                }
            })
            .build();
    }
    let weak = Arc::downgrade(metrics);
    meter
        .f64_observable_gauge("mysqlq_queue_oldest_ready_age_seconds")
        .with_description("How long the oldest ready job has waited (0 when none is ready)")
        .with_unit("s")
        .with_callback(move |o| {
            for g in with(&weak, Metrics::queue_gauges)
                .flatten()
                .unwrap_or_default()
            {
                let secs = g.oldest_ready_age.map_or(0.0, |d| d.as_secs_f64());
                o.observe(secs, &queue(&g));
            }
        })
        .build();
    let weak = Arc::downgrade(metrics);
    meter
        .u64_observable_gauge("mysqlq_jobs")
        .with_description(
            "Jobs by queue and operator state: waiting, ready (relayed ones included), \
             rate-limited, scheduled, retrying, running, failed",
        )
        .with_callback(move |o| {
            for g in with(&weak, Metrics::queue_gauges)
                .flatten()
                .unwrap_or_default()
            {
                for state in GAUGED {
                    let n = g.states.get(state).map_or(0, |c| c.n);
                    let labels = [
                        KeyValue::new("queue", g.queue.clone()),
                        KeyValue::new("state", state.as_str()),
                    ];
                    o.observe(n, &labels);
                }
            }
        })
        .build();
    let weak = Arc::downgrade(metrics);
    meter
        .u64_observable_gauge("mysqlq_workflows")
        .with_description("Workflows and batches by kind and state (finished ones until pruned)")
        .with_callback(move |o| {
            for (kind, state, n) in with(&weak, Metrics::workflow_gauges)
                .flatten()
                .unwrap_or_default()
            {
                o.observe(
                    n,
                    &[KeyValue::new("kind", kind), KeyValue::new("state", state)],
                );
            }
        })
        .build();
}
