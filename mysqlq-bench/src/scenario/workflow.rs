//! The workflow scenario (issue 30): [`WORKFLOW_WORKERS`] in-process workers, each on a pool of
//! its own, at `--concurrency` (default [`WORKFLOW_CONCURRENCY`]) on the bench queue. Each round
//! runs four drains, the workflow and its unlinked twin in ABBA order: a fan-out (`root` →
//! `--jobs` `leaf` steps → `fanin`) against as many independent no-ops, then `--jobs / 10`
//! four-step diamonds (a → b, c → d) against the same jobs unlinked. Times are the database's:
//! the fan-out's rate is its leaves over (last leaf `finished_at` − `root`'s `finished_at`), the
//! others' all their jobs over (last `finished_at` − the enqueue's commit, read from the
//! database clock once the enqueue returned). Reported: the ratios (medians over rounds), how
//! long after its last dependency finished each dependent was first claimed (the fan-in; the
//! diamonds' `d`, p99), the workers' lock wait timeouts, deadlocks and deferred settlements,
//! and the server's row lock counters around each run. Checked: every handler ran once, every
//! row `completed` after one claim, every dependent first claimed after all its dependencies
//! finished, and no lock wait timeout.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mysqlq::workflow::Workflow;
use mysqlq::{
    CounterSnapshot, EnqueueOptions, Metrics, NewJob, Worker, WorkerHandle, enqueue_many,
};
use serde_json::{Value, json};

use crate::bench::{Bench, wait_for};
use crate::db;
use crate::error::{BenchError, db_err, q_err};
use crate::job::{BenchNoop, QUEUE};
use crate::probe::{Probe, lock};
use crate::report::{median, percentile, round_to};
use crate::sql::{self, BenchDepGap};

/// Workers draining the queue (each would be a process of its own in production).
pub(crate) const WORKFLOW_WORKERS: usize = 3;
/// `--concurrency`'s default for this scenario (each worker's).
pub(crate) const WORKFLOW_CONCURRENCY: usize = 256;
/// `--rounds`' default for this scenario.
pub(crate) const WORKFLOW_ROUNDS: u32 = 3;
/// The gate block of migration 8 (`mysqlq::store::workflow::GATE_BLOCK`, not public): a
/// dependent counts its open edges in blocks of at most this many.
pub(crate) const GATE_BLOCK: usize = 64;
/// Issue 30's targets: workflow rate over unlinked rate, at least.
pub(crate) const TARGET_RATIO: f64 = 0.7;
/// Issue 30's targets: a dependent first claimed at most this long after its last dependency
/// finished, in milliseconds.
pub(crate) const TARGET_START_MS: f64 = 1_000.0;
/// How long the workers idle before the enqueue (started, claim loops polling).
const SETTLE: Duration = Duration::from_millis(500);
/// Server counters read around each run (`SHOW GLOBAL STATUS`, server-wide).
const STATUS: [&str; 4] = [
    "Innodb_row_lock_waits",
    "Innodb_row_lock_time",
    "Innodb_row_lock_time_max",
    "Innodb_deadlocks",
];

/// One run of a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Run {
    /// `root` → `width` leaves → `fanin`, one workflow.
    Fanout,
    /// `width` independent no-ops.
    Independent,
    /// `diamonds` workflows a → b, c → d, enqueued in one transaction.
    Diamonds,
    /// The diamonds' `4 × diamonds` jobs, unlinked, in one transaction.
    Unlinked,
}

impl Run {
    const ALL: [Self; 4] = [
        Self::Fanout,
        Self::Independent,
        Self::Diamonds,
        Self::Unlinked,
    ];

