//! The drain scenario: pre-enqueued no-op jobs drained by a real [`mysqlq::Worker`] with its
//! default settings (framework; further framework sides with other settings are
//! [`FRAMEWORK_VARIANTS`]), or by the best raw loop a user could write (baseline): the article's
//! claim and completion looped by 1 and by 8 claim loops, both measured every round, the better
//! of the two being the round's baseline.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mysqlq::{Worker, WorkerBuilder};
use tokio::task::JoinSet;

use crate::baseline::{DrainCounters, baseline_drain_loop};
use crate::bench::{BASELINE_POOL_MAX, Bench, RunCpu, per_s, status_delta, wait_for};
use crate::error::{BenchError, q_err};
use crate::indexes::{Change, RowWrite};
use crate::probe::Probe;
use crate::scenario::memory::{peak_rss_bytes, reset_peak_rss};
use crate::sql::RawTable;

/// Claim loops of the baseline drain: each round runs every one of these, and the fastest is
/// that round's baseline (one loop claims full batches without contention; more loops overlap
/// round trips and commits but contend for the same rows).
pub(crate) const BASELINE_LOOPS: [usize; 2] = [1, 8];

/// Claim loops of the raw loop on the job-queue article's own table ([`RawTable::Article`]),
/// reported beside the baseline (not part of the ratios): what this machine does for the
/// article's schema, with two secondary indexes where the framework's table has eight.
pub(crate) const ARTICLE_LOOPS: [usize; 2] = [1, 8];

/// A framework side of the drain: a real worker with its defaults
/// ([`mysqlq::WorkerConfig::default`]) and `--concurrency` / `--batch`, plus what `configure`
/// sets. The first entry of [`FRAMEWORK_VARIANTS`] is the framework of the ratios; every other
/// one is drained in the same rounds and reported beside it, so a side with other worker
/// settings is one more entry there (one whose `writes` delete the row at completion is checked
/// for no row left instead of every row `completed`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FrameworkVariant {
    /// Its name in the output (`framework`, `framework <what differs>`); its JSON key is this
    /// with `_` for spaces.
    pub(crate) label: &'static str,
    /// The worker settings this side changes (none for [`FrameworkVariant::DEFAULTS`]).
    pub(crate) configure: fn(WorkerBuilder) -> WorkerBuilder,
    /// What its statements write to a drained job's row (the index entries per job).
    pub(crate) writes: &'static [RowWrite],
}

impl FrameworkVariant {
    /// The worker with its defaults.
    pub(crate) const DEFAULTS: Self = Self {
        label: "framework",
        configure: std::convert::identity,
        writes: &[FRAMEWORK_CLAIM, FRAMEWORK_COMPLETE],
    };

    /// The variant labelled `label` (a child process is told its side by label).
    pub(crate) fn named(label: &str) -> Option<Self> {
        FRAMEWORK_VARIANTS
            .iter()
            .copied()
            .find(|v| v.label == label)
    }
}

/// The worker's claim as it writes a job's row the first time (`job_claim`'s UPDATE, in
/// `mysqlq/src/store/claim.rs`).
pub(crate) const FRAMEWORK_CLAIM: RowWrite = RowWrite {
    statement: "claim UPDATE",
    change: Change::Update(&[
        "status",
        "locked_by",
        "claim_token",
        "lease_expires_at",
        "claimed_at",
        "attempts",
        "first_claimed_at",
    ]),
};

/// The completion of a worker with `delete_completed` (`mysqlq/src/store/deleting.rs`): it
/// deletes the row.
pub(crate) const FRAMEWORK_DELETE: RowWrite = RowWrite {
    statement: "completion DELETE",
    change: Change::Delete,
};

/// The worker's completion that keeps the row (`job_complete_many`, in
/// `mysqlq/src/store/guarded.rs`).
pub(crate) const FRAMEWORK_COMPLETE: RowWrite = RowWrite {
    statement: "completion UPDATE",
    change: Change::Update(&["status", "finished_at", "lease_expires_at"]),
};

/// Two variants are the same side when they have the same label.
impl PartialEq for FrameworkVariant {
    fn eq(&self, other: &Self) -> bool {
        self.label == other.label
    }
}

impl Eq for FrameworkVariant {}

/// The framework sides of the drain, the defaults first (one line each).
pub(crate) const FRAMEWORK_VARIANTS: &[FrameworkVariant] = &[
    FrameworkVariant::DEFAULTS,
    // Completed rows deleted in the completing transaction (`WorkerBuilder::delete_completed`,
    // issue 34 item 2).
    FrameworkVariant {
        label: "framework no history",
        configure: |b| b.delete_completed(true),
        writes: &[FRAMEWORK_CLAIM, FRAMEWORK_DELETE],
    },
];

