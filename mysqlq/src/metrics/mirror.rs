//! The OpenTelemetry histograms (feature `otel`) that [`Metrics`](super::Metrics) records beside
//! its Prometheus ones, where they are observed; `crate::otel` builds them and registers the
//! other instruments.

use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::Histogram;

/// The two histograms, recorded by [`Metrics`](super::Metrics) beside its Prometheus ones.
#[derive(Debug)]
pub(crate) struct OtelHistograms {
    pub(crate) run: Histogram<f64>,
    pub(crate) pickup: Histogram<f64>,
}

impl OtelHistograms {
    /// An attempt of `kind` ran for `took` (`mysqlq_job_run_seconds`).
    pub(crate) fn run(&self, worker: &str, kind: &str, took: Duration) {
        self.run
            .record(took.as_secs_f64(), &kind_labels(worker, kind));
    }

    /// A job of `kind` waited `waited` from ready to its start (`mysqlq_job_pickup_seconds`).
    pub(crate) fn pickup(&self, worker: &str, kind: &str, waited: Duration) {
        self.pickup
            .record(waited.as_secs_f64(), &kind_labels(worker, kind));
    }
}

/// The labels of a per-kind series, unescaped: `worker` and `kind`.
pub(crate) fn kind_labels(worker: &str, kind: &str) -> [KeyValue; 2] {
    [
        KeyValue::new("worker", worker.to_owned()),
        KeyValue::new("kind", kind.to_owned()),
    ]
}