    fn key(self) -> &'static str {
        match self {
            Self::Fanout => "fanout",
            Self::Independent => "independent",
            Self::Diamonds => "small_workflows",
            Self::Unlinked => "unlinked",
        }
    }

    fn linked(self) -> bool {
        matches!(self, Self::Fanout | Self::Diamonds)
    }

    /// Round `r`'s order: each workflow first on even rounds, its unlinked twin first on odd.
    fn round(r: u32) -> [Self; 4] {
        if r.is_multiple_of(2) {
            [
                Self::Fanout,
                Self::Independent,
                Self::Diamonds,
                Self::Unlinked,
            ]
        } else {
            [
                Self::Independent,
                Self::Fanout,
                Self::Unlinked,
                Self::Diamonds,
            ]
        }
    }
}

/// What went on under one kind of run, summed over its rounds.
#[derive(Debug, Clone, Default)]
pub(crate) struct RunCounters {
    /// The workers' counters (lock waits, deadlocks, deferred settlements, releases, …).
    pub(crate) workers: CounterSnapshot,
    /// [`STATUS`] deltas except `Innodb_row_lock_time_max` (`None`: the server lacks it).
    pub(crate) row_lock_waits: Option<i64>,
    pub(crate) row_lock_time_ms: Option<i64>,
    pub(crate) server_deadlocks: Option<i64>,
    /// Runs where `Innodb_row_lock_time_max` grew (a new longest wait since the server started).
    pub(crate) row_lock_time_max_grew: u32,
}

/// What one run measured.
#[derive(Debug, Clone, Default)]
struct RunOut {
    /// Jobs per second (see the module doc for each kind's interval).
    rate: f64,
    /// The fan-out: the fan-in's first claim after its last leaf finished (ms).
    fanin_ms: Option<f64>,
    /// The fan-out: the leaves' first claim after `root` finished (ms), sorted.
    leaves_ms: Vec<f64>,
    /// The diamonds: each `d`'s first claim after the later of `b` and `c` finished (ms), sorted.
    d_ms: Vec<f64>,
}

/// What the workflow scenario measured.
#[derive(Debug, Clone, Default)]
pub(crate) struct WorkflowRun {
    pub(crate) concurrency: usize,
    pub(crate) rounds: u32,
    /// The fan-out's width.
    pub(crate) width: u32,
    /// The small workflows.
    pub(crate) diamonds: u32,
    /// Jobs/s per round, per kind ([`Run::ALL`] order).
    pub(crate) rates: [Vec<f64>; 4],
    /// Per round: fan-out / independent, diamonds / unlinked.
    pub(crate) fanout_ratios: Vec<f64>,
    pub(crate) small_ratios: Vec<f64>,
    /// Per round: the fan-in's start after its last leaf (ms).
    pub(crate) fanin_ms: Vec<f64>,
    /// Per round: the leaves' start after `root`, p50 and p99 (ms).
    pub(crate) leaves_ms: Vec<(f64, f64)>,
    /// Per round: the diamonds' `d` start after its deps, p50, p99 and max (ms).
    pub(crate) d_ms: Vec<(f64, f64, f64)>,
    /// Per kind ([`Run::ALL`] order).
    pub(crate) counters: [RunCounters; 4],
    /// `Innodb_row_lock_time_max` after the scenario (ms, since the server started).
    pub(crate) row_lock_time_max_ms: Option<i64>,
}

fn ms(us: i64) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let v = us as f64 / 1000.0;
    v
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

