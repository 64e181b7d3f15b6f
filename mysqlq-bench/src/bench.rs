//! One bench run: the scratch database, the scenarios in ABBA order, the checks, the report.

use std::io::IsTerminal as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use mysqlq::{EnqueueOptions, NewJob, Worker, WorkerBuilder, WorkerConfig};
use serde_json::{Value, json};
use sqlx::MySqlPool;

use crate::args::{BenchArgs, Scenario};
use crate::error::{BenchError, db_err, q_err};
use crate::indexes::JobQueueIndexes;
use crate::job::{self, BenchNoop, QUEUE};
use crate::probe::Probe;
use crate::report::{Report, round_to};
use crate::scenario::drain::{
    ARTICLE_LOOPS, BASELINE_LOOPS, DrainRun, Drainer, FRAMEWORK_VARIANTS,
};
use crate::scenario::rate::{RATE_CONCURRENCY, RateSettings};
use crate::scenario::workflow::{WORKFLOW_CONCURRENCY, WORKFLOW_ROUNDS};
use crate::scratch::{Scratch, interrupted};
use crate::sql::RawTable;
use crate::{db, sql};

/// Most jobs of a single-row enqueue run.
pub(crate) const SINGLE_MAX: u32 = 5_000;
/// Most tasks enqueueing single rows at once.
pub(crate) const SINGLE_TASKS_MAX: usize = 64;
/// Pickup: jobs per second, one at a time.
pub(crate) const PICKUP_RATE: u32 = 20;
/// Most connections of the baseline drain (tasks beyond share them).
pub(crate) const BASELINE_POOL_MAX: u32 = 64;
/// Lease the baseline takes on claim, in seconds (the worker's default).
pub(crate) const LEASE_SECS: u32 = 60;
/// Rows per `enqueue_many` call when preparing a drain run (keeps the bench's own memory low).
const PREPARE_CHUNK: usize = 5_000;
/// A run that makes no progress for this long is an error.
pub(crate) const STALL: Duration = Duration::from_secs(60);

/// One side's results (`None`: not measured).
#[derive(Debug, Default, Clone)]
pub(crate) struct Side {
    pub(crate) enqueue_single: Vec<f64>,
    pub(crate) enqueue_bulk: Vec<f64>,
    /// Drain jobs/s per round; for the baseline, the better of its loop counts in that round.
    pub(crate) drain: Vec<f64>,
    /// Baseline only: drain jobs/s per round for each of [`BASELINE_LOOPS`], in that order.
    pub(crate) drain_loops: Vec<Vec<f64>>,
    /// Baseline only: the raw loop's drain jobs/s on the article's table, per round, for each
    /// of [`ARTICLE_LOOPS`].
    pub(crate) article_loops: Vec<Vec<f64>>,
    /// Framework only: drain jobs/s per round for each of [`FRAMEWORK_VARIANTS`], in that
    /// order (the first is `drain`).
    pub(crate) drain_variants: Vec<Vec<f64>>,
    /// Statements per second sent by an idle consumer on an empty queue.
    pub(crate) idle_statements: Option<f64>,
    pub(crate) pickup_same: Option<(f64, f64)>,
    pub(crate) pickup_cross: Option<(f64, f64)>,
}

/// One verification.
#[derive(Debug, Clone)]
pub(crate) struct Check {
    pub(crate) what: String,
    pub(crate) ok: bool,
    pub(crate) detail: String,
}

/// The state of one bench run.
pub(crate) struct Bench<'a> {
    pub(crate) scratch: &'a Scratch,
    pub(crate) setup: MySqlPool,
    pub(crate) jobs: u32,
    pub(crate) concurrency: usize,
    pub(crate) batch_arg: Option<u32>,
    pub(crate) batch: u32,
    pub(crate) single_jobs: u32,
    pub(crate) pickup_jobs: u32,
    pub(crate) bar: ProgressBar,
    pub(crate) checks: Vec<Check>,
    pub(crate) peak_rss: Option<u64>,
    pub(crate) rss_reset: bool,
    pub(crate) diag: Diag,
    /// Set during the Redis scenario: the framework's workers serve the queue over it.
    pub(crate) redis: Option<mysqlq::redis::Redis>,
    /// `/proc/<pid>/stat` of the database server when it runs on this host (its CPU time per
    /// drained job is then reported), else `None`.
    pub(crate) server_stat: Option<String>,
}

