//! `bench`: the framework beside a raw-SQL baseline, on the same server, in one run.
//!
//! Everything happens in a scratch database (`mysqlq_bench_<random>`) created on the server of
//! `DATABASE_URL`, migrated, and dropped afterwards — also after an error or Ctrl-C. Each
//! throughput scenario runs framework and baseline alternately in ABBA order (framework,
//! baseline, baseline, framework, …) so that drift (buffer pool warm-up, background flushing)
//! falls on both sides; `job_queue` is emptied before every run.
//!
//! - **enqueue single**: one row per autocommit call from `min(concurrency, 64)` tasks
//!   (framework: `BenchNoop { seq }.enqueue(&pool)`; baseline: a plain `INSERT`).
//! - **enqueue bulk**: all jobs in one call (framework: [`mysqlq::enqueue_many`], chunked by the
//!   framework; baseline: hand-written multi-row INSERTs of the same chunk size).
//! - **drain**: pre-enqueued no-op jobs (the handler bumps a per-job atomic counter); the
//!   framework is a real [`mysqlq::Worker`] with default settings except concurrency (and batch
//!   if given); the baseline is `concurrency` tasks looping the article's claim transaction and
//!   one token-guarded completion per batch ([`mysqlq::store::bench`]).
//! - **pickup**: an idle consumer, jobs enqueued one at a time at 20/s, latency from the
//!   enqueue's commit (the enqueue call returned) to the handler's start, both read from the
//!   host's wall clock. Same process (the framework wakes local workers on enqueue) and another
//!   process (a child of this binary, `bench-enqueue`, so no in-process wake-up can help). The
//!   baseline is a raw polling loop with the worker's default idle backoff (5 ms doubling to the
//!   1 s ceiling).
//!
//! Every run checks that each job ran exactly once and that its row is `completed` (or, for
//! enqueue runs, that every row was written).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use indicatif::ProgressBar;
use mysqlq::store::bench as sql;
use mysqlq::{EnqueueOptions, JobContext, JobError, NewJob, Registry, Worker, WorkerConfig};
use serde_json::{Value, json};
use sqlx::MySqlPool;
use tokio::io::AsyncBufReadExt as _;
use tokio::sync::Notify;
use tokio::task::JoinSet;

use crate::args::{BenchArgs, BenchEnqueueArgs, BenchScenario};
use crate::db::Target;
use crate::error::CliError;
use crate::out;

/// The queue of the bench job.
const QUEUE: &str = "mysqlq-bench";
/// The kind name of the bench job.
const KIND: &str = "mysqlq_bench_noop";
/// Most jobs of a single-row enqueue run.
const SINGLE_MAX: u32 = 5_000;
/// Most tasks enqueueing single rows at once.
const SINGLE_TASKS_MAX: usize = 64;
/// Pickup: jobs per second, one at a time.
const PICKUP_RATE: u32 = 20;
/// Most connections of the baseline drain (tasks beyond share them).
const BASELINE_POOL_MAX: u32 = 64;
/// Lease the baseline takes on claim, in seconds (the worker's default).
const LEASE_SECS: u32 = 60;
/// Rows per `enqueue_many` call when preparing a drain run (keeps the bench's own memory low).
const PREPARE_CHUNK: usize = 5_000;
/// A run that makes no progress for this long is an error.
const STALL: Duration = Duration::from_secs(60);

/// The bench's job: does nothing but count its run (and note when it started) in the probe the
/// bench gave the worker.
#[mysqlq::job(queue = "mysqlq-bench", name = "mysqlq_bench_noop")]
async fn bench_noop(ctx: JobContext, seq: u64) -> Result<(), JobError> {
    let _ = seq;
    if let Some(probe) = ctx.state::<Arc<Probe>>() {
        probe.ran(ctx.id().0);
    }
    Ok(())
}

/// The registry without the bench's own job (which is linked into every binary embedding the
/// CLI but is not one of the application's jobs).
pub(crate) fn without_bench_job(registry: Registry) -> Registry {
    if registry.get(KIND).is_none() {
        return registry;
    }
    let mut out = Registry::new();
    for r in registry.iter().filter(|r| r.kind() != KIND) {
        // Kinds were unique in `registry`, so they are here.
        let _ = out.add(*r);
    }
    out
}

fn bench_registry() -> Result<Registry, CliError> {
    Registry::new()
        .register::<BenchNoop>()
        .map_err(|e| CliError::mysqlq("cannot register the bench job", &e))
}

/// What the handlers (framework) and the baseline's inline "handler" record.
struct Probe {
    /// Expected ids, sorted (empty in timing mode).
    ids: Vec<u64>,
    /// Runs per expected id.
    counts: Vec<AtomicU32>,
    /// Runs of ids not expected.
    stray: AtomicU64,
    /// All runs.
    total: AtomicU64,
    /// Timing mode: (id, wall-clock µs at handler start).
    starts: Option<Mutex<Vec<(u64, i64)>>>,
}

impl Probe {
    fn counting(mut ids: Vec<u64>) -> Self {
        ids.sort_unstable();
        let counts = ids.iter().map(|_| AtomicU32::new(0)).collect();
        Self {
            ids,
            counts,
            stray: AtomicU64::new(0),
            total: AtomicU64::new(0),
            starts: None,
        }
    }

    fn timing() -> Self {
        Self {
            starts: Some(Mutex::new(Vec::new())),
            ..Self::counting(Vec::new())
        }
    }