impl Bench<'_> {
    /// The workflow scenario: `rounds` rounds of four runs at `concurrency` per worker.
    pub(crate) async fn workflow(
        &mut self,
        concurrency: usize,
        rounds: u32,
    ) -> Result<WorkflowRun, BenchError> {
        let width = self
            .jobs
            .min(u32::try_from(mysqlq::workflow::MAX_STEPS - 2).unwrap_or(u32::MAX));
        let mut out = WorkflowRun {
            concurrency,
            rounds,
            width,
            diamonds: (self.jobs / 10).max(1),
            ..WorkflowRun::default()
        };
        for round in 0..rounds {
            let mut round_rates = [0.0; 4];
            for run in Run::round(round) {
                let i = Run::ALL.iter().position(|r| *r == run).unwrap_or(0);
                let (r, counters) = self.workflow_run(run, round, &out).await?;
                out.counters[i] = merge(&out.counters[i], &counters);
                round_rates[i] = r.rate;
                out.rates[i].push(r.rate);
                if let Some(f) = r.fanin_ms {
                    out.fanin_ms.push(f);
                }
                if !r.leaves_ms.is_empty() {
                    out.leaves_ms.push((
                        percentile(&r.leaves_ms, 50.0),
                        percentile(&r.leaves_ms, 99.0),
                    ));
                }
                if let Some(max) = r.d_ms.last() {
                    out.d_ms
                        .push((percentile(&r.d_ms, 50.0), percentile(&r.d_ms, 99.0), *max));
                }
            }
            if round_rates[1] > 0.0 {
                out.fanout_ratios.push(round_rates[0] / round_rates[1]);
            }
            if round_rates[3] > 0.0 {
                out.small_ratios.push(round_rates[2] / round_rates[3]);
            }
        }
        {
            let mut conn = db::acquire(&self.setup).await?;
            let s = sql::bench_status_of(&mut conn, &STATUS)
                .await
                .map_err(db_err("cannot read the server's status counters"))?;
            out.row_lock_time_max_ms = s[2];
        }
        let timeouts: u64 = out.counters.iter().map(|c| c.workers.lock_waits).sum();
        let detail = format!(
            "{timeouts} lock wait timeouts (1205) in the workers' transactions, {} deadlocks \
             (1213), over {} runs",
            out.counters
                .iter()
                .map(|c| c.workers.deadlocks)
                .sum::<u64>(),
            rounds * 4
        );
        self.check(
            "workflow framework: lock waits".to_owned(),
            if timeouts == 0 {
                Ok(detail)
            } else {
                Err(detail)
            },
        );
        Ok(out)
    }

    /// One run: fresh workers, the jobs enqueued, drained, measured and checked.
    async fn workflow_run(
        &mut self,
        run: Run,
        round: u32,
        w: &WorkflowRun,
    ) -> Result<(RunOut, RunCounters), BenchError> {
        let label = format!("workflow {} round {}", run.key(), round + 1);
        self.reset().await?;
        {
            let mut conn = db::acquire(&self.setup).await?;
            sql::bench_reset_workflows(&mut conn)
                .await
                .map_err(db_err("cannot empty the bench's workflow tables"))?;
        }
        let n = match run {
            Run::Fanout => w.width + 2,
            Run::Independent => w.width,
            Run::Diamonds | Run::Unlinked => w.diamonds * 4,
        };
        self.phase(&label, n);
        let probe = Arc::new(Probe::timing());
        let before = self.workflow_status().await?;
        let (workers, pools) = self.workflow_workers(&probe, w.concurrency).await?;
        let metrics: Vec<Arc<Metrics>> = workers.iter().map(WorkerHandle::metrics).collect();
        tokio::time::sleep(SETTLE).await;
        let enqueued = self.workflow_enqueue(run, w).await;
        let waited = match &enqueued {
            Ok(_) => {
                let done = || {
                    metrics
                        .iter()
                        .map(|m| m.counters.completions.load(Ordering::Relaxed))
                        .sum()
                };
                wait_for(&self.bar, u64::from(n), done).await
            }
            Err(_) => Ok(()),
        };
        let mut snapshot = CounterSnapshot::default();
        for m in &metrics {
            snapshot = add(&snapshot, &m.counters.snapshot());
        }
        for h in workers {
            let _ = h.shutdown().await;
        }
        for p in pools {
            p.close().await;
        }
        let commit_us = enqueued?;
        waited?;
        let after = self.workflow_status().await?;
        let delta = |i: usize| Some(after[i]? - before[i]?);
        let counters = RunCounters {
            workers: snapshot,
            row_lock_waits: delta(0),
            row_lock_time_ms: delta(1),
            server_deadlocks: delta(3),
            row_lock_time_max_grew: u32::from(after[2].zip(before[2]).is_some_and(|(a, b)| a > b)),
        };
        if snapshot.lost > 0 {
            self.check(
                format!("{label}: ownership"),
                Err(format!(
                    "{} completions refused (lease lost)",
                    snapshot.lost
                )),
            );
        }
        let measured = self.workflow_measure(run, w, commit_us).await?;
        self.workflow_verify(&label, run, n, &probe, &measured.1)
            .await?;
        Ok((measured.0, counters))
    }

    async fn workflow_status(&self) -> Result<Vec<Option<i64>>, BenchError> {
        let mut conn = db::acquire(&self.setup).await?;
        sql::bench_status_of(&mut conn, &STATUS)
            .await
            .map_err(db_err("cannot read the server's status counters"))
    }

    /// [`WORKFLOW_WORKERS`] workers, each on its own pool, with their defaults but the
    /// concurrency.
    async fn workflow_workers(
        &self,
        probe: &Arc<Probe>,
        concurrency: usize,
    ) -> Result<(Vec<WorkerHandle>, Vec<sqlx::MySqlPool>), BenchError> {
        let mut workers: Vec<WorkerHandle> = Vec::new();
        let mut pools = Vec::new();
        for i in 0..WORKFLOW_WORKERS {
            let started = match self
                .scratch
                .pool(Worker::recommended_pool_size(concurrency))
                .await
            {
                Ok(pool) => {
                    pools.push(pool.clone());
                    match self.worker(&pool, probe) {
                        Ok(b) => b
                            .concurrency(concurrency)
                            .worker_id(format!("mysqlq-bench-workflow-{i}"))
                            .start()
                            .await
                            .map_err(q_err("the bench worker could not start")),
                        Err(e) => Err(e),
                    }
                }
                Err(e) => Err(e),
            };
            match started {
                Ok(w) => workers.push(w),
                Err(e) => {
                    for w in workers {
                        let _ = w.shutdown().await;
                    }
                    for p in pools {
                        p.close().await;
                    }
                    return Err(e);
                }
            }
        }
        Ok((workers, pools))
    }

    /// Enqueues the run's jobs; returns the database clock once the enqueue committed (µs).
    async fn workflow_enqueue(&self, run: Run, w: &WorkflowRun) -> Result<i64, BenchError> {
        let noop = |seq: u32| BenchNoop {
            seq: u64::from(seq),
        };
        let jobs = |n: u32| {
            (0..n)
                .map(|s| NewJob::from_job(&noop(s), &EnqueueOptions::new()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(q_err("cannot build the bench jobs"))
        };
        let what = "cannot enqueue the bench's workflow";
        match run {
            Run::Fanout => {
                Workflow::new("mysqlq-bench-fanout")
                    .step("root", noop(0))
                    .and_then(|f| f.fan_out("leaf", (1..=w.width).map(noop), ["root"]))
                    .and_then(|f| f.step_after("fanin", noop(w.width + 1), ["leaf"]))
                    .map_err(q_err(what))?
                    .enqueue(&self.setup)
                    .await
                    .map_err(q_err(what))?;
            }
            Run::Independent => {
                enqueue_many(&self.setup, jobs(w.width)?)
                    .await
                    .map_err(q_err("cannot enqueue the bench jobs"))?;
            }
            Run::Diamonds => {
                let mut tx = self
                    .setup
                    .begin()
                    .await
                    .map_err(db_err("cannot begin the enqueue's transaction"))?;
                for i in 0..w.diamonds {
                    Workflow::new("mysqlq-bench-diamond")
                        .step("a", noop(4 * i))
                        .and_then(|f| f.step_after("b", noop(4 * i + 1), ["a"]))
                        .and_then(|f| f.step_after("c", noop(4 * i + 2), ["a"]))
                        .and_then(|f| f.step_after("d", noop(4 * i + 3), ["b", "c"]))
                        .map_err(q_err(what))?
                        .enqueue(&mut *tx)
                        .await
                        .map_err(q_err(what))?;
                }
                tx.commit()
                    .await
                    .map_err(db_err("cannot commit the enqueue's transaction"))?;
            }
            Run::Unlinked => {
                let mut tx = self
                    .setup
                    .begin()
                    .await
                    .map_err(db_err("cannot begin the enqueue's transaction"))?;
                enqueue_many(&mut *tx, jobs(w.diamonds * 4)?)
                    .await
                    .map_err(q_err("cannot enqueue the bench jobs"))?;
                tx.commit()
                    .await
                    .map_err(db_err("cannot commit the enqueue's transaction"))?;
            }
        }
        let mut conn = db::acquire(&self.setup).await?;
        sql::bench_now_us(&mut conn)
            .await
            .map_err(db_err("cannot read the database clock"))
    }

    /// The run's rate and start gaps, from the rows.
    async fn workflow_measure(
        &self,
        run: Run,
        w: &WorkflowRun,
        commit_us: i64,
    ) -> Result<(RunOut, Vec<BenchDepGap>), BenchError> {
        let mut conn = db::acquire(&self.setup).await?;
        let gaps = sql::bench_dep_gaps(&mut conn)
            .await
            .map_err(db_err("cannot read the workflow's edges"))?;
        let last = sql::bench_last_finished_us(&mut conn, QUEUE)
            .await
            .map_err(db_err("cannot read the jobs' finish times"))?;
        let mut out = RunOut::default();
        let per_s = |n: u32, from: i64, to: Option<i64>| {
            to.map_or(0.0, |to| f64::from(n) / (ms(to - from) / 1000.0).max(1e-6))
        };
        let of = |name: &str| -> Vec<f64> {
            sorted(
                gaps.iter()
                    .filter(|g| g.name == name)
                    .filter_map(|g| g.gap_us.map(ms))
                    .collect(),
            )
        };
        match run {
            Run::Fanout => {
                let steps = sql::bench_step_times(&mut conn)
                    .await
                    .map_err(db_err("cannot read the workflow's steps"))?;
                let last_of = |name: &str| {
                    steps
                        .iter()
                        .find(|s| s.name == name)
                        .and_then(|s| s.last_finished_us)
                };
                if let Some(root) = last_of("root") {
                    out.rate = per_s(w.width, root, last_of("leaf"));
                }
                out.fanin_ms = of("fanin").first().copied();
                out.leaves_ms = of("leaf");
            }
            Run::Independent => out.rate = per_s(w.width, commit_us, last),
            Run::Diamonds => {
                out.rate = per_s(w.diamonds * 4, commit_us, last);
                out.d_ms = of("d");
            }
            Run::Unlinked => out.rate = per_s(w.diamonds * 4, commit_us, last),
        }
        Ok((out, gaps))
    }

    /// Every handler ran once for the queue's rows, every row `completed` after one claim, and
    /// (workflows) every dependent first claimed after all its dependencies finished.
    async fn workflow_verify(
        &mut self,
        label: &str,
        run: Run,
        n: u32,
        probe: &Probe,
        gaps: &[BenchDepGap],
    ) -> Result<(), BenchError> {
        let ids = {
            let mut conn = db::acquire(&self.setup).await?;
            sql::bench_ids(&mut conn, QUEUE)
                .await
                .map_err(db_err("cannot read the bench's job ids"))?
        };
        let mut ran: Vec<u64> = probe
            .starts
            .as_ref()
            .map(|s| lock(s).iter().map(|(id, _)| *id).collect())
            .unwrap_or_default();
        ran.sort_unstable();
        let runs = ran.len();
        ran.dedup();
        let twice = runs - ran.len();
        let never = ids
            .iter()
            .filter(|id| ran.binary_search(id).is_err())
            .count();
        let stray = ran
            .iter()
            .filter(|id| ids.binary_search(id).is_err())
            .count();
        let detail = format!(
            "{runs} handler runs for {} jobs: {never} never ran, {twice} ran more than once, \
             {stray} unexpected",
            ids.len()
        );
        let ok = never == 0 && twice == 0 && stray == 0 && ids.len() == n as usize;
        self.check(
            format!("{label}: handlers"),
            if ok { Ok(detail) } else { Err(detail) },
        );
        self.check_rows_completed(label, n).await?;
        if run.linked() {
            let expected = match run {
                Run::Fanout => n as usize - 1,
                _ => n as usize / 4 * 3,
            };
            let early = gaps
                .iter()
                .filter(|g| g.gap_us.is_none_or(|us| us < 0) || g.unfinished > 0)
                .count();
            let edges: i64 = gaps.iter().map(|g| g.deps).sum();
            let detail = format!(
                "{} dependents ({expected} expected, {edges} edges): {early} first claimed \
                 before one of their dependencies finished (or never)",
                gaps.len()
            );
            self.check(
                format!("{label}: dependents after their dependencies"),
                if early == 0 && gaps.len() == expected {
                    Ok(detail)
                } else {
                    Err(detail)
                },
            );
        }
        Ok(())
    }
}

/// Two runs' counters together.
fn merge(a: &RunCounters, b: &RunCounters) -> RunCounters {
    RunCounters {
        workers: add(&a.workers, &b.workers),
        row_lock_waits: sum(a.row_lock_waits, b.row_lock_waits),
        row_lock_time_ms: sum(a.row_lock_time_ms, b.row_lock_time_ms),
        server_deadlocks: sum(a.server_deadlocks, b.server_deadlocks),
        row_lock_time_max_grew: a.row_lock_time_max_grew + b.row_lock_time_max_grew,
    }
}

fn sum(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (None, b) => b,
        (a, None) => a,
        (Some(a), Some(b)) => Some(a + b),
    }
}