/// Where the drain's time goes: claim and flush sizes and server counters, summed over the
/// drain runs of each [`Drainer`].
#[derive(Debug, Clone)]
pub(crate) struct Diag {
    pub(crate) sides: Vec<(Drainer, DiagSide)>,
    /// `job_queue`'s indexes, for the index entries each side changes per job (`None`: not
    /// read, no drain ran).
    pub(crate) indexes: Option<JobQueueIndexes>,
    /// The article's table's indexes, for [`Drainer::Article`].
    pub(crate) article_indexes: Option<JobQueueIndexes>,
}

impl Default for Diag {
    fn default() -> Self {
        Self {
            sides: Drainer::all()
                .into_iter()
                .map(|d| (d, DiagSide::default()))
                .collect(),
            indexes: None,
            article_indexes: None,
        }
    }
}

#[derive(Debug, Default, Clone)]
pub(crate) struct DiagSide {
    pub(crate) jobs: u64,
    /// Claim transactions.
    pub(crate) claims: u64,
    /// Statements that wrote completions.
    pub(crate) flushes: u64,
    /// Completions written inside a claim's transaction.
    pub(crate) piggybacked: u64,
    /// [`sql::BENCH_STATUS`] deltas (`None`: the server lacks the counter).
    pub(crate) status: Vec<Option<i64>>,
    /// CPU seconds of this process over the side's runs (the drainer, plus the bench's own
    /// small share: its probe and progress bar).
    pub(crate) client_cpu_s: Option<f64>,
    /// CPU seconds of the database server over the side's runs (`None`: not on this host).
    pub(crate) server_cpu_s: Option<f64>,
}

/// CPU seconds of one drain run: this process's and the server's (see [`DiagSide`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RunCpu {
    pub(crate) client_s: Option<f64>,
    pub(crate) server_s: Option<f64>,
}

#[allow(clippy::cast_precision_loss)]
fn div(a: u64, b: u64, places: i32) -> Option<f64> {
    (b > 0).then(|| round_to(a as f64 / b as f64, places))
}

impl Diag {
    pub(crate) fn add(
        &mut self,
        who: Drainer,
        jobs: u64,
        run: &DrainRun,
        (status, cpu): (&[Option<i64>], RunCpu),
    ) {
        let Some((_, s)) = self.sides.iter_mut().find(|(d, _)| *d == who) else {
            return;
        };
        s.jobs += jobs;
        s.claims += run.claims;
        s.flushes += run.flushes;
        s.piggybacked += run.piggybacked;
        let first = s.jobs == jobs;
        let sum = |total: Option<f64>, run: Option<f64>| match first {
            true => run,
            false => total.zip(run).map(|(a, b)| a + b),
        };
        s.client_cpu_s = sum(s.client_cpu_s, cpu.client_s);
        s.server_cpu_s = sum(s.server_cpu_s, cpu.server_s);
        if s.status.is_empty() {
            s.status = status.to_vec();
        } else {
            for (a, b) in s.status.iter_mut().zip(status) {
                *a = a.zip(*b).map(|(a, b)| a + b);
            }
        }
    }

