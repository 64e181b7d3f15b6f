//! Worker counters: in memory, cumulative, rendered for Prometheus, and flushed as per-minute
//! deltas to `mysqlq_stats_minute` / `mysqlq_kind_minute` for `mysqlq-cli stats`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

macro_rules! counters {
    ($($name:ident: $help:literal,)*) => {
        /// Cumulative counters of one worker process.
        #[derive(Debug, Default)]
        pub struct Counters {
            $(#[doc = $help] pub $name: AtomicU64,)*
        }

        /// A copy of [`Counters`] at one moment.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct CounterSnapshot {
            $(#[doc = $help] pub $name: u64,)*
        }

        impl Counters {
            /// Reads every counter.
            pub fn snapshot(&self) -> CounterSnapshot {
                CounterSnapshot { $($name: self.$name.load(Ordering::Relaxed),)* }
            }
        }

        impl CounterSnapshot {
            /// `self - earlier`, counter by counter.
            pub fn delta(&self, earlier: &Self) -> Self {
                Self { $($name: self.$name.saturating_sub(earlier.$name),)* }
            }

            fn register(&self, registry: &mut Registry, worker: &Labels) {
                $(
                    let family = Family::<Labels, Counter>::default();
                    family.get_or_create(worker).inc_by(self.$name);
                    registry.register(concat!("mysqlq_", stringify!($name)), help($help), family);
                )*
            }
        }
    };
}

counters! {
    polls: "Claim queries run.",
    empty_polls: "Claim queries that found no job.",
    claims: "Jobs claimed.",
    completions: "Jobs completed.",
    retries: "Attempts that failed and were scheduled again.",
    failures: "Jobs moved to failed (attempts exhausted or permanent error).",
    snoozes: "Jobs snoozed.",
    cancels: "Jobs cancelled by their handler.",
    lost: "Writes refused because the claim token no longer owned the job (lease lost).",
    panics: "Handlers that panicked.",
    timeouts: "Attempts that ran past their timeout.",
    released: "Jobs handed back to pending at shutdown without consuming an attempt.",
    reaped: "Expired leases recovered by the reaper (to pending or failed).",
    pruned: "Finished rows deleted by the pruner.",
    deadlocks: "Deadlocks (1213) in mysqlq's own transactions, each retried.",
    lock_waits: "Lock wait timeouts (1205) in mysqlq's own transactions, each retried.",
    db_errors: "Other database errors (connection loss, server gone), each retried.",
}

/// Per-kind run statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KindStats {
    /// Attempts finished.
    pub runs: u64,
    /// Attempts that returned an error, panicked or timed out.
    pub errors: u64,
    /// Total handler time, microseconds.
    pub total_us: u64,
    /// Longest handler time, microseconds.
    pub max_us: u64,
}

/// A worker's metrics.
#[derive(Debug)]
pub struct Metrics {
    worker_id: String,
    /// The counters.
    pub counters: Counters,
    running: AtomicU64,
    kinds: Mutex<HashMap<String, KindStats>>,
}

impl Metrics {
    pub(crate) fn new(worker_id: &str) -> Self {
        Self {
            worker_id: worker_id.to_owned(),
            counters: Counters::default(),
            running: AtomicU64::new(0),
            kinds: Mutex::new(HashMap::new()),
        }
    }

    /// Jobs whose handlers are running now.
    pub fn running(&self) -> u64 {
        self.running.load(Ordering::Relaxed)
    }

    pub(crate) fn add(&self, counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn job_started(&self) {
        self.running.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn job_finished(&self, kind: &str, took: Duration, error: bool) {
        self.running.fetch_sub(1, Ordering::Relaxed);
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let mut kinds = self
            .kinds
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let k = kinds.entry(kind.to_owned()).or_default();
        k.runs += 1;
        k.errors += u64::from(error);
        k.total_us = k.total_us.saturating_add(us);
        k.max_us = k.max_us.max(us);
    }

    /// Per-kind statistics so far.
    pub fn kinds(&self) -> HashMap<String, KindStats> {
        self.kinds
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The exposition of every metric in the OpenMetrics text format (which Prometheus reads):
    /// counters as `mysqlq_<name>_total{worker}`, `mysqlq_running{worker}`, and per kind
    /// `mysqlq_job_{runs,errors,seconds}_total{worker,kind}`.
    pub fn render_prometheus(&self) -> String {
        let mut registry = Registry::default();
        let worker: Labels = vec![("worker".to_owned(), escape_label(&self.worker_id))];
        self.counters.snapshot().register(&mut registry, &worker);

        let running = Family::<Labels, Gauge>::default();
        running
            .get_or_create(&worker)
            .set(i64::try_from(self.running()).unwrap_or(i64::MAX));
        registry.register(
            "mysqlq_running",
            help("Jobs whose handlers are running now."),
            running,
        );

        let runs = Family::<Labels, Counter>::default();
        let errors = Family::<Labels, Counter>::default();
        let seconds = Family::<Labels, Counter<f64, AtomicU64>>::default();
        for (kind, k) in self.kinds() {
            let mut labels = worker.clone();
            labels.push(("kind".to_owned(), escape_label(&kind)));
            runs.get_or_create(&labels).inc_by(k.runs);
            errors.get_or_create(&labels).inc_by(k.errors);
            seconds
                .get_or_create(&labels)
                .inc_by(Duration::from_micros(k.total_us).as_secs_f64());
        }
        registry.register("mysqlq_job_runs", help("Attempts finished, by kind."), runs);
        registry.register(
            "mysqlq_job_errors",
            help("Attempts that failed, by kind."),
            errors,
        );
        registry.register(
            "mysqlq_job_seconds",
            help("Handler time, by kind."),
            seconds,
        );

        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &registry);
        out
    }
}

/// The label set of every metric: `worker`, and `kind` for the per-kind ones.
type Labels = Vec<(String, String)>;

/// A help text as the registry wants it: it adds the closing period itself.
fn help(text: &str) -> &str {
    text.strip_suffix('.').unwrap_or(text)
}

/// prometheus-client writes label values as given: quotes, backslashes and newlines are escaped
/// here.
fn escape_label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::new("w\"1");
        m.add(&m.counters.claims, 3);
        m.job_started();
        m.job_finished("send_email", Duration::from_millis(1500), false);
        let text = m.render_prometheus();
        assert!(
            text.contains("mysqlq_claims_total{worker=\"w\\\"1\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("mysqlq_job_seconds_total{worker=\"w\\\"1\",kind=\"send_email\"} 1.5"),
            "{text}"
        );
        assert!(
            text.contains("mysqlq_running{worker=\"w\\\"1\"} 0"),
            "{text}"
        );
        let before = m.counters.snapshot();
        m.add(&m.counters.claims, 2);
        assert_eq!(m.counters.snapshot().delta(&before).claims, 2);
    }
}