/// `a + b`, counter by counter (only those the scenario reports).
fn add(a: &CounterSnapshot, b: &CounterSnapshot) -> CounterSnapshot {
    CounterSnapshot {
        completions: a.completions + b.completions,
        lock_waits: a.lock_waits + b.lock_waits,
        deadlocks: a.deadlocks + b.deadlocks,
        lost: a.lost + b.lost,
        workflow_released: a.workflow_released + b.workflow_released,
        workflow_settle_deferred: a.workflow_settle_deferred + b.workflow_settle_deferred,
        workflow_handed_off: a.workflow_handed_off + b.workflow_handed_off,
        completion_flushes: a.completion_flushes + b.completion_flushes,
        piggybacked: a.piggybacked + b.piggybacked,
        polls: a.polls + b.polls,
        db_errors: a.db_errors + b.db_errors,
        ..CounterSnapshot::default()
    }
}

fn met(v: Option<f64>, ok: impl Fn(f64) -> bool) -> Value {
    v.map_or(Value::Null, |v| json!(ok(v)))
}

impl WorkflowRun {
    fn median_rate(&self, run: Run) -> Option<f64> {
        let i = Run::ALL.iter().position(|r| *r == run)?;
        median(&self.rates[i])
    }

    fn counters_of(&self, runs: &[Run]) -> RunCounters {
        Run::ALL
            .iter()
            .zip(&self.counters)
            .filter(|(run, _)| runs.contains(run))
            .fold(RunCounters::default(), |c, (_, k)| merge(&c, k))
    }

