//! Worker counters: in memory, cumulative, rendered for Prometheus, and flushed as per-minute
//! deltas to `mysqlq_stats_minute` / `mysqlq_kind_minute` for `mysqlq-cli stats`; per-kind
//! histograms of run time and pickup latency; the same latencies by queue and kind as log-scale
//! buckets for `mysqlq_run_minute` ([`crate::latency`]); and the leader's queue gauges.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::latency::{LatencyBook, LatencyDeltas, Series};
use crate::state::StateCounts;

mod jobs;
#[cfg(feature = "otel")]
mod mirror;
mod queues;
#[cfg(feature = "otel")]
pub(crate) use jobs::GAUGED;
#[cfg(feature = "otel")]
pub(crate) use mirror::{OtelHistograms, kind_labels};
#[cfg(feature = "otel")]
pub(crate) use queues::QUEUE_COUNTS;
use queues::register_queue_gauges;

/// The one kind label of every job kind the worker's binary does not register.
pub(crate) const UNREGISTERED_KIND: &str = "(unregistered)";

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

            /// Every counter as (`mysqlq_<name>`, help text, value), in declaration order.
            #[cfg_attr(not(feature = "otel"), allow(dead_code))]
            pub(crate) fn named(&self) -> Vec<(&'static str, &'static str, u64)> {
                vec![$((concat!("mysqlq_", stringify!($name)), $help, self.$name),)*]
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
    polls: "Polls for work: claim transactions, and the ready probes of idle claim loops.",
    empty_polls: "Polls that found no job.",
    probes: "Ready probes of idle claim loops (one index-only statement; also counted in polls).",
    claims: "Jobs claimed.",
    completions: "Jobs completed.",
    completion_flushes: "Statements that wrote completions, alone or inside the next claim's transaction.",
    piggybacked: "Completions written inside a claim's transaction (no commit of their own).",
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
    workflow_released: "Workflow steps released (waiting -> pending, or straight to processing when handed off) by this worker's settlements and sweeps.",
    workflow_upstream_cancelled: "Workflow steps cancelled because a dependency failed or was cancelled.",
    workflow_settle_deferred: "Step completions written without their settlement because a gate or dependent they settle was held by another transaction; settled by a follow-up transaction a moment later.",
    workflow_handed_off: "Released workflow steps claimed for the worker in the transaction that released them (no claim of their own).",
    rate_admitted: "Jobs admitted by their rate key's limit (claimed by a claim that decided the key).",
    rate_limited: "Attempts whose handler said the service rate-limits it (JobError::rate_limited): key held, attempt given back.",
    rate_late_starts: "Rate-admitted jobs whose handler could not start within the decision's slack: not run, handed back with their attempt.",
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

/// One queue's gauges, read by the leader from the database (`mysqlq_queue_*` in
/// [`Metrics::render_prometheus`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueGauges {
    /// The queue.
    pub queue: String,
    /// Workflow steps `waiting` for their dependencies.
    pub waiting: u64,
    /// Jobs `pending` whose `available_at` has passed.
    pub ready: u64,
    /// Jobs `pending` with a future `available_at` (delayed, or waiting for a retry).
    pub scheduled: u64,
    /// Jobs `processing` (claimed by a worker).
    pub running: u64,
    /// Of the ready jobs, those that wait for a rate limit, a global limit or a 429 hold, not
    /// for a worker (`docs/rate-limits.md`).
    pub rate_limited: u64,
    /// Jobs `failed` (kept until pruned).
    pub failed: u64,
    /// How long the oldest ready job has been ready (since its `available_at`); `None` when
    /// none is ready.
    pub oldest_ready_age: Option<Duration>,
    /// Its jobs by operator state (`mysqlq_jobs{queue,state}`; `failed` exact, `completed` and
    /// `cancelled` not counted).
    pub states: StateCounts,
}

/// Bucket bounds, in seconds, of the run-time and pickup-latency histograms: 5 ms to 30 min.
pub const HISTOGRAM_BUCKETS: [f64; 16] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1800.0,
];

type Histograms = Family<Labels, Histogram, fn() -> Histogram>;

fn new_histogram() -> Histogram {
    Histogram::new(HISTOGRAM_BUCKETS)
}

/// The leader's last reading of the queue gauges, and until when it may be shown.
#[derive(Debug)]
struct GaugeReading {
    queues: Vec<QueueGauges>,
    /// Workflows and batches by (kind, state).
    workflows: Vec<(String, String, u64)>,
    taken_at: Instant,
    valid_until: Instant,
}

