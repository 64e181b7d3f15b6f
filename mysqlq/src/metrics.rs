//! Worker counters: in memory, cumulative, rendered for Prometheus, and flushed as per-minute
//! deltas to `mysqlq_stats_minute` / `mysqlq_kind_minute` for `mysqlq-cli stats`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

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

            fn render(&self, out: &mut String, worker: &str) {
                $(
                    let _ = writeln!(out, "# HELP mysqlq_{}_total {}", stringify!($name), $help);
                    let _ = writeln!(out, "# TYPE mysqlq_{}_total counter", stringify!($name));
                    let _ = writeln!(out, "mysqlq_{}_total{{worker=\"{}\"}} {}", stringify!($name), worker, self.$name);
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

    /// The Prometheus text exposition of every metric.
    pub fn render_prometheus(&self) -> String {
        let mut out = String::new();
        let worker = escape_label(&self.worker_id);
        self.counters.snapshot().render(&mut out, &worker);
        let _ = writeln!(
            out,
            "# HELP mysqlq_running Jobs whose handlers are running now."
        );
        let _ = writeln!(out, "# TYPE mysqlq_running gauge");
        let _ = writeln!(
            out,
            "mysqlq_running{{worker=\"{worker}\"}} {}",
            self.running()
        );
        let mut kinds: Vec<(String, KindStats)> = self.kinds().into_iter().collect();
        kinds.sort_by(|a, b| a.0.cmp(&b.0));
        let _ = writeln!(
            out,
            "# HELP mysqlq_job_runs_total Attempts finished, by kind."
        );
        let _ = writeln!(out, "# TYPE mysqlq_job_runs_total counter");
        for (kind, k) in &kinds {
            let _ = writeln!(
                out,
                "mysqlq_job_runs_total{{worker=\"{worker}\",kind=\"{}\"}} {}",
                escape_label(kind),
                k.runs
            );
        }
        let _ = writeln!(
            out,
            "# HELP mysqlq_job_errors_total Attempts that failed, by kind."
        );
        let _ = writeln!(out, "# TYPE mysqlq_job_errors_total counter");
        for (kind, k) in &kinds {
            let _ = writeln!(
                out,
                "mysqlq_job_errors_total{{worker=\"{worker}\",kind=\"{}\"}} {}",
                escape_label(kind),
                k.errors
            );
        }
        let _ = writeln!(
            out,
            "# HELP mysqlq_job_seconds_total Handler time, by kind."
        );
        let _ = writeln!(out, "# TYPE mysqlq_job_seconds_total counter");
        for (kind, k) in &kinds {
            let secs = k.total_us as f64 / 1e6;
            let _ = writeln!(
                out,
                "mysqlq_job_seconds_total{{worker=\"{worker}\",kind=\"{}\"}} {secs}",
                escape_label(kind)
            );
        }
        out
    }
}

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