    /// The headline figures: (fan-out ratio, small ratio, fan-in ms (worst round), d p99 ms
    /// (worst round)).
    fn figures(&self) -> (Option<f64>, Option<f64>, Option<f64>, Option<f64>) {
        let worst = |v: &mut dyn Iterator<Item = f64>| v.max_by(f64::total_cmp);
        (
            median(&self.fanout_ratios),
            median(&self.small_ratios),
            worst(&mut self.fanin_ms.iter().copied()),
            worst(&mut self.d_ms.iter().map(|d| d.1)),
        )
    }

    /// The `workflow` object of `--json`.
    pub(crate) fn json(&self) -> Value {
        let (fan, small, fanin, d99) = self.figures();
        let r3 = |v: Option<f64>| v.map(|v| round_to(v, 3));
        let r1 = |v: Option<f64>| v.map(|v| round_to(v, 1));
        let linked = self.counters_of(&[Run::Fanout, Run::Diamonds]);
        let all = self.counters_of(&Run::ALL);
        let counters = |c: &RunCounters| {
            json!({
                "lock_wait_timeouts": c.workers.lock_waits,
                "deadlocks": c.workers.deadlocks,
                "settle_deferred": c.workers.workflow_settle_deferred,
                "released": c.workers.workflow_released,
                "handed_off": c.workers.workflow_handed_off,
                "completion_flushes": c.workers.completion_flushes,
                "piggybacked": c.workers.piggybacked,
                "db_errors": c.workers.db_errors,
                "row_lock_waits": c.row_lock_waits,
                "row_lock_time_ms": c.row_lock_time_ms,
                "server_deadlocks": c.server_deadlocks,
                "row_lock_time_max_grew_in_runs": c.row_lock_time_max_grew,
            })
        };
        let mut per_kind = serde_json::Map::new();
        for (run, c) in Run::ALL.iter().zip(&self.counters) {
            per_kind.insert(run.key().to_owned(), counters(c));
        }
        let rounds: Vec<Value> = (0..self.fanout_ratios.len().max(self.small_ratios.len()))
            .map(|r| {
                let rate = |i: usize| r1(self.rates[i].get(r).copied());
                json!({
                    "fanout_per_s": rate(0),
                    "independent_per_s": rate(1),
                    "small_workflows_per_s": rate(2),
                    "unlinked_per_s": rate(3),
                    "fanout_ratio": r3(self.fanout_ratios.get(r).copied()),
                    "small_ratio": r3(self.small_ratios.get(r).copied()),
                    "fanin_start_after_last_dep_ms": r3(self.fanin_ms.get(r).copied()),
                    "leaf_start_after_root_p99_ms": r3(self.leaves_ms.get(r).map(|l| l.1)),
                    "diamond_d_start_after_deps_p50_ms": r3(self.d_ms.get(r).map(|d| d.0)),
                    "diamond_d_start_after_deps_p99_ms": r3(self.d_ms.get(r).map(|d| d.1)),
                    "diamond_d_start_after_deps_max_ms": r3(self.d_ms.get(r).map(|d| d.2)),
                })
            })
            .collect();
        json!({
            "workers": WORKFLOW_WORKERS,
            "concurrency": self.concurrency,
            "rounds": self.rounds,
            "gate_block": GATE_BLOCK,
            "fanout_width": self.width,
            "small_workflows": self.diamonds,
            "fanout_per_s": r1(self.median_rate(Run::Fanout)),
            "independent_per_s": r1(self.median_rate(Run::Independent)),
            "small_workflows_per_s": r1(self.median_rate(Run::Diamonds)),
            "unlinked_per_s": r1(self.median_rate(Run::Unlinked)),
            "workflow_fanout_ratio": r3(fan),
            "workflow_small_ratio": r3(small),
            "fanin_start_after_last_dep_ms": r3(fanin),
            "diamond_d_start_after_deps_p99_ms": r3(d99),
            "lock_wait_timeouts": all.workers.lock_waits,
            "deadlocks": all.workers.deadlocks,
            "row_lock_waits": linked.row_lock_waits,
            "row_lock_time_ms": linked.row_lock_time_ms,
            "row_lock_time_max_ms": self.row_lock_time_max_ms,
            "settle_deferred": linked.workers.workflow_settle_deferred,
            "targets": {
                "fanout_ratio_min": TARGET_RATIO,
                "small_ratio_min": TARGET_RATIO,
                "start_after_deps_max_ms": TARGET_START_MS,
                "fanout_ratio_met": met(fan, |v| v >= TARGET_RATIO),
                "small_ratio_met": met(small, |v| v >= TARGET_RATIO),
                "fanin_start_met": met(fanin, |v| v <= TARGET_START_MS),
                "diamond_d_start_met": met(d99, |v| v <= TARGET_START_MS),
                "no_lock_wait_timeout_met": all.workers.lock_waits == 0,
            },
            "per_run_kind": Value::Object(per_kind),
            "workflow_rounds": rounds,
        })
    }