    fn ran(&self, id: u64) {
        if let Some(starts) = &self.starts {
            let now = now_us();
            lock(starts).push((id, now));
        }
        match self.ids.binary_search(&id) {
            Ok(i) => {
                self.counts[i].fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                self.stray.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.total.fetch_add(1, Ordering::Relaxed);
    }

    fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// `Ok(detail)` when every expected id ran exactly once and nothing else ran.
    fn exactly_once(&self) -> Result<String, String> {
        let mut never = 0u64;
        let mut twice = 0u64;
        for c in &self.counts {
            match c.load(Ordering::Relaxed) {
                0 => never += 1,
                1 => {}
                _ => twice += 1,
            }
        }
        let stray = self.stray.load(Ordering::Relaxed);
        let detail = format!(
            "{} handler runs for {} jobs: {never} never ran, {twice} ran more than once, {stray} unexpected",
            self.total(),
            self.ids.len()
        );
        if never == 0 && twice == 0 && stray == 0 {
            Ok(detail)
        } else {
            Err(detail)
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Wall-clock microseconds since the Unix epoch.
fn now_us() -> i64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// A claim token: 36 characters like a UUID, from the client (never `UUID()` in SQL).
fn new_token() -> String {
    let x = fastrand::u128(..);
    let h = format!("{x:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

fn db_err(what: &str, e: sqlx::Error) -> CliError {
    CliError::mysqlq(what, &mysqlq::Error::Database(e))
}

fn q_err(what: &str) -> impl Fn(mysqlq::Error) -> CliError + '_ {
    move |e| CliError::mysqlq(what, &e)
}

/// `url` naming database `db` instead of its own.
fn with_database(url: &str, db: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("mysql", url));
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let query = tail.find(['?', '#']).map_or("", |i| &tail[i..]);
    format!("{scheme}://{authority}/{db}{query}")
}

/// The peak resident set (`VmHWM`) of this process, in bytes.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Resets `VmHWM` to the current resident set (Linux `clear_refs` value 5).
fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The scratch database and every pool opened on it (closed before the drop).
struct Scratch {
    name: String,
    url: String,
    target: Target,
    pools: Mutex<Vec<MySqlPool>>,
}

impl Scratch {
    async fn pool(&self, max: u32) -> Result<MySqlPool, CliError> {
        let pool = self.target.pool(max).await?;
        lock(&self.pools).push(pool.clone());
        Ok(pool)
    }

    /// Closes every pool (waiting a little for connections in use) and drops the database.
    async fn drop_database(&self, admin: &MySqlPool) -> Result<(), CliError> {
        let pools: Vec<MySqlPool> = lock(&self.pools).drain(..).collect();
        for p in pools {
            let _ = tokio::time::timeout(Duration::from_secs(5), p.close()).await;
        }
        let mut conn = crate::db::acquire(admin).await?;
        sql::bench_drop_database(&mut conn, &self.name, 10)
            .await
            .map_err(|e| {
                CliError::mysqlq(
                    &format!("cannot drop the bench database `{}`", self.name),
                    &e,
                )
            })
    }
}

/// Waits for SIGINT (Ctrl-C) or SIGTERM.
async fn interrupted() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// One side's results (`None`: not measured).
#[derive(Debug, Default, Clone)]
struct Side {
    enqueue_single: Vec<f64>,
    enqueue_bulk: Vec<f64>,
    drain: Vec<f64>,
    pickup_same: Option<(f64, f64)>,
    pickup_cross: Option<(f64, f64)>,
}

/// One verification.
#[derive(Debug, Clone)]
struct Check {
    what: String,
    ok: bool,
    detail: String,
}

/// The state of one bench run.
struct Bench<'a> {
    scratch: &'a Scratch,
    setup: MySqlPool,
    jobs: u32,
    concurrency: usize,
    batch_arg: Option<u32>,
    batch: u32,
    single_jobs: u32,
    pickup_jobs: u32,
    bar: ProgressBar,
    checks: Vec<Check>,
    peak_rss: Option<u64>,
    rss_reset: bool,
    diag: Diag,
}

/// Where the drain's time goes: server counters and claim sizes, summed over drain runs.
#[derive(Debug, Default, Clone)]
struct Diag {
    /// Per side (framework, baseline): jobs, claim queries, server counter deltas.
    sides: [DiagSide; 2],
}

#[derive(Debug, Default, Clone)]
struct DiagSide {
    jobs: u64,
    claims: u64,
    status: Vec<i64>,
}

impl Diag {
    fn add(&mut self, framework: bool, jobs: u64, claims: u64, status: &[i64]) {
        let s = &mut self.sides[usize::from(!framework)];
        s.jobs += jobs;
        s.claims += claims;
        if s.status.len() < status.len() {
            s.status.resize(status.len(), 0);
        }
        for (a, b) in s.status.iter_mut().zip(status) {
            *a += b;
        }
    }

    fn json(&self) -> Value {
        let mut out = serde_json::Map::new();
        for (i, name) in ["drain_framework", "drain_baseline"].iter().enumerate() {
            let s = &self.sides[i];
            if s.jobs == 0 {
                continue;
            }
            #[allow(clippy::cast_precision_loss)]
            let per = |x: f64| round_to(x / s.jobs as f64, 4);
            let mut per_job = serde_json::Map::new();
            for (k, v) in sql::BENCH_STATUS.iter().zip(&s.status) {
                #[allow(clippy::cast_precision_loss)]
                per_job.insert((*k).to_owned(), json!(per(*v as f64)));
            }
            #[allow(clippy::cast_precision_loss)]
            let jobs_per_claim = if s.claims == 0 {
                None
            } else {
                Some(round_to(s.jobs as f64 / s.claims as f64, 2))
            };
            out.insert(
                (*name).to_owned(),
                json!({
                    "jobs": s.jobs,
                    "claim_transactions": s.claims,
                    "jobs_per_claim": jobs_per_claim,
                    "server_counters_per_job": per_job,
                }),
            );
        }
        Value::Object(out)
    }
}

/// `bench`. Returns exit code 0, or 1 when a verification failed (after printing the results).
pub(crate) async fn bench(target: &Target, url: &str, a: &BenchArgs) -> Result<u8, CliError> {
    let admin = target.pool(2).await?;
    let server = {
        let mut conn = crate::db::acquire(&admin).await?;
        sql::bench_server(&mut conn)
            .await
            .map_err(q_err("cannot read the server settings"))?
    };
    let name = format!("mysqlq_bench_{:016x}", fastrand::u64(..));
    {
        let mut conn = crate::db::acquire(&admin).await?;
        sql::bench_create_database(&mut conn, &name)
            .await
            .map_err(|e| {
                CliError::mysqlq(
                    "cannot create the bench's scratch database (the user needs CREATE and DROP)",
                    &e,
                )
            })?;
    }
    let scratch_url = with_database(url, &name);
    let scratch = Scratch {
        target: Target::new(Some(&scratch_url))?,
        url: scratch_url,
        name,
        pools: Mutex::new(Vec::new()),
    };
    let outcome = tokio::select! {
        r = run(&scratch, a) => r,
        () = interrupted() => Err(CliError::new(
            "bench interrupted",
            "nothing to clean up: its scratch database was dropped; run it again",
        )),
    };
    let dropped = scratch.drop_database(&admin).await;
    admin.close().await;
    if let Err(e) = &dropped {
        out::warn(&format!(
            "{e}; drop it by hand: DROP DATABASE `{}`",
            scratch.name
        ));
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
struct Finished {
    jobs: u32,
    concurrency: usize,
    batch: u32,
    single_jobs: u32,
    pickup_jobs: u32,
    checks: Vec<Check>,
    peak_rss: Option<u64>,
    rss_reset: bool,
    diag: Diag,
}

async fn run(scratch: &Scratch, a: &BenchArgs) -> Result<(Side, Side, Finished), CliError> {
    let setup = scratch.pool(2).await?;
    mysqlq::migrate(&setup)
        .await
        .map_err(q_err("cannot migrate the bench database"))?;
    let mut b = Bench {
        scratch,
        setup,
        jobs: a.jobs,
        concurrency: usize::from(a.concurrency),
        batch_arg: a.batch,
        batch: a.batch.unwrap_or(WorkerConfig::DEFAULT_BATCH_SIZE),
        single_jobs: a.jobs.min(SINGLE_MAX),
        pickup_jobs: (a.jobs / 100).clamp(20, 100),
        bar: out::progress(Some(1), "bench"),
        checks: Vec::new(),
        peak_rss: None,
        rss_reset: false,
        diag: Diag::default(),
    };
    let mut fw = Side::default();
    let mut bl = Side::default();
    let wants = |s: BenchScenario| a.scenario == s || a.scenario == BenchScenario::All;
    // Drain first: the worker's peak memory is then least mixed with the bench's own.
    if wants(BenchScenario::Drain) {
        for round in 0..a.rounds {
            for framework in abba(round) {
                let rate = b.drain(framework, round).await?;
                side(&mut fw, &mut bl, framework).drain.push(rate);
            }
        }
    }
    if wants(BenchScenario::Enqueue) {
        for round in 0..a.rounds {
            for framework in abba(round) {
                let rate = b.enqueue_single(framework, round).await?;
                side(&mut fw, &mut bl, framework).enqueue_single.push(rate);
            }
        }
        for round in 0..a.rounds {
            for framework in abba(round) {
                let rate = b.enqueue_bulk(framework, round).await?;
                side(&mut fw, &mut bl, framework).enqueue_bulk.push(rate);
            }
        }
    }
    if wants(BenchScenario::Pickup) {
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
        },
    ))
}

/// Round `r`'s order: framework first on even rounds, baseline first on odd ones.
fn abba(round: u32) -> [bool; 2] {
    if round.is_multiple_of(2) {
        [true, false]
    } else {
        [false, true]
    }
}

fn side<'s>(fw: &'s mut Side, bl: &'s mut Side, framework: bool) -> &'s mut Side {
    if framework { fw } else { bl }
}

fn who(framework: bool) -> &'static str {
    if framework { "framework" } else { "baseline" }
}

fn per_s(n: u32, took: Duration) -> f64 {
    f64::from(n) / took.as_secs_f64().max(1e-9)
}

impl Bench<'_> {
    fn phase(&self, label: &str, len: u32) {
        self.bar.set_message(label.to_owned());
        self.bar.set_length(u64::from(len));
        self.bar.set_position(0);
    }

    fn check(&mut self, what: String, result: Result<String, String>) {
        let (ok, detail) = match result {
            Ok(d) => (true, d),
            Err(d) => (false, d),
        };
        self.checks.push(Check { what, ok, detail });
    }

    async fn reset(&self) -> Result<(), CliError> {
        let mut conn = crate::db::acquire(&self.setup).await?;
        sql::bench_reset(&mut conn)
            .await
            .map_err(q_err("cannot empty the bench's job_queue"))
    }

    async fn status(&self) -> Result<Vec<i64>, CliError> {
        let mut conn = crate::db::acquire(&self.setup).await?;
        sql::bench_status(&mut conn)
            .await
            .map_err(q_err("cannot read the server's status counters"))
    }

    async fn counts(&self) -> Result<sql::BenchCounts, CliError> {
        let mut conn = crate::db::acquire(&self.setup).await?;
        sql::bench_counts(&mut conn, QUEUE)
            .await
            .map_err(q_err("cannot count the bench's jobs"))
    }

    /// Checks the rows after a run that completed `n` jobs: all `completed`, one claim each.
    async fn check_rows_completed(&mut self, what: &str, n: u32) -> Result<(), CliError> {
        let c = self.counts().await?;
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

    /// Empties the queue and enqueues `n` jobs with the framework's bulk enqueue (untimed).
    async fn prepare(&self, label: &str, n: u32) -> Result<Vec<u64>, CliError> {
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

    /// One drain run; returns jobs/s.
    async fn drain(&mut self, framework: bool, round: u32) -> Result<f64, CliError> {
        let n = self.jobs;
        let label = format!("drain {} round {}", who(framework), round + 1);
        let ids = self.prepare(&label, n).await?;
        let probe = Arc::new(Probe::counting(ids));
        self.phase(&label, n);
        let before = self.status().await?;
        let (took, claims) = if framework {
            self.drain_framework(&probe).await?
        } else {
            self.drain_baseline(&probe).await?
        };
        let after = self.status().await?;
        let delta: Vec<i64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        self.diag.add(framework, u64::from(n), claims, &delta);
        self.check(format!("{label}: handlers"), probe.exactly_once());
        self.check_rows_completed(&label, n).await?;
        Ok(per_s(n, took))
    }

    async fn drain_framework(&mut self, probe: &Arc<Probe>) -> Result<(Duration, u64), CliError> {
        let n = u64::from(self.jobs);
        let pool = self
            .scratch
            .pool(Worker::recommended_pool_size(self.concurrency))
            .await?;
        let mut builder = Worker::builder(pool.clone())
            .registry(bench_registry()?)
            .queues([QUEUE])
            .concurrency(self.concurrency)
            .state(probe.clone());
        if let Some(b) = self.batch_arg {
            builder = builder.batch_size(b);
        }
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
        let lost = metrics.counters.lost.load(Ordering::Relaxed);
        let claims = metrics.counters.polls.load(Ordering::Relaxed);
        let _ = handle.shutdown().await;
        pool.close().await;
        waited?;
        if lost > 0 {
            self.check(
                "drain framework: ownership".to_owned(),
                Err(format!("{lost} completions refused (lease lost)")),
            );
        }
        Ok((took, claims))
    }

    async fn drain_baseline(&mut self, probe: &Arc<Probe>) -> Result<(Duration, u64), CliError> {
        let c = self.concurrency;
        let max = u32::try_from(c).unwrap_or(u32::MAX).min(BASELINE_POOL_MAX);
        let pool = self.scratch.pool(max).await?;
        let worker = format!("bench-baseline:{}", std::process::id());
        let lost = Arc::new(AtomicU64::new(0));
        let claims = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let mut tasks = JoinSet::new();
        for _ in 0..c {
            let (pool, probe, worker, lost, claims, bar) = (
                pool.clone(),
                probe.clone(),
                worker.clone(),
                lost.clone(),
                claims.clone(),
                self.bar.clone(),
            );
            let batch = self.batch;
            tasks.spawn(async move {
                baseline_drain_loop(&pool, &probe, batch, &worker, (&lost, &claims), &bar).await
            });
        }
        let mut result = Ok(());
        while let Some(r) = tasks.join_next().await {
            let r = match r {
                Ok(r) => r,
                // Aborted after another task's error, which is the one reported.
                Err(e) if e.is_cancelled() => continue,
                Err(e) => Err(CliError::new(
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
        let lost = lost.load(Ordering::Relaxed);
        if lost > 0 {
            self.check(
                "drain baseline: ownership".to_owned(),
                Err(format!("{lost} completions refused (token no longer held)")),
            );
        }
        Ok((took, claims.load(Ordering::Relaxed)))
    }

    /// One single-row enqueue run; returns jobs/s.
    async fn enqueue_single(&mut self, framework: bool, round: u32) -> Result<f64, CliError> {
        let n = self.single_jobs;
        let label = format!("enqueue single {} round {}", who(framework), round + 1);
        self.reset().await?;
        self.phase(&label, n);
        let tasks = self
            .concurrency
            .min(SINGLE_TASKS_MAX)
            .min(usize::try_from(n).unwrap_or(usize::MAX));
        let pool = self.scratch.pool(u32::try_from(tasks).unwrap_or(1)).await?;
        let next = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let mut set = JoinSet::new();
        for _ in 0..tasks {
            let (pool, next, bar) = (pool.clone(), next.clone(), self.bar.clone());
            set.spawn(async move {
                loop {
                    let seq = next.fetch_add(1, Ordering::Relaxed);
                    if seq >= u64::from(n) {
                        return Ok::<(), CliError>(());
                    }
                    if framework {
                        BenchNoop { seq }
                            .enqueue(&pool)
                            .await
                            .map_err(q_err("enqueue failed"))?;
                    } else {
                        let payload = format!("{{\"seq\":{seq}}}");
                        let mut conn = crate::db::acquire(&pool).await?;
                        sql::bench_insert_one(&mut conn, QUEUE, KIND, &payload)
                            .await
                            .map_err(q_err("baseline INSERT failed"))?;
                    }
                    bar.inc(1);
                }
            });
        }
        let mut result = Ok(());
        while let Some(r) = set.join_next().await {
            if let Ok(Err(e)) = r
                && result.is_ok()
            {
                set.abort_all();
                result = Err(e);
            }
        }
        let took = started.elapsed();
        pool.close().await;
        result?;
        self.check_rows_written(&label, n).await?;
        Ok(per_s(n, took))
    }

    /// One bulk enqueue run; returns jobs/s.
    async fn enqueue_bulk(&mut self, framework: bool, round: u32) -> Result<f64, CliError> {
        let n = self.jobs;
        let label = format!("enqueue bulk {} round {}", who(framework), round + 1);
        self.reset().await?;
        self.phase(&label, n);
        let pool = self.scratch.pool(1).await?;
        let started = Instant::now();
        let result = if framework {
            bulk_framework(&pool, n).await
        } else {
            bulk_baseline(&pool, n, &self.bar).await
        };
        let took = started.elapsed();
        pool.close().await;
        result?;
        self.bar.set_position(u64::from(n));
        self.check_rows_written(&label, n).await?;
        Ok(per_s(n, took))
    }

    async fn check_rows_written(&mut self, what: &str, n: u32) -> Result<(), CliError> {
        let c = self.counts().await?;
        let detail = format!("{} of {n} rows written", c.rows);
        let ok = c.rows == i64::from(n) && c.attempts == 0;
        self.check(
            format!("{what}: rows"),
            if ok { Ok(detail) } else { Err(detail) },
        );
        Ok(())
    }

    /// One pickup run; returns (p50, p99) in milliseconds.
    async fn pickup(&mut self, framework: bool, cross: bool) -> Result<(f64, f64), CliError> {
        let n = self.pickup_jobs;
        let label = format!(
            "pickup {} {}",
            who(framework),
            if cross {
                "cross-process"
            } else {
                "same process"
            }
        );
        self.reset().await?;
        self.phase(&format!("{label}: idling"), n);
        let probe = Arc::new(Probe::timing());
        let pool = self
            .scratch
            .pool(Worker::recommended_pool_size(self.concurrency))
            .await?;
        let stop = Arc::new((AtomicBool::new(false), Notify::new()));
        let (worker, poller) = if framework {
            let mut builder = Worker::builder(pool.clone())
                .registry(bench_registry()?)
                .queues([QUEUE])
                .concurrency(self.concurrency)
                .state(probe.clone());
            if let Some(b) = self.batch_arg {
                builder = builder.batch_size(b);
            }
            let h = builder
                .start()
                .await
                .map_err(q_err("the bench worker could not start"))?;
            (Some(h), None)
        } else {
            let (pool, probe, stop, batch) =
                (pool.clone(), probe.clone(), stop.clone(), self.batch);
            (
                None,
                Some(tokio::spawn(async move {
                    baseline_poller(&pool, &probe, batch, &stop).await
                })),
            )
        };
        // Let the consumer reach its idle poll interval.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        self.bar.set_message(label.clone());
        let commits = if cross {
            self.enqueue_in_child(n, !framework).await
        } else {
            let epool = self.scratch.pool(1).await?;
            let bar = self.bar.clone();
            let r = enqueue_paced(&epool, n, PICKUP_RATE, !framework, |_, _| bar.inc(1)).await;
            epool.close().await;
            r
        };
        let total = u64::from(n);
        let waited = match &commits {
            Ok(_) => {
                let p = probe.clone();
                wait_for(&ProgressBar::hidden(), total, move || p.total()).await
            }
            Err(_) => Ok(()),
        };
        // Let the framework's completer write the last completions before stopping.
        if let Some(h) = worker {
            let m = h.metrics();
            let _ = wait_for(&ProgressBar::hidden(), total, || {
                m.counters.completions.load(Ordering::Relaxed)
            })
            .await;
            let _ = h.shutdown().await;
        }
        if let Some(p) = poller {
            stop.0.store(true, Ordering::SeqCst);
            stop.1.notify_waiters();
            match p.await {
                Ok(Err(e)) => return Err(e),
                Err(e) => {
                    return Err(CliError::new(
                        format!("the baseline poller failed: {e}"),
                        "this is a bug in the bench",
                    ));
                }
                Ok(Ok(())) => {}
            }
        }
        pool.close().await;
        let commits = commits?;
        waited?;
        let starts = lock(probe.starts.as_ref().expect("timing probe")).clone();
        let mut latencies = Vec::with_capacity(commits.len());
        let mut wrong = 0usize;
        for (id, committed) in &commits {
            let mine: Vec<i64> = starts
                .iter()
                .filter(|(i, _)| i == id)
                .map(|(_, t)| *t)
                .collect();
            if mine.len() != 1 {
                wrong += 1;
            }
            if let Some(t) = mine.first() {
                let us = (t - committed).max(0);
                #[allow(clippy::cast_precision_loss)]
                latencies.push(us as f64 / 1000.0);
            }
        }
        let detail = format!(
            "{} handler runs for {} jobs enqueued one at a time, {wrong} not run exactly once",
            starts.len(),
            commits.len()
        );
        let ok = wrong == 0 && starts.len() == commits.len();
        self.check(
            format!("{label}: handlers"),
            if ok { Ok(detail) } else { Err(detail) },
        );
        self.check_rows_completed(&label, n).await?;
        latencies.sort_by(f64::total_cmp);
        Ok((percentile(&latencies, 50.0), percentile(&latencies, 99.0)))
    }

    /// Runs `bench-enqueue` in a child process of this binary; returns (id, commit µs) pairs.
    async fn enqueue_in_child(&self, n: u32, raw: bool) -> Result<Vec<(u64, i64)>, CliError> {
        let exe = std::env::current_exe().map_err(|e| {
            CliError::new(
                format!("cannot find this program to start the enqueueing process: {e}"),
                "run bench with --scenario drain or enqueue, or from a regular file",
            )
        })?;
        let mut cmd = tokio::process::Command::new(exe);
        cmd.arg("bench-enqueue")
            .args([
                "--count",
                &n.to_string(),
                "--rate",
                &PICKUP_RATE.to_string(),
            ])
            .env("DATABASE_URL", &self.scratch.url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true);
        if raw {
            cmd.arg("--raw");
        }
        let mut child = cmd.spawn().map_err(|e| {
            CliError::new(
                format!("cannot start the enqueueing process: {e}"),
                "check the process limits",
            )
        })?;
        let stdout = child.stdout.take().ok_or_else(|| {
            CliError::new("the enqueueing process has no stdout", "this is a bug")
        })?;
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let mut commits = Vec::new();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut it = line.split_whitespace();
            if let (Some(Ok(id)), Some(Ok(t))) = (
                it.next().map(str::parse::<u64>),
                it.next().map(str::parse::<i64>),
            ) {
                commits.push((id, t));
                self.bar.inc(1);
            }
        }
        let status = child.wait().await.map_err(|e| {
            CliError::new(
                format!("the enqueueing process: {e}"),
                "see its error above",
            )
        })?;
        if !status.success() || commits.len() != usize::try_from(n).unwrap_or(0) {
            return Err(CliError::new(
                format!(
                    "the enqueueing process exited with {status} after {} of {n} jobs",
                    commits.len()
                ),
                "see its error above",
            ));
        }
        Ok(commits)
    }
}

/// Waits until `progress()` reaches `n`, updating `bar`; an error when it stops moving.
async fn wait_for(bar: &ProgressBar, n: u64, progress: impl Fn() -> u64) -> Result<(), CliError> {
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
            return Err(CliError::new(
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

/// A connection, waiting as long as it takes while other tasks hold them all (the baseline runs
/// more tasks than connections at high concurrency).
async fn acquire_patiently(
    pool: &MySqlPool,
) -> Result<sqlx::pool::PoolConnection<sqlx::MySql>, CliError> {
    loop {
        match pool.acquire().await {
            Ok(c) => return Ok(c),
            Err(sqlx::Error::PoolTimedOut) => {}
            Err(e) => return Err(db_err("baseline connection", e)),
        }
    }
}

/// The article's claim, redone from its SELECT on deadlock or lock wait timeout.
async fn claim(
    conn: &mut sqlx::MySqlConnection,
    batch: u32,
    worker: &str,
    token: &str,
) -> Result<Vec<u64>, CliError> {
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        match sql::bench_claim(conn, QUEUE, batch, worker, token, LEASE_SECS).await {
            Ok(ids) => return Ok(ids),
            Err(e) if mysqlq::store::is_lock_error(&e) && attempt < 10 => {
                tokio::time::sleep(Duration::from_millis(fastrand::u64(
                    1..=(2 << attempt.min(6)),
                )))
                .await;
            }
            Err(e) => return Err(CliError::mysqlq("baseline claim failed", &e)),
        }
    }
}

/// The token-guarded completion of one batch, retried on deadlock or lock wait timeout.
async fn complete(
    conn: &mut sqlx::MySqlConnection,
    ids: &[u64],
    token: &str,
) -> Result<u64, CliError> {
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        match sql::bench_complete(conn, ids, token).await {
            Ok(n) => return Ok(n),
            Err(e) if mysqlq::store::is_lock_error(&e) && attempt < 10 => {
                tokio::time::sleep(Duration::from_millis(fastrand::u64(
                    1..=(2 << attempt.min(6)),
                )))
                .await;
            }
            Err(e) => return Err(CliError::mysqlq("baseline completion failed", &e)),
        }
    }
}

/// One baseline drain task: claim a batch, "run" it, complete it, until the queue is empty.
async fn baseline_drain_loop(
    pool: &MySqlPool,
    probe: &Probe,
    batch: u32,
    worker: &str,
    (lost, claims): (&AtomicU64, &AtomicU64),
    bar: &ProgressBar,
) -> Result<(), CliError> {
    loop {
        let mut conn = acquire_patiently(pool).await?;
        let token = new_token();
        let ids = claim(&mut conn, batch, worker, &token).await?;
        claims.fetch_add(1, Ordering::Relaxed);
        if ids.is_empty() {
            return Ok(());
        }
        for &id in &ids {
            probe.ran(id);
        }
        let done = complete(&mut conn, &ids, &token).await?;
        lost.fetch_add((ids.len() as u64).saturating_sub(done), Ordering::Relaxed);
        bar.inc(done);
    }
}

/// The baseline consumer of the pickup runs: a polling loop with the worker's default idle
/// backoff (floor 5 ms, doubling to the 1 s ceiling, reset when work appears), no wake-up.
async fn baseline_poller(
    pool: &MySqlPool,
    probe: &Probe,
    batch: u32,
    stop: &(AtomicBool, Notify),
) -> Result<(), CliError> {
    let floor = WorkerConfig::DEFAULT_POLL_FLOOR;
    let ceiling = WorkerConfig::DEFAULT_POLL_CEILING;
    let worker = format!("bench-baseline:{}", std::process::id());
    let mut idle = floor;
    while !stop.0.load(Ordering::SeqCst) {
        let mut conn = acquire_patiently(pool).await?;
        let token = new_token();
        let ids = claim(&mut conn, batch, &worker, &token).await?;
        if ids.is_empty() {
            idle = (idle * 2).min(ceiling);
        } else {
            for &id in &ids {
                probe.ran(id);
            }
            complete(&mut conn, &ids, &token).await?;
            idle = floor;
            if ids.len() == usize::try_from(batch).unwrap_or(usize::MAX) {
                continue;
            }
        }
        drop(conn);
        let woken = stop.1.notified();
        tokio::select! {
            () = tokio::time::sleep(idle) => {}
            () = woken => {}
        }
    }
    Ok(())
}

async fn bulk_framework(pool: &MySqlPool, n: u32) -> Result<(), CliError> {
    let jobs = (0..u64::from(n))
        .map(|seq| NewJob::from_job(&BenchNoop { seq }, &EnqueueOptions::new()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(q_err("cannot build the bench jobs"))?;
    mysqlq::enqueue_many(pool, jobs)
        .await
        .map_err(q_err("enqueue_many failed"))?;
    Ok(())
}

async fn bulk_baseline(pool: &MySqlPool, n: u32, bar: &ProgressBar) -> Result<(), CliError> {
    let mut conn = crate::db::acquire(pool).await?;
    let chunk = u64::try_from(mysqlq::store::INSERT_CHUNK_ROWS).unwrap_or(500);
    let mut seq = 0u64;
    while seq < u64::from(n) {
        let end = (seq + chunk).min(u64::from(n));
        let payloads: Vec<String> = (seq..end).map(|s| format!("{{\"seq\":{s}}}")).collect();
        sql::bench_insert_many(&mut conn, QUEUE, KIND, &payloads)
            .await
            .map_err(q_err("baseline multi-row INSERT failed"))?;
        bar.inc(end - seq);
        seq = end;
    }
    Ok(())
}

/// Enqueues `n` jobs one at a time, `rate` per second, each in its own autocommit statement;
/// `sink(id, µs)` gets each job's id and the wall-clock time its enqueue returned (committed).
async fn enqueue_paced(
    pool: &MySqlPool,
    n: u32,
    rate: u32,
    raw: bool,
    mut sink: impl FnMut(u64, i64),
) -> Result<Vec<(u64, i64)>, CliError> {
    let mut tick = tokio::time::interval(Duration::from_secs(1) / rate.max(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut out = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
    for seq in 0..u64::from(n) {
        tick.tick().await;
        let id = if raw {
            let payload = format!("{{\"seq\":{seq}}}");
            let mut conn = crate::db::acquire(pool).await?;
            sql::bench_insert_one(&mut conn, QUEUE, KIND, &payload)
                .await
                .map_err(q_err("baseline INSERT failed"))?
        } else {
            BenchNoop { seq }
                .enqueue(pool)
                .await
                .map_err(q_err("enqueue failed"))?
                .id()
                .0
        };
        let t = now_us();
        sink(id, t);
        out.push((id, t));
    }
    Ok(out)
}

/// `bench-enqueue` (internal): the other process of the cross-process pickup measurement.
/// Prints `<id> <commit µs>` per job on stdout.
pub(crate) async fn child_enqueue(target: &Target, a: &BenchEnqueueArgs) -> Result<(), CliError> {
    let pool = target.pool(2).await?;
    let r = enqueue_paced(&pool, a.count, a.rate, a.raw, |id, t| println!("{id} {t}")).await;
    pool.close().await;
    r.map(|_| ())
}

/// Nearest-rank percentile of sorted values (0 for none).
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Median (mean of the middle two for an even count); `None` for none.
fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    Some(if s.len().is_multiple_of(2) {
        f64::midpoint(s[m - 1], s[m])
    } else {
        s[m]
    })
}

fn round_to(x: f64, places: i32) -> f64 {
    let f = 10f64.powi(places);
    (x * f).round() / f
}

struct Report<'a> {
    server: sql::BenchServer,
    database: String,
    dropped: bool,
    args: &'a BenchArgs,
    fw: Side,
    bl: Side,
    bench: Finished,
}

/// The metric keys of one side, in output order, with their values.
fn values(s: &Side) -> Vec<(&'static str, Option<f64>)> {
    vec![
        (
            "enqueue_single_per_s",
            median(&s.enqueue_single).map(|x| round_to(x, 1)),
        ),
        (
            "enqueue_bulk_per_s",
            median(&s.enqueue_bulk).map(|x| round_to(x, 1)),
        ),
        ("drain_per_s", median(&s.drain).map(|x| round_to(x, 1))),
        (
            "pickup_same_process_p50_ms",
            s.pickup_same.map(|p| round_to(p.0, 3)),
        ),
        (
            "pickup_same_process_p99_ms",
            s.pickup_same.map(|p| round_to(p.1, 3)),
        ),
        (
            "pickup_cross_process_p50_ms",
            s.pickup_cross.map(|p| round_to(p.0, 3)),
        ),
        (
            "pickup_cross_process_p99_ms",
            s.pickup_cross.map(|p| round_to(p.1, 3)),
        ),
    ]
}

fn ratio(fw: Option<f64>, bl: Option<f64>) -> Option<f64> {
    match (fw, bl) {
        (Some(f), Some(b)) if b > 0.0 => Some(round_to(f / b, 3)),
        _ => None,
    }
}

impl Report<'_> {
    fn peak_rss_mib(&self) -> Option<f64> {
        #[allow(clippy::cast_precision_loss)]
        self.bench
            .peak_rss
            .map(|b| round_to(b as f64 / (1024.0 * 1024.0), 1))
    }

    fn ratios(&self) -> Vec<(&'static str, Option<f64>)> {
        vec![
            (
                "enqueue_single",
                ratio(
                    median(&self.fw.enqueue_single),
                    median(&self.bl.enqueue_single),
                ),
            ),
            (
                "enqueue_bulk",
                ratio(median(&self.fw.enqueue_bulk), median(&self.bl.enqueue_bulk)),
            ),
            (
                "drain",
                ratio(median(&self.fw.drain), median(&self.bl.drain)),
            ),
        ]
    }

    fn json(&self) -> Value {
        let obj = |pairs: Vec<(&'static str, Option<f64>)>| {
            Value::Object(
                pairs
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), json!(v)))
                    .collect(),
            )
        };
        let mut fw = obj(values(&self.fw));
        fw["peak_rss_mib"] = json!(self.peak_rss_mib());
        let b = &self.bench;
        json!({
            "server": self.server.version,
            "jobs": b.jobs,
            "concurrency": b.concurrency,
            "batch": b.batch,
            "framework": fw,
            "baseline": obj(values(&self.bl)),
            "ratio": obj(self.ratios()),
            "scenario": format!("{:?}", self.args.scenario).to_lowercase(),
            "rounds": self.args.rounds,
            "enqueue_single_jobs": b.single_jobs,
            "pickup_jobs": b.pickup_jobs,
            "pickup_rate_per_s": PICKUP_RATE,
            "peak_rss_note": if b.rss_reset {
                "VmHWM of the bench process, reset just before the first framework drain"
            } else {
                "VmHWM of the bench process since it started"
            },
            "database": self.database,
            "database_dropped": self.dropped,
            "diagnostics": b.diag.json(),
            "settings": {
                "innodb_flush_log_at_trx_commit": self.server.flush_log_at_trx_commit,
                "sync_binlog": self.server.sync_binlog,
                "log_bin": self.server.log_bin,
                "binlog_format": self.server.binlog_format,
                "innodb_buffer_pool_size": self.server.buffer_pool_bytes,
                "max_connections": self.server.max_connections,
            },
            "verification": {
                "passed": b.checks.iter().all(|c| c.ok),
                "checks": b.checks.iter().map(|c| json!({
                    "check": c.what, "ok": c.ok, "detail": c.detail,
                })).collect::<Vec<_>>(),
            },
        })
    }

    fn human(&self) -> String {
        let b = &self.bench;
        let s = &self.server;
        let mut text = format!(
            "server {} (innodb_flush_log_at_trx_commit={}, sync_binlog={}, log_bin={}, buffer pool {})\n\
             scratch database {} ({})\n\
             {} jobs, concurrency {}, batch {}, {} round(s) per throughput scenario in ABBA order; \
             single-row enqueue: {} jobs from {} tasks; pickup: {} jobs at {}/s\n\n",
            s.version,
            s.flush_log_at_trx_commit,
            s.sync_binlog,
            s.log_bin,
            out::bytes(u64::try_from(s.buffer_pool_bytes).unwrap_or(0)),
            self.database,
            if self.dropped {
                "dropped"
            } else {
                "NOT dropped"
            },
            b.jobs,
            b.concurrency,
            b.batch,
            self.args.rounds,
            b.single_jobs,
            b.concurrency.min(SINGLE_TASKS_MAX),
            b.pickup_jobs,
            PICKUP_RATE,
        );
        let mut t = out::Table::new(&["METRIC", ">FRAMEWORK", ">BASELINE", ">RATIO"]);
        let fmt = |v: Option<f64>, places: usize| {
            v.map_or_else(|| "-".to_owned(), |x| format!("{x:.places$}"))
        };
        let ratios = self.ratios();
        let labels = [
            "enqueue single (jobs/s)",
            "enqueue bulk (jobs/s)",
            "drain (jobs/s)",
            "pickup same process p50 (ms)",
            "pickup same process p99 (ms)",
            "pickup cross-process p50 (ms)",
            "pickup cross-process p99 (ms)",
        ];
        for (i, ((label, (_, f)), (_, bl))) in labels
            .iter()
            .zip(values(&self.fw))
            .zip(values(&self.bl))
            .enumerate()
        {
            let (places, r) = if i < 3 {
                (0, fmt(ratios[i].1, 3))
            } else {
                (1, String::new())
            };
            t.row(vec![
                (*label).to_owned(),
                fmt(f, places),
                fmt(bl, places),
                r,
            ]);
        }
        text.push_str(&t.render());
        if let Some(mib) = self.peak_rss_mib() {
            text.push_str(&format!(
                "\nworker peak RSS: {mib:.1} MiB ({})\n",
                if b.rss_reset {
                    "VmHWM of this process, reset just before the first framework drain"
                } else {
                    "VmHWM of this process since it started"
                }
            ));
        }
        if b.diag.sides.iter().any(|s| s.jobs > 0) {
            text.push_str("\ndrain, where the work goes (server-wide counters per job; other sessions count too):\n");
            let d = b.diag.json();
            let mut t = out::Table::new(&[
                "SIDE",
                ">JOBS/CLAIM",
                ">QUESTIONS",
                ">SELECT",
                ">UPDATE",
                ">COMMIT",
                ">FSYNCS",
                ">LOCK WAITS",
                ">LOCK WAIT MS",
            ]);
            for (name, key) in [
                ("framework", "drain_framework"),
                ("baseline", "drain_baseline"),
            ] {
                let v = &d[key];
                if v.is_null() {
                    continue;
                }
                let c = &v["server_counters_per_job"];
                let f = |x: &Value| {
                    x.as_f64()
                        .map_or_else(|| "-".to_owned(), |x| format!("{x:.3}"))
                };
                t.row(vec![
                    name.to_owned(),
                    f(&v["jobs_per_claim"]),
                    f(&c["Questions"]),
                    f(&c["Com_select"]),
                    f(&c["Com_update"]),
                    f(&c["Com_commit"]),
                    f(&c["Innodb_data_fsyncs"]),
                    f(&c["Innodb_row_lock_waits"]),
                    f(&c["Innodb_row_lock_time"]),
                ]);
            }
            text.push_str(&t.render());
        }
        let failed = b.checks.iter().filter(|c| !c.ok).count();
        text.push_str(&format!(
            "\nverification: {} ({} checks, {failed} failed)\n",
            if failed == 0 { "passed" } else { "FAILED" },
            b.checks.len()
        ));
        for c in &b.checks {
            text.push_str(&format!(
                "  {} {}: {}\n",
                if c.ok { "ok  " } else { "FAIL" },
                c.what,
                c.detail
            ));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_url_replaces_the_database() {
        assert_eq!(
            with_database("mysql://u:p@h:3306/app?ssl-mode=disabled", "mysqlq_bench_1"),
            "mysql://u:p@h:3306/mysqlq_bench_1?ssl-mode=disabled"
        );
        assert_eq!(
            with_database("mysql://root@127.0.0.1", "mysqlq_bench_1"),
            "mysql://root@127.0.0.1/mysqlq_bench_1"
        );
    }

    #[test]
    fn percentiles_and_medians() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert!((percentile(&v, 50.0) - 50.0).abs() < 1e-9);
        assert!((percentile(&v, 99.0) - 99.0).abs() < 1e-9);
        assert_eq!(median(&[3.0, 1.0]), Some(2.0));
        assert_eq!(median(&[]), None);
        assert_eq!(new_token().len(), 36);
    }

    #[test]
    fn the_bench_job_is_not_an_application_job() {
        let all = Registry::new().register::<BenchNoop>().unwrap();
        assert!(without_bench_job(all).is_empty());
    }
}