/// A worker's metrics.
#[derive(Debug)]
pub struct Metrics {
    pub(crate) worker_id: String,
    /// The counters.
    pub counters: Counters,
    running: AtomicU64,
    kinds: Mutex<HashMap<String, KindStats>>,
    run_seconds: Histograms,
    pickup_seconds: Histograms,
    /// Run and pickup latency by queue and kind since the last statistics flush.
    latency: Mutex<LatencyBook>,
    leader: std::sync::atomic::AtomicBool,
    gauges: Mutex<Option<GaugeReading>>,
    /// The OpenTelemetry histograms mirroring `run_seconds` and `pickup_seconds`.
    #[cfg(feature = "otel")]
    pub(crate) otel: std::sync::OnceLock<OtelHistograms>,
}

impl Metrics {
    pub(crate) fn new(worker_id: &str) -> Self {
        Self {
            worker_id: worker_id.to_owned(),
            counters: Counters::default(),
            running: AtomicU64::new(0),
            kinds: Mutex::new(HashMap::new()),
            run_seconds: Family::new_with_constructor(new_histogram),
            pickup_seconds: Family::new_with_constructor(new_histogram),
            latency: Mutex::new(LatencyBook::default()),
            leader: std::sync::atomic::AtomicBool::new(false),
            gauges: Mutex::new(None),
            #[cfg(feature = "otel")]
            otel: std::sync::OnceLock::new(),
        }
    }

    /// `true` while this worker holds the leader lease (as of its last maintenance round).
    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::Relaxed)
    }

    /// Records the outcome of a leader election; a worker that is not the leader shows no queue
    /// gauges (the new leader reports them).
    pub(crate) fn set_leader(&self, leader: bool) {
        self.leader.store(leader, Ordering::Relaxed);
        if !leader {
            *self.gauge_reading() = None;
        }
    }

    /// The leader's queue gauges, as last read; `None` on a worker that is not the leader, or
    /// when the last reading is older than its validity (the leader could not read them).
    pub fn queue_gauges(&self) -> Option<Vec<QueueGauges>> {
        self.gauge_reading()
            .as_ref()
            .filter(|g| Instant::now() < g.valid_until)
            .map(|g| g.queues.clone())
    }

    /// The leader's count of workflows and batches by `(kind, state)`, as last read with the
    /// queue gauges (`mysqlq_workflows{kind,state}`); `None` as for [`queue_gauges`](Self::queue_gauges).
    pub fn workflow_gauges(&self) -> Option<Vec<(String, String, u64)>> {
        self.gauge_reading()
            .as_ref()
            .filter(|g| Instant::now() < g.valid_until)
            .map(|g| g.workflows.clone())
    }

    /// Stores a reading of the queue gauges, shown for `valid_for`.
    pub(crate) fn set_queue_gauges(
        &self,
        queues: Vec<QueueGauges>,
        workflows: Vec<(String, String, u64)>,
        valid_for: Duration,
    ) {
        let now = Instant::now();
        *self.gauge_reading() = Some(GaugeReading {
            queues,
            workflows,
            taken_at: now,
            valid_until: now + valid_for,
        });
    }

    /// `true` when no reading of the queue gauges is younger than `every`.
    pub(crate) fn queue_gauges_due(&self, every: Duration) -> bool {
        self.gauge_reading()
            .as_ref()
            .is_none_or(|g| g.taken_at.elapsed() >= every)
    }

    fn gauge_reading(&self) -> std::sync::MutexGuard<'_, Option<GaugeReading>> {
        self.gauges
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records how long a job of `queue` and `kind` waited from ready (`max(available_at,
    /// created_at)`) to its start.
    pub(crate) fn job_picked_up(&self, queue: &str, kind: &str, waited: Duration) {
        self.pickup_seconds
            .get_or_create(&self.kind_labels(kind))
            .observe(waited.as_secs_f64());
        #[cfg(feature = "otel")]
        if let Some(h) = self.otel.get() {
            h.pickup(&self.worker_id, kind, waited);
        }
        self.attempt_latency(queue, kind, Series::Pickup, waited);
    }

    /// Counts one latency of `series` for `mysqlq_run_minute` (pickup, or the run time of an
    /// attempt that ended as `series` says).
    pub(crate) fn attempt_latency(&self, queue: &str, kind: &str, series: Series, took: Duration) {
        self.book().record(queue, kind, series, took);
    }

    /// The latency counts since the last call, for the statistics flush (each handed out once).
    pub(crate) fn latency_take(&self) -> LatencyDeltas {
        self.book().take()
    }

    /// Gives back counts a failed flush could not write, for the next flush.
    pub(crate) fn latency_put_back(&self, deltas: LatencyDeltas) {
        self.book().put_back(deltas);
    }

    fn book(&self) -> std::sync::MutexGuard<'_, LatencyBook> {
        self.latency
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn kind_labels(&self, kind: &str) -> Labels {
        vec![
            ("worker".to_owned(), escape_label(&self.worker_id)),
            ("kind".to_owned(), escape_label(kind)),
        ]
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

    /// An attempt of a job of `queue` and `kind` ended after `took`; `Ok` unless `error` (its
    /// outcome's latency is counted by [`attempt_latency`](Self::attempt_latency)).
    pub(crate) fn job_finished(&self, queue: &str, kind: &str, took: Duration, error: bool) {
        self.running.fetch_sub(1, Ordering::Relaxed);
        if !error {
            self.attempt_latency(queue, kind, Series::Completed, took);
        }
        self.run_seconds
            .get_or_create(&self.kind_labels(kind))
            .observe(took.as_secs_f64());
        #[cfg(feature = "otel")]
        if let Some(h) = self.otel.get() {
            h.run(&self.worker_id, kind, took);
        }
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
    /// counters as `mysqlq_<name>_total{worker}`, `mysqlq_running{worker}`,
    /// `mysqlq_leader{worker}`; per kind `mysqlq_job_{runs,errors,seconds}_total{worker,kind}`
    /// and the histograms `mysqlq_job_run_seconds` and `mysqlq_job_pickup_seconds`
    /// (`{worker,kind}`); on the leader only, the queue gauges
    /// `mysqlq_queue_{ready,scheduled,running,failed,oldest_ready_age_seconds}{queue}` and
    /// `mysqlq_jobs{queue,state}`.
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
        registry.register(
            "mysqlq_job_run_seconds",
            help("Handler time of each attempt, by kind."),
            self.run_seconds.clone(),
        );
        registry.register(
            "mysqlq_job_pickup_seconds",
            help(
                "Time from ready (the later of available_at and created_at) to the claim, by kind.",
            ),
            self.pickup_seconds.clone(),
        );
        let leader = Family::<Labels, Gauge>::default();
        leader
            .get_or_create(&worker)
            .set(i64::from(self.is_leader()));
        registry.register(
            "mysqlq_leader",
            help("1 while this worker is the leader, which reports the queue gauges."),
            leader,
        );
        if let Some(queues) = self.queue_gauges() {
            register_queue_gauges(&mut registry, &queues);
        }
        if let Some(workflows) = self.workflow_gauges() {
            let family = Family::<Labels, Gauge>::default();
            for (kind, state, n) in &workflows {
                let labels = vec![
                    ("kind".to_owned(), escape_label(kind)),
                    ("state".to_owned(), escape_label(state)),
                ];
                family
                    .get_or_create(&labels)
                    .set(i64::try_from(*n).unwrap_or(i64::MAX));
            }
            registry.register(
                "mysqlq_workflows",
                help("Workflows and batches by kind and state (finished ones until pruned)."),
                family,
            );
        }

        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &registry);
        out
    }
}