/// Who drains the queue in one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Drainer {
    /// A real worker: its default settings (except `--concurrency` / `--batch`) and the
    /// variant's.
    Framework(FrameworkVariant),
    /// The raw claim loop, run by this many tasks side by side.
    Baseline(usize),
    /// The same raw loop on the article's own table ([`ARTICLE_LOOPS`]).
    Article(usize),
}

impl Drainer {
    /// The framework with its defaults.
    pub(crate) const FRAMEWORK: Self = Self::Framework(FrameworkVariant::DEFAULTS);

    /// Every drainer, in the order of the diagnostics: the framework variants, then the
    /// baseline's loop counts.
    pub(crate) fn all() -> Vec<Self> {
        FRAMEWORK_VARIANTS
            .iter()
            .map(|&v| Self::Framework(v))
            .chain(BASELINE_LOOPS.iter().map(|&n| Self::Baseline(n)))
            .chain(ARTICLE_LOOPS.iter().map(|&n| Self::Article(n)))
            .collect()
    }

    /// The runs of round `r`: the framework sides first then the baselines on even rounds, the
    /// mirror image on odd ones (ABBA order extended to every side), so drift falls on every
    /// side.
    pub(crate) fn round(r: u32) -> Vec<Self> {
        let mut v = Self::all();
        if !r.is_multiple_of(2) {
            v.reverse();
        }
        v
    }

    /// What its statements write to a drained job's row.
    pub(crate) fn writes(self) -> &'static [RowWrite] {
        match self {
            Self::Framework(v) => v.writes,
            Self::Baseline(_) => RawTable::JobQueue.writes(),
            Self::Article(_) => RawTable::Article.writes(),
        }
    }

    /// `framework`, `baseline 1 loop`, `baseline 8 loops`.
    pub(crate) fn label(self) -> String {
        match self {
            Self::Framework(v) => v.label.to_owned(),
            Self::Baseline(n) => format!("baseline {n} loop{}", if n == 1 { "" } else { "s" }),
            Self::Article(n) => format!("article schema {n} loop{}", if n == 1 { "" } else { "s" }),
        }
    }

    /// The table its statements write: the framework's, or the article's.
    pub(crate) fn table(self) -> RawTable {
        match self {
            Self::Article(_) => RawTable::Article,
            Self::Framework(_) | Self::Baseline(_) => RawTable::JobQueue,
        }
    }

    /// The diagnostics key: `drain_framework`, `drain_baseline_1_loop`, `drain_baseline_8_loops`,
    /// `drain_article_schema_1_loop`, ….
    pub(crate) fn key(self) -> String {
        format!("drain_{}", self.label().replace(' ', "_"))
    }
}

/// What one drain run counted besides its time.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct DrainRun {
    pub(crate) took: Duration,
    /// Claim transactions (the last, empty ones included).
    pub(crate) claims: u64,
    /// Statements that wrote completions (framework: alone or inside a claim's transaction;
    /// baseline: one per completed batch).
    pub(crate) flushes: u64,
    /// Completions written inside a claim's transaction (framework only).
    pub(crate) piggybacked: u64,
}