    /// The `diagnostics` object: per drainer with runs, its totals and ratios.
    pub(crate) fn json(&self) -> Value {
        let mut out = serde_json::Map::new();
        for (who, s) in &self.sides {
            if s.jobs == 0 {
                continue;
            }
            let counter = |name: &str| {
                sql::BENCH_STATUS
                    .iter()
                    .position(|n| *n == name)
                    .and_then(|i| s.status.get(i).copied().flatten())
            };
            #[allow(clippy::cast_precision_loss)]
            let per_job = |v: Option<i64>| v.map(|v| round_to(v as f64 / s.jobs as f64, 4));
            #[allow(clippy::cast_precision_loss)]
            let us_per_job = |cpu: Option<f64>| cpu.map(|c| round_to(c * 1e6 / s.jobs as f64, 1));
            let mut counters = serde_json::Map::new();
            let mut missing = Vec::new();
            for name in sql::BENCH_STATUS {
                let v = counter(name);
                if v.is_none() {
                    missing.push(name);
                }
                counters.insert(name.to_owned(), json!(per_job(v)));
            }
            out.insert(
                who.key(),
                json!({
                    "jobs": s.jobs,
                    "claim_transactions": s.claims,
                    "completion_flushes": s.flushes,
                    "piggybacked_completions": s.piggybacked,
                    "jobs_per_claim": div(s.jobs, s.claims, 2),
                    "jobs_per_flush": div(s.jobs, s.flushes, 2),
                    "commits_per_job": per_job(counter("Handler_commit")),
                    "fsyncs_per_job": per_job(counter("Innodb_data_fsyncs")),
                    "log_fsyncs_per_job": per_job(counter("Innodb_os_log_fsyncs")),
                    "client_cpu_us_per_job": us_per_job(s.client_cpu_s),
                    "server_cpu_us_per_job": us_per_job(s.server_cpu_s),
                    "server_counters_per_job": counters,
                    "server_counters_missing": missing,
                    "secondary_index_entries": match who.table() {
                        RawTable::JobQueue => self.indexes.as_ref(),
                        RawTable::Article => self.article_indexes.as_ref(),
                    }
                        .map_or(Value::Null, |i| i.per_job(who.writes())),
                }),
            );
        }
        Value::Object(out)
    }
}

/// `bench`. Returns exit code 0, or 1 when a verification failed (after printing the results).
pub(crate) async fn bench(url: &str, a: &BenchArgs) -> Result<u8, BenchError> {
    if a.scenario == Scenario::Scaling {
        let dir = a.plot.parent().filter(|d| !d.as_os_str().is_empty());
        if dir.is_some_and(|d| !d.is_dir()) {
            return Err(BenchError::usage(
                format!("no directory for the plot {}", a.plot.display()),
                "pass --plot with a path in an existing directory",
            ));
        }
    }
    let admin = db::pool(url, 2).await?;
    let server = {
        let mut conn = db::acquire(&admin).await?;
        sql::bench_server(&mut conn)
            .await
            .map_err(db_err("cannot read the server settings"))?
    };
    let name = format!("mysqlq_bench_{:016x}", fastrand::u64(..));
    {
        let mut conn = db::acquire(&admin).await?;
        sql::bench_create_database(&mut conn, &name)
            .await
            .map_err(|e| {
                BenchError::db(
                    "cannot create the bench's scratch database (the user needs CREATE and DROP)",
                    &e,
                )
            })?;
    }
    let scratch_url = db::with_database(url, &name);
    let scratch = Scratch {
        url: scratch_url,
        name,
        pools: Mutex::new(Vec::new()),
    };
    let outcome = tokio::select! {
        r = run(&scratch, a) => r,
        () = interrupted() => Err(BenchError::new(
            "bench interrupted",
            "nothing to clean up: its scratch database was dropped; run it again",
        )),
    };
    let dropped = scratch.drop_database(&admin).await;
    admin.close().await;
    if let Err(e) = &dropped {
        eprintln!(
            "warning: {e}; drop it by hand: DROP DATABASE `{}`",
            scratch.name
        );
    }
    let (fw, bl, bench) = outcome?;
    let report = Report {
        server,
        database: scratch.name.clone(),
        dropped: dropped.is_ok(),
        args: a,
        fw,
        bl,
        bench,
    };
    let passed = report.bench.checks.iter().all(|c| c.ok);
    if a.json {
        println!("{}", report.json());
    } else {
        print!("{}", report.human());
    }
    if let Some(Err(e)) = report.bench.scaling.as_ref().map(|s| &s.plot) {
        eprintln!("error: {e}");
        return Ok(1);
    }
    if passed {
        Ok(0)
    } else {
        eprintln!(
            "error: the exactly-once verification failed (see the checks above); this is a bug in mysqlq or the baseline: report it with the output"
        );
        Ok(1)
    }
}