    /// The text report's lines.
    pub(crate) fn human(&self) -> String {
        let (fan, small, fanin, d99) = self.figures();
        let f = |v: Option<f64>, p: usize| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.p$}"));
        let yes = |ok: bool| if ok { "met" } else { "MISSED" };
        let linked = self.counters_of(&[Run::Fanout, Run::Diamonds]);
        let all = self.counters_of(&Run::ALL);
        let opt = |v: Option<i64>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
        format!(
            "\nworkflows: {WORKFLOW_WORKERS} workers at concurrency {}, {} round(s) in ABBA order, \
             gate block {GATE_BLOCK}; times on the database clock\n\
             \x20 fan-out root -> {} leaves -> fan-in: {} jobs/s (leaves over last leaf finished - \
             root finished) vs {} independent no-ops {} jobs/s (over last finished - commit): \
             ratio {} ({} >= {TARGET_RATIO})\n\
             \x20 {} diamonds a -> b, c -> d: {} jobs/s vs the same jobs unlinked {} jobs/s (over \
             last finished - commit): ratio {} ({} >= {TARGET_RATIO})\n\
             \x20 fan-in first claimed {} ms after its last leaf finished (worst round; {}); \
             diamonds' d p99 {} ms after the later of b and c (worst round; {})\n\
             \x20 workers: {} lock wait timeouts, {} deadlocks in all runs; workflow runs: {} \
             settlements deferred, {} steps released; server (all sessions) during workflow \
             runs: Innodb_row_lock_waits +{}, Innodb_row_lock_time +{} ms, \
             Innodb_row_lock_time_max {} ms (grew in {} run(s))\n",
            self.concurrency,
            self.rounds,
            self.width,
            f(self.median_rate(Run::Fanout), 0),
            self.width,
            f(self.median_rate(Run::Independent), 0),
            f(fan, 3),
            fan.map_or("-", |v| yes(v >= TARGET_RATIO)),
            self.diamonds,
            f(self.median_rate(Run::Diamonds), 0),
            f(self.median_rate(Run::Unlinked), 0),
            f(small, 3),
            small.map_or("-", |v| yes(v >= TARGET_RATIO)),
            f(fanin, 1),
            fanin.map_or("-", |v| yes(v <= TARGET_START_MS)),
            f(d99, 1),
            d99.map_or("-", |v| yes(v <= TARGET_START_MS)),
            all.workers.lock_waits,
            all.workers.deadlocks,
            linked.workers.workflow_settle_deferred,
            linked.workers.workflow_released,
            opt(linked.row_lock_waits),
            opt(linked.row_lock_time_ms),
            opt(self.row_lock_time_max_ms),
            linked.row_lock_time_max_grew,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_alternate_each_pair() {
        assert_eq!(Run::round(0)[0], Run::Fanout);
        assert_eq!(Run::round(1)[0], Run::Independent);
        assert_eq!(Run::round(1)[3], Run::Diamonds);
        assert_eq!(sum(None, Some(2)), Some(2));
        assert_eq!(sum(Some(1), Some(2)), Some(3));
    }
}