impl Bench<'_> {
    /// One drain run by `who`; returns jobs/s.
    pub(crate) async fn drain(&mut self, who: Drainer, round: u32) -> Result<f64, BenchError> {
        let n = self.jobs;
        let label = format!("drain {} round {}", who.label(), round + 1);
        let ids = self.prepare(&label, n).await?;
        if who.table() == RawTable::Article {
            let mut conn = crate::db::acquire(&self.setup).await?;
            crate::sql::bench_article_fill(&mut conn)
                .await
                .map_err(crate::error::db_err("cannot fill the article's table"))?;
        }
        let probe = Arc::new(Probe::counting(ids));
        self.phase(&label, n);
        let before = self.status().await?;
        let cpu_before = self.cpu_now();
        let run = match who {
            Drainer::Framework(v) => self.drain_framework(&probe, v).await?,
            Drainer::Baseline(loops) | Drainer::Article(loops) => {
                self.drain_baseline(&probe, who.table(), loops).await?
            }
        };
        let cpu_after = self.cpu_now();
        let after = self.status().await?;
        let delta = status_delta(&after, &before);
        let since = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a - b);
        let cpu = RunCpu {
            client_s: since(cpu_after.client_s, cpu_before.client_s),
            server_s: since(cpu_after.server_s, cpu_before.server_s),
        };
        self.diag.add(who, u64::from(n), &run, (&delta, cpu));
        self.check(format!("{label}: handlers"), probe.exactly_once());
        if who.writes().iter().any(|w| w.change == Change::Delete) {
            self.check_rows_deleted(&label).await?;
        } else {
            self.check_rows_completed_in(&label, who.table(), n).await?;
        }
        Ok(per_s(n, run.took))
    }

    /// One drain by a worker in this process: the defaults and `variant`'s settings.
    pub(crate) async fn drain_framework(
        &mut self,
        probe: &Arc<Probe>,
        variant: FrameworkVariant,
    ) -> Result<DrainRun, BenchError> {
        let n = u64::from(self.jobs);
        let pool = self
            .scratch
            .pool(Worker::recommended_pool_size(self.concurrency))
            .await?;
        let builder = (variant.configure)(self.worker(&pool, probe)?);
        let first = self.peak_rss.is_none();
        if first {
            self.rss_reset = reset_peak_rss();
        }
        let handle = builder
            .start()
            .await
            .map_err(q_err("the bench worker could not start"))?;
        let started = Instant::now();
        let metrics = handle.metrics();
        let done = || metrics.counters.completions.load(Ordering::Relaxed);
        let waited = wait_for(&self.bar, n, done).await;
        let took = started.elapsed();
        if first {
            self.peak_rss = peak_rss_bytes();
        }
        let c = &metrics.counters;
        let lost = c.lost.load(Ordering::Relaxed);
        let run = DrainRun {
            took,
            // Claim transactions: polls less the ready probes of idle loops.
            claims: c
                .polls
                .load(Ordering::Relaxed)
                .saturating_sub(c.probes.load(Ordering::Relaxed)),
            flushes: c.completion_flushes.load(Ordering::Relaxed),
            piggybacked: c.piggybacked.load(Ordering::Relaxed),
        };
        let _ = handle.shutdown().await;
        pool.close().await;
        waited?;
        if lost > 0 {
            self.check(
                format!("drain {}: ownership", variant.label),
                Err(format!("{lost} completions refused (lease lost)")),
            );
        }
        Ok(run)
    }

    /// `loops` tasks looping the raw claim and completion until the queue is empty.
    pub(crate) async fn drain_baseline(
        &mut self,
        probe: &Arc<Probe>,
        table: RawTable,
        loops: usize,
    ) -> Result<DrainRun, BenchError> {
        let who = match table {
            RawTable::JobQueue => Drainer::Baseline(loops),
            RawTable::Article => Drainer::Article(loops),
        };
        let max = u32::try_from(loops)
            .unwrap_or(u32::MAX)
            .min(BASELINE_POOL_MAX);
        let pool = self.scratch.pool(max).await?;
        let worker = format!("bench-baseline:{}", std::process::id());
        let counters = Arc::new(DrainCounters::default());
        let started = Instant::now();
        let mut tasks = JoinSet::new();
        for _ in 0..loops {
            let (pool, probe, worker, counters, bar) = (
                pool.clone(),
                probe.clone(),
                worker.clone(),
                counters.clone(),
                self.bar.clone(),
            );
            let batch = self.batch;
            tasks.spawn(async move {
                baseline_drain_loop(&pool, table, &probe, batch, &worker, &counters, &bar).await
            });
        }
        let mut result = Ok(());
        while let Some(r) = tasks.join_next().await {
            let r = match r {
                Ok(r) => r,
                // Aborted after another task's error, which is the one reported.
                Err(e) if e.is_cancelled() => continue,
                Err(e) => Err(BenchError::new(
                    format!("a baseline task failed: {e}"),
                    "this is a bug in the bench",
                )),
            };
            if let Err(e) = r
                && result.is_ok()
            {
                tasks.abort_all();
                result = Err(e);
            }
        }
        let took = started.elapsed();
        pool.close().await;
        result?;
        let lost = counters.lost.load(Ordering::Relaxed);
        if lost > 0 {
            self.check(
                format!("drain {}: ownership", who.label()),
                Err(format!("{lost} completions refused (token no longer held)")),
            );
        }
        Ok(DrainRun {
            took,
            claims: counters.claims.load(Ordering::Relaxed),
            flushes: counters.flushes.load(Ordering::Relaxed),
            piggybacked: 0,
        })
    }
}