/// Summary data of a finished run, detached from the database.
pub(crate) struct Finished {
    pub(crate) jobs: u32,
    pub(crate) concurrency: usize,
    pub(crate) batch: u32,
    pub(crate) single_jobs: u32,
    pub(crate) pickup_jobs: u32,
    pub(crate) checks: Vec<Check>,
    pub(crate) peak_rss: Option<u64>,
    pub(crate) rss_reset: bool,
    pub(crate) diag: Diag,
    /// Per drain round: framework jobs/s over the round's best baseline.
    pub(crate) drain_ratios: Vec<f64>,
    pub(crate) redis: crate::scenario::redis::RedisSide,
    /// The periodic scenario (`None`: not run).
    pub(crate) periodic: Option<crate::scenario::periodic::PeriodicRun>,
    /// The workflow scenario (`None`: not run).
    pub(crate) workflow: Option<crate::scenario::workflow::WorkflowRun>,
    /// The rate scenario (`None`: not run).
    pub(crate) rate: Option<crate::scenario::rate::RateRun>,
    /// The dashboard scenario (`None`: not run).
    pub(crate) dashboard: Option<crate::scenario::dashboard::DashboardRun>,
    /// The scaling scenario (`None`: not run).
    pub(crate) scaling: Option<crate::scenario::scaling::ScalingRun>,
}