/// The label set of every metric: `worker`, and `kind` for the per-kind ones (`queue` alone for
/// the queue gauges, which describe the database, not a worker).
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
        m.job_finished("q", "send_email", Duration::from_millis(1500), false);
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
        assert!(
            text.contains("mysqlq_job_run_seconds_count{worker=\"w\\\"1\",kind=\"send_email\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("mysqlq_leader{worker=\"w\\\"1\"} 0"),
            "{text}"
        );
    }

    #[test]
    fn queue_gauges_show_only_while_leader_and_fresh() {
        let m = Metrics::new("w");
        let alpha = QueueGauges {
            queue: "alpha".into(),
            waiting: 5,
            ready: 3,
            scheduled: 2,
            running: 1,
            rate_limited: 2,
            failed: 4,
            oldest_ready_age: Some(Duration::from_millis(2500)),
            ..QueueGauges::default()
        };
        m.set_leader(true);
        assert!(m.queue_gauges_due(Duration::from_secs(15)), "never read");
        let workflows = vec![("batch".to_owned(), "running".to_owned(), 2)];
        m.set_queue_gauges(vec![alpha.clone()], workflows, Duration::from_secs(60));
        assert!(!m.queue_gauges_due(Duration::from_secs(15)));
        let text = m.render_prometheus();
        for line in [
            "mysqlq_queue_waiting{queue=\"alpha\"} 5",
            "mysqlq_workflows{kind=\"batch\",state=\"running\"} 2",
            "mysqlq_queue_ready{queue=\"alpha\"} 3",
            "mysqlq_queue_scheduled{queue=\"alpha\"} 2",
            "mysqlq_queue_running{queue=\"alpha\"} 1",
            "mysqlq_queue_failed{queue=\"alpha\"} 4",
            "mysqlq_rate_limited_jobs{queue=\"alpha\"} 2",
            "mysqlq_queue_oldest_ready_age_seconds{queue=\"alpha\"} 2.5",
            "mysqlq_leader{worker=\"w\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
        }
        m.set_leader(false);
        assert_eq!(m.queue_gauges(), None, "not the leader: no gauges");
        assert!(!m.render_prometheus().contains("mysqlq_queue_"));
        m.set_leader(true);
        m.set_queue_gauges(vec![alpha], Vec::new(), Duration::ZERO);
        assert_eq!(
            m.queue_gauges(),
            None,
            "a reading past its validity is not shown"
        );
    }
}