pub(crate) async fn run(
    scratch: &Scratch,
    a: &BenchArgs,
) -> Result<(Side, Side, Finished), BenchError> {
    let setup = scratch.pool(2).await?;
    mysqlq::migrate(&setup)
        .await
        .map_err(q_err("cannot migrate the bench database"))?;
    if let Some(sql) = &a.after_migrate {
        for statement in sql.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            eprintln!("--after-migrate (an experiment on the schema): {statement}");
            sqlx::raw_sql(sqlx::AssertSqlSafe(statement.to_owned()))
                .execute(&setup)
                .await
                .map_err(|e| {
                    BenchError::db(&format!("--after-migrate failed on `{statement}`"), &e)
                })?;
        }
    }
    let mut b = Bench {
        scratch,
        setup,
        jobs: a.jobs,
        concurrency: usize::from(a.concurrency()),
        batch_arg: a.batch,
        batch: a.batch.unwrap_or(WorkerConfig::DEFAULT_BATCH_SIZE),
        single_jobs: a.jobs.min(SINGLE_MAX),
        pickup_jobs: (a.jobs / 100).clamp(20, 100),
        bar: progress(),
        checks: Vec::new(),
        peak_rss: None,
        rss_reset: false,
        diag: Diag::default(),
        redis: None,
        server_stat: None,
    };
    {
        let mut conn = db::acquire(&b.setup).await?;
        b.server_stat = sql::bench_server_pid(&mut conn)
            .await
            .map(|pid| format!("/proc/{pid}/stat"));
    }
    let mut fw = Side::default();
    let mut bl = Side::default();
    let wants = |s: Scenario| a.scenario == s || a.scenario == Scenario::All;
    // Drain first: the worker's peak memory is then least mixed with the bench's own.
    let mut drain_ratios = Vec::new();
    if wants(Scenario::Drain) {
        b.diag.indexes = Some(b.job_queue_indexes().await?);
        b.diag.article_indexes = Some(b.indexes_of(RawTable::Article).await?);
        bl.drain_loops = vec![Vec::new(); BASELINE_LOOPS.len()];
        bl.article_loops = vec![Vec::new(); ARTICLE_LOOPS.len()];
        fw.drain_variants = vec![Vec::new(); FRAMEWORK_VARIANTS.len()];
        for round in 0..a.rounds() {
            let mut framework = 0.0;
            let mut best: f64 = 0.0;
            for who in Drainer::round(round) {
                let rate = b.drain(who, round).await?;
                match who {
                    Drainer::Framework(v) => {
                        if let Some(i) = FRAMEWORK_VARIANTS.iter().position(|&w| w == v) {
                            fw.drain_variants[i].push(rate);
                        }
                        if v == FRAMEWORK_VARIANTS[0] {
                            framework = rate;
                        }
                    }
                    Drainer::Baseline(loops) => {
                        if let Some(i) = BASELINE_LOOPS.iter().position(|&l| l == loops) {
                            bl.drain_loops[i].push(rate);
                        }
                        best = best.max(rate);
                    }
                    Drainer::Article(loops) => {
                        if let Some(i) = ARTICLE_LOOPS.iter().position(|&l| l == loops) {
                            bl.article_loops[i].push(rate);
                        }
                    }
                }
            }
            fw.drain.push(framework);
            bl.drain.push(best);
            if best > 0.0 {
                drain_ratios.push(framework / best);
            }
        }
    }
    if wants(Scenario::Enqueue) {
        for round in 0..a.rounds() {
            for framework in abba(round) {
                let rate = b.enqueue_single(framework, round).await?;
                side(&mut fw, &mut bl, framework).enqueue_single.push(rate);
            }
        }
        for round in 0..a.rounds() {
            for framework in abba(round) {
                let rate = b.enqueue_bulk(framework, round).await?;
                side(&mut fw, &mut bl, framework).enqueue_bulk.push(rate);
            }
        }
    }
    if wants(Scenario::Pickup) {
        // What an idle consumer sends to the server, counted by a proxy in front of its pool.
        for framework in [true, false] {
            let rate = b.idle(framework).await?;
            side(&mut fw, &mut bl, framework).idle_statements = Some(rate);
        }
        for cross in [false, true] {
            for framework in [true, false] {
                let p = b.pickup(framework, cross).await?;
                let s = side(&mut fw, &mut bl, framework);
                if cross {
                    s.pickup_cross = Some(p);
                } else {
                    s.pickup_same = Some(p);
                }
            }
        }
    }
    let periodic = if wants(Scenario::Periodic) {
        Some(b.periodic(a.periodic_seconds).await?)
    } else {
        None
    };
    let workflow = if wants(Scenario::Workflow) {
        Some(
            b.workflow(
                a.concurrency.map_or(WORKFLOW_CONCURRENCY, usize::from),
                a.rounds.unwrap_or(WORKFLOW_ROUNDS),
            )
            .await?,
        )
    } else {
        None
    };
    let rate = if wants(Scenario::Rate) {
        Some(
            b.rate(RateSettings {
                secs: a.rate_secs,
                plain_secs: a.rate_plain_secs,
                plain_jobs: a.rate_plain_jobs,
                hol_jobs: a.rate_hol_jobs,
                concurrency: a.concurrency.unwrap_or(RATE_CONCURRENCY),
            })
            .await?,
        )
    } else {
        None
    };
    // Only when asked for: it writes a million rows first.
    let dashboard = if a.scenario == Scenario::Dashboard {
        Some(b.dashboard(a.rows).await?)
    } else {
        None
    };
    // Only when asked for: it writes a plot.
    let scaling = if a.scenario == Scenario::Scaling {
        Some(
            b.scaling(a.rounds(), a.concurrency(), a.plot.clone())
                .await?,
        )
    } else {
        None
    };
    let over_redis = match (&a.redis_url, a.scenario) {
        (Some(url), Scenario::Redis | Scenario::All) => b.redis_runs(url, a.rounds()).await?,
        (None, Scenario::Redis) => {
            return Err(BenchError::new(
                "--scenario redis needs a Redis",
                "pass --redis-url redis://127.0.0.1:6379 (or set MYSQLQ_REDIS_URL)",
            ));
        }
        _ => crate::scenario::redis::RedisSide::default(),
    };
    b.bar.finish_and_clear();
    b.setup.close().await;
    Ok((
        fw,
        bl,
        Finished {
            jobs: b.jobs,
            concurrency: b.concurrency,
            batch: b.batch,
            single_jobs: b.single_jobs,
            pickup_jobs: b.pickup_jobs,
            checks: b.checks,
            peak_rss: b.peak_rss,
            rss_reset: b.rss_reset,
            diag: b.diag,
            drain_ratios,
            redis: over_redis,
            periodic,
            workflow,
            rate,
            dashboard,
            scaling,
        },
    ))
}

/// Round `r`'s order: framework first on even rounds, baseline first on odd ones.
pub(crate) fn abba(round: u32) -> [bool; 2] {
    if round.is_multiple_of(2) {
        [true, false]
    } else {
        [false, true]
    }
}

pub(crate) fn side<'s>(fw: &'s mut Side, bl: &'s mut Side, framework: bool) -> &'s mut Side {
    if framework { fw } else { bl }
}

pub(crate) fn who(framework: bool) -> &'static str {
    if framework { "framework" } else { "baseline" }
}

/// Server counters `after - before`, by position (`None` where either lacks the counter).
pub(crate) fn status_delta(after: &[Option<i64>], before: &[Option<i64>]) -> Vec<Option<i64>> {
    after
        .iter()
        .zip(before)
        .map(|(a, b)| Some((*a)? - (*b)?))
        .collect()
}

pub(crate) fn per_s(n: u32, took: Duration) -> f64 {
    f64::from(n) / took.as_secs_f64().max(1e-9)
}

impl Bench<'_> {
    pub(crate) fn phase(&self, label: &str, len: u32) {
        self.bar.set_message(label.to_owned());
        self.bar.set_length(u64::from(len));
        self.bar.set_position(0);
    }

    pub(crate) fn check(&mut self, what: String, result: Result<String, String>) {
        let (ok, detail) = match result {
            Ok(d) => (true, d),
            Err(d) => (false, d),
        };
        self.checks.push(Check { what, ok, detail });
    }

    pub(crate) async fn reset(&self) -> Result<(), BenchError> {
        let mut conn = db::acquire(&self.setup).await?;
        sql::bench_reset(&mut conn)
            .await
            .map_err(db_err("cannot empty the bench's job_queue"))
    }

    /// CPU seconds used so far by this process and by the server (when on this host).
    pub(crate) fn cpu_now(&self) -> RunCpu {
        RunCpu {
            client_s: crate::scenario::child::cpu_seconds(),
            server_s: self
                .server_stat
                .as_deref()
                .and_then(crate::scenario::child::cpu_seconds_at),
        }
    }

    pub(crate) async fn status(&self) -> Result<Vec<Option<i64>>, BenchError> {
        let mut conn = db::acquire(&self.setup).await?;
        sql::bench_status(&mut conn)
            .await
            .map_err(db_err("cannot read the server's status counters"))
    }

    /// `job_queue`'s secondary indexes in the scratch database, as migrated.
    pub(crate) async fn job_queue_indexes(&self) -> Result<JobQueueIndexes, BenchError> {
        self.indexes_of(RawTable::JobQueue).await
    }

    /// The secondary indexes of `table` (the article's is created first when missing).
    pub(crate) async fn indexes_of(&self, table: RawTable) -> Result<JobQueueIndexes, BenchError> {
        let mut conn = db::acquire(&self.setup).await?;
        if table == RawTable::Article {
            sqlx::query(sql::ARTICLE_TABLE)
                .execute(&mut *conn)
                .await
                .map_err(db_err("cannot create the article's table"))?;
        }
        let parts = sql::bench_job_queue_indexes(&mut conn, table)
            .await
            .map_err(db_err("cannot read job_queue's indexes"))?;
        let columns = sql::bench_job_queue_columns(&mut conn, table)
            .await
            .map_err(db_err("cannot read job_queue's columns"))?;
        Ok(JobQueueIndexes::new(&parts, &columns))
    }

    pub(crate) async fn counts(&self) -> Result<sql::BenchCounts, BenchError> {
        self.counts_in(RawTable::JobQueue).await
    }

    pub(crate) async fn counts_in(&self, table: RawTable) -> Result<sql::BenchCounts, BenchError> {
        let mut conn = db::acquire(&self.setup).await?;
        sql::bench_counts(&mut conn, table, QUEUE)
            .await
            .map_err(db_err("cannot count the bench's jobs"))
    }

    /// Checks the rows after a run that completed `n` jobs: all `completed`, one claim each.
    pub(crate) async fn check_rows_completed(
        &mut self,
        what: &str,
        n: u32,
    ) -> Result<(), BenchError> {
        self.check_rows_completed_in(what, RawTable::JobQueue, n)
            .await
    }

    /// [`Self::check_rows_completed`] of the rows of `table`.
    pub(crate) async fn check_rows_completed_in(
        &mut self,
        what: &str,
        table: RawTable,
        n: u32,
    ) -> Result<(), BenchError> {
        let c = self.counts_in(table).await?;
        let n = i64::from(n);
        let detail = format!(
            "{} rows, {} completed, {} claims",
            c.rows, c.completed, c.attempts
        );
        let ok = c.rows == n && c.completed == n && c.attempts == n;
        self.check(
            format!("{what}: rows"),
            if ok { Ok(detail) } else { Err(detail) },
        );
        Ok(())
    }

    /// Checks the rows after a run by a side that deletes what it completes: none left.
    pub(crate) async fn check_rows_deleted(&mut self, what: &str) -> Result<(), BenchError> {
        let c = self.counts().await?;
        let detail = format!("{} rows left, {} completed", c.rows, c.completed);
        self.check(
            format!("{what}: rows"),
            if c.rows == 0 { Ok(detail) } else { Err(detail) },
        );
        Ok(())
    }

    /// Empties the queue and enqueues `n` jobs with the framework's bulk enqueue (untimed).
    pub(crate) async fn prepare(&self, label: &str, n: u32) -> Result<Vec<u64>, BenchError> {
        self.reset().await?;
        self.phase(&format!("{label}: enqueueing"), n);
        let mut ids = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
        let seqs: Vec<u64> = (0..u64::from(n)).collect();
        for chunk in seqs.chunks(PREPARE_CHUNK) {
            let jobs = chunk
                .iter()
                .map(|&seq| NewJob::from_job(&BenchNoop { seq }, &EnqueueOptions::new()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(q_err("cannot build the bench jobs"))?;
            let done = mysqlq::enqueue_many(&self.setup, jobs)
                .await
                .map_err(q_err("cannot enqueue the bench jobs"))?;
            ids.extend(done.iter().map(|e| e.id().0));
            self.bar.inc(chunk.len() as u64);
        }
        Ok(ids)
    }

    /// The framework's worker on the bench queue ([`worker_builder`]), over Redis during the
    /// Redis scenario.
    pub(crate) fn worker(
        &self,
        pool: &MySqlPool,
        probe: &Arc<Probe>,
    ) -> Result<WorkerBuilder, BenchError> {
        let builder = worker_builder(pool, probe, self.concurrency, self.batch_arg)?;
        Ok(match &self.redis {
            Some(r) => builder.redis(r.clone()),
            None => builder,
        })
    }

    /// Checks the rows after an enqueue run of `n` jobs: all written, none claimed.
    pub(crate) async fn check_rows_written(
        &mut self,
        what: &str,
        n: u32,
    ) -> Result<(), BenchError> {
        let c = self.counts().await?;
        let detail = format!("{} of {n} rows written", c.rows);
        let ok = c.rows == i64::from(n) && c.attempts == 0;
        self.check(
            format!("{what}: rows"),
            if ok { Ok(detail) } else { Err(detail) },
        );
        Ok(())
    }
}

/// The framework's worker on the bench queue: [`WorkerConfig::default`] in everything (claim
/// loops, batch, poll intervals, …) except what a flag set — the concurrency when it differs
/// from the worker's default, the batch when `--batch` is given — with the probe as its state.
pub(crate) fn worker_builder(
    pool: &MySqlPool,
    probe: &Arc<Probe>,
    concurrency: usize,
    batch: Option<u32>,
) -> Result<WorkerBuilder, BenchError> {
    let builder = Worker::builder(pool.clone())
        .registry(job::registry()?)
        .queues([QUEUE])
        .state(Arc::clone(probe));
    let builder = if concurrency == WorkerConfig::default().concurrency {
        builder
    } else {
        builder.concurrency(concurrency)
    };
    Ok(match batch {
        Some(b) => builder.batch_size(b),
        None => builder,
    })
}

/// Waits until `progress()` reaches `n`, updating `bar`; an error when it stops moving.
pub(crate) async fn wait_for(
    bar: &ProgressBar,
    n: u64,
    progress: impl Fn() -> u64,
) -> Result<(), BenchError> {
    let mut last = 0;
    let mut moved = Instant::now();
    loop {
        let now = progress();
        bar.set_position(now.min(n));
        if now >= n {
            return Ok(());
        }
        if now != last {
            last = now;
            moved = Instant::now();
        } else if moved.elapsed() > STALL {
            return Err(BenchError::new(
                format!(
                    "the run stalled at {now} of {n} jobs for {}s",
                    STALL.as_secs()
                ),
                "check the server (`mysqlq-cli doctor`) and the warnings above",
            ));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The progress bar on stderr, drawn only when stderr is a terminal (scripts and tests see none).
fn progress() -> ProgressBar {
    let target = if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let bar = ProgressBar::with_draw_target(Some(1), target);
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({per_sec}, {eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message("bench");
    bar
}
