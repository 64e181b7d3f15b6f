//! The rate scenario (issue 31, `docs/design/rate-limits.md` §13): per-key rate limits across
//! worker processes.
//!
//! Four runs, each on an emptied queue [`RATE_QUEUE`], with worker processes of this binary
//! (`bench-worker`, [`crate::scenario::rate_worker`]; a mysqlq worker with its defaults but the
//! concurrency, [`RATE_CONCURRENCY`] unless `--concurrency` says otherwise), in this order: plain
//! only, keyed, plain only again, head of line.
//!
//! 1. **Keyed**: a backlog of key `a` at 20/s and key `b` at 50/s (each enough for 5/3 of the
//!    run) and `--rate-plain-jobs` unlimited no-ops, enqueued before three worker processes start
//!    at once; after `--rate-secs` they get SIGTERM. Per key, from the handlers' starts (host
//!    wall clock, noted first thing in the handler): the most starts in any window of the
//!    period (two pointers over the sorted starts; must be ≤ N), and the utilisation, the starts
//!    in [t₀ + P, t₀ + T) over N × (T − P) / P, t₀ being the key's first start and T the run
//!    (cut at the SIGTERM); the unlimited jobs' rate over the same T.
//! 2. **Plain only**, before and after the keyed run: three processes on unlimited jobs alone
//!    for `--rate-plain-secs` each: the unlimited rate without keys beside it (the mean of the
//!    two, so that a drift of the machine's load falls on both sides).
//! 3. **Head of line**: one worker process, an unlimited job enqueued (from this process, so no
//!    in-process wake-up) 20 times on an empty queue, then 20 times beside `--rate-hol-jobs` jobs
//!    of key `hol` at 1/1h, whose bucket is full after its first start: the pickup latency,
//!    enqueue returned → handler started.
//!
//! Also reported: the workers' late starts (`rate_late_starts`, handed back by the start guard;
//! per second of the run, sampled in each process), their lock wait timeouts and deadlocks, and
//! the server's `Innodb_row_lock_waits` per run; to see what limits a key, its bucket's ε and
//! decisions, the time N + 1 of its consecutive starts spanned, its starts per 10 s, and the
//! time from each job's first claim (`first_claimed_at`) to its handler's start. The head-of-line
//! target is a p99 of one poll ceiling plus [`CLAIM_ALLOWANCE_MS`] for the claim.
//! Checked: every job started at most once and every started job completed with one attempt,
//! no key over its limit in any window, and no lock wait timeout. The utilisation and pickup
//! targets are reported, not checked (a loaded machine misses them without a bug).

use std::time::{Duration, Instant};

use mysqlq::{EnqueueOptions, NewJob, Rate, WorkerConfig, enqueue_many};
use serde_json::{Value, json};

use crate::bench::Bench;
use crate::error::{BenchError, db_err, q_err};
use crate::job::{BenchRate, RATE_QUEUE};
use crate::probe::now_us;
use crate::report::{percentile, round_to};
use crate::scenario::rate_worker::{ChildCounters, start_workers, stop_workers};
use crate::{db, sql};

/// Worker processes of the keyed and the plain-only runs.
pub(crate) const RATE_WORKERS: u16 = 3;
/// `--concurrency`'s default for this scenario (each process's).
pub(crate) const RATE_CONCURRENCY: u16 = 32;
/// The limited keys of the keyed run and their limits.
const KEYS: [(&str, &str); 2] = [("a", "20/s"), ("b", "50/s")];
/// The tag of unlimited jobs.
const PLAIN: &str = "plain";
/// The head-of-line run's full key and its limit (full for an hour after its first start).
const HOL_KEY: &str = "hol";
const HOL_RATE: &str = "1/1h";
/// The tag of the head-of-line run's unlimited jobs.
const PROBE: &str = "probe";
/// Pickups per head-of-line measurement.
const HOL_TRIES: u32 = 20;
/// Target: starts in the measured window over what the limit allows, at least.
pub(crate) const TARGET_UTILISATION: f64 = 0.9;
/// The "one claim" of the head-of-line target (poll ceiling + one claim), in milliseconds.
const CLAIM_ALLOWANCE_MS: f64 = 25.0;
/// Unlimited jobs per second of a plain-only run enqueued (more than three processes start here).
const PLAIN_ONLY_PER_S: u32 = 12_000;
/// The slices of a key's starts over time (10 s).
const SLICE_US: i64 = 10_000_000;
/// Jobs per `enqueue_many` call.
const ENQUEUE_CHUNK: usize = 5_000;
/// Server counters read around each run (`SHOW GLOBAL STATUS`, server-wide).
const STATUS: [&str; 3] = [
    "Innodb_row_lock_waits",
    "Innodb_row_lock_time",
    "Innodb_deadlocks",
];

/// The scenario's sizes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RateSettings {
    /// The keyed run's length.
    pub(crate) secs: u32,
    /// The plain-only run's length.
    pub(crate) plain_secs: u32,
    /// Unlimited jobs beside the keys.
    pub(crate) plain_jobs: u32,
    /// Jobs of the full key in the head-of-line run.
    pub(crate) hol_jobs: u32,
    /// Each worker process's concurrency.
    pub(crate) concurrency: u16,
}

impl Default for RateSettings {
    fn default() -> Self {
        Self {
            secs: 60,
            plain_secs: 20,
            plain_jobs: 400_000,
            hol_jobs: 100_000,
            concurrency: RATE_CONCURRENCY,
        }
    }
}

/// What one limited key did in the keyed run.
#[derive(Debug, Clone, Default)]
pub(crate) struct KeyRun {
    pub(crate) key: String,
    pub(crate) limit: String,
    /// N.
    pub(crate) count: u32,
    /// P, in microseconds.
    pub(crate) period_us: i64,
    pub(crate) enqueued: u32,
    /// Starts during the run.
    pub(crate) starts: usize,
    /// T: from the key's first start to the end of the run (at most `--rate-secs`), seconds.
    pub(crate) window_s: f64,
    /// Starts in [t₀ + P, t₀ + T).
    pub(crate) measured: usize,
    /// N × (T − P) / P.
    pub(crate) allowed: f64,
    pub(crate) utilisation: Option<f64>,
    /// The most starts in any window of P.
    pub(crate) max_per_window: usize,
    /// Over every i: `s[i + N] − s[i]`, the time N + 1 consecutive starts took (ms): min and median.
    pub(crate) span_min_ms: Option<f64>,
    pub(crate) span_p50_ms: Option<f64>,
    /// ε and the decisions written, from the key's bucket after the run.
    pub(crate) slack_ms: Option<f64>,
    pub(crate) decisions: Option<i64>,
    /// Per start: from the job's first claim's UPDATE to its handler's start (ms, sorted). A
    /// job handed back by the start guard counts from that first, late claim.
    pub(crate) claim_to_start_ms: Vec<f64>,
    /// Starts in each slice of [`SLICE_US`] from the key's first start.
    pub(crate) per_slice: Vec<usize>,
}

/// The unlimited jobs of a run.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PlainRun {
    pub(crate) enqueued: u32,
    /// Starts during the run.
    pub(crate) starts: usize,
    /// Jobs per second: starts in [first start, first start + T) over T, or, when the backlog
    /// ran out, over its first to its last start.
    pub(crate) per_s: f64,
    pub(crate) window_s: f64,
    /// The backlog ran out before the end of the run.
    pub(crate) drained: bool,
}

/// One run's workers and server.
#[derive(Debug, Clone, Default)]
pub(crate) struct PhaseRun {
    pub(crate) counters: ChildCounters,
    pub(crate) enqueue_s: f64,
    /// From every worker running to the SIGTERM, seconds.
    pub(crate) run_s: f64,
    /// The 1-minute load average before the run, and at its end.
    pub(crate) loadavg: Option<f64>,
    pub(crate) loadavg_after: Option<f64>,
    pub(crate) row_lock_waits: Option<i64>,
    pub(crate) row_lock_time_ms: Option<i64>,
    pub(crate) server_deadlocks: Option<i64>,
}

/// The head-of-line run.
#[derive(Debug, Clone, Default)]
pub(crate) struct HolRun {
    pub(crate) backlog: u32,
    /// Jobs of the full key that started (1: its limit held).
    pub(crate) key_started: usize,
    /// Pickups beside the backlog, and on the empty queue before it (ms, sorted).
    pub(crate) pickups_ms: Vec<f64>,
    pub(crate) empty_ms: Vec<f64>,
}

/// What the rate scenario measured.
#[derive(Debug, Clone, Default)]
pub(crate) struct RateRun {
    pub(crate) settings: Option<RateSettings>,
    pub(crate) keys: Vec<KeyRun>,
    pub(crate) plain: PlainRun,
    /// The plain-only runs, before and after the keyed run.
    pub(crate) alone: Vec<PlainRun>,
    pub(crate) keyed_phase: PhaseRun,
    pub(crate) plain_phases: Vec<PhaseRun>,
    pub(crate) hol_phase: PhaseRun,
    pub(crate) hol: HolRun,
    /// The whole scenario, enqueues included, seconds.
    pub(crate) total_s: f64,
}

/// The most of the sorted `starts` (µs) in any half-open window of `period_us`.
pub(crate) fn max_per_window(starts: &[i64], period_us: i64) -> usize {
    let mut best = 0;
    let mut i = 0;
    for j in 0..starts.len() {
        while starts[j] - starts[i] >= period_us {
            i += 1;
        }
        best = best.max(j - i + 1);
    }
    best
}

/// Over i: `starts[i + n] − starts[i]` (µs), sorted.
fn spans(starts: &[i64], n: usize) -> Vec<i64> {
    let mut v: Vec<i64> = starts.windows(n + 1).map(|w| w[n] - w[0]).collect();
    v.sort_unstable();
    v
}

#[allow(clippy::cast_precision_loss)]
fn ms(us: i64) -> f64 {
    us as f64 / 1000.0
}

#[allow(clippy::cast_precision_loss)]
fn secs_of(us: i64) -> f64 {
    us as f64 / 1_000_000.0
}

/// A key's figures from its sorted starts; the run lasted `run_us` at most and ended at `end_us`.
fn analyse_key(starts: &[i64], rate: Rate, run_us: i64, end_us: i64) -> KeyRun {
    let period_us = i64::try_from(rate.period().as_micros()).unwrap_or(i64::MAX);
    let n = usize::try_from(rate.count()).unwrap_or(usize::MAX);
    let mut k = KeyRun {
        limit: rate.to_string(),
        count: rate.count(),
        period_us,
        starts: starts.len(),
        max_per_window: max_per_window(starts, period_us),
        ..KeyRun::default()
    };
    let sp = spans(starts, n);
    k.span_min_ms = sp.first().map(|&v| ms(v));
    if !sp.is_empty() {
        #[allow(clippy::cast_precision_loss)]
        let v: Vec<f64> = sp.iter().map(|&v| v as f64 / 1000.0).collect();
        k.span_p50_ms = Some(percentile(&v, 50.0));
    }
    if let Some(&t0) = starts.first() {
        let end = (t0 + run_us).min(end_us);
        for &t in starts.iter().filter(|&&t| t < end) {
            let i = usize::try_from((t - t0) / SLICE_US).unwrap_or(0);
            if k.per_slice.len() <= i {
                k.per_slice.resize(i + 1, 0);
            }
            k.per_slice[i] += 1;
        }
        k.window_s = secs_of(end - t0);
        k.measured = starts
            .iter()
            .filter(|&&t| t >= t0 + period_us && t < end)
            .count();
        #[allow(clippy::cast_precision_loss)]
        let allowed = f64::from(rate.count()) * (end - t0 - period_us) as f64 / period_us as f64;
        k.allowed = allowed;
        #[allow(clippy::cast_precision_loss)]
        let u = k.measured as f64 / allowed;
        k.utilisation = (allowed > 0.0).then_some(u);
    }
    k
}

/// The unlimited jobs' rate from their sorted starts.
fn analyse_plain(starts: &[i64], run_us: i64, end_us: i64, drained: bool) -> PlainRun {
    let mut p = PlainRun {
        starts: starts.len(),
        drained,
        ..PlainRun::default()
    };
    let (Some(&first), Some(&last)) = (starts.first(), starts.last()) else {
        return p;
    };
    let end = (first + run_us).min(end_us);
    #[allow(clippy::cast_precision_loss)]
    if drained && last < end {
        p.window_s = secs_of(last - first);
        p.per_s = (starts.len() as f64 - 1.0) / p.window_s.max(1e-6);
    } else {
        p.window_s = secs_of(end - first);
        let n = starts.iter().filter(|&&t| t < end).count();
        p.per_s = n as f64 / p.window_s.max(1e-6);
    }
    p
}

/// The 1-minute load average (`None` off Linux).
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn rate(text: &str) -> Result<Rate, BenchError> {
    text.parse()
        .map_err(|e| BenchError::mysqlq("the bench's rate limit", &e))
}

/// Jobs a key needs to be busy for 5/3 of `secs` at `rate`.
fn key_backlog(rate: Rate, secs: u32) -> u32 {
    let per_s = f64::from(rate.count()) / rate.period().as_secs_f64();
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let n = (per_s * f64::from(secs) * 5.0 / 3.0).ceil() as u32;
    n.max(rate.count() * 2)
}

impl Bench<'_> {
    /// The rate scenario: the keyed run, the plain-only run, the head-of-line run.
    pub(crate) async fn rate(&mut self, s: RateSettings) -> Result<RateRun, BenchError> {
        let began = Instant::now();
        {
            let mut conn = db::acquire(&self.setup).await?;
            sql::bench_rate_setup(&mut conn)
                .await
                .map_err(db_err("cannot create the bench's start log"))?;
        }
        let mut out = RateRun {
            settings: Some(s),
            ..RateRun::default()
        };
        self.rate_plain_only(&s, &mut out, "before").await?;
        self.rate_keyed(&s, &mut out).await?;
        self.rate_plain_only(&s, &mut out, "after").await?;
        self.rate_hol(&s, &mut out).await?;
        self.rate_reset().await?;
        let (timeouts, deadlocks) = out.lock_waits();
        let detail = format!(
            "{timeouts} lock wait timeouts (1205) in the workers' transactions, {deadlocks} \
             deadlocks (1213), over 4 runs"
        );
        self.check(
            "rate framework: lock waits".to_owned(),
            if timeouts == 0 {
                Ok(detail)
            } else {
                Err(detail)
            },
        );
        out.total_s = began.elapsed().as_secs_f64();
        Ok(out)
    }

    async fn rate_reset(&self) -> Result<(), BenchError> {
        self.reset().await?;
        let mut conn = db::acquire(&self.setup).await?;
        sql::bench_rate_reset(&mut conn).await.map_err(db_err(
            "cannot empty the bench's start log and rate buckets",
        ))
    }

    async fn rate_status(&self) -> Result<Vec<Option<i64>>, BenchError> {
        let mut conn = db::acquire(&self.setup).await?;
        sql::bench_status_of(&mut conn, &STATUS)
            .await
            .map_err(db_err("cannot read the server's status counters"))
    }

    /// Enqueues `n` jobs tagged `tag`, limited by `limit` under the key `tag` if given.
    async fn rate_enqueue(&self, tag: &str, limit: Option<Rate>, n: u32) -> Result<(), BenchError> {
        let opts = match limit {
            Some(r) => EnqueueOptions::new().rate_limit(tag, r),
            None => EnqueueOptions::new(),
        };
        let job = BenchRate {
            tag: tag.to_owned(),
        };
        let mut left = usize::try_from(n).unwrap_or(0);
        while left > 0 {
            let k = left.min(ENQUEUE_CHUNK);
            let jobs = (0..k)
                .map(|_| NewJob::from_job(&job, &opts))
                .collect::<Result<Vec<_>, _>>()
                .map_err(q_err("cannot build the rate jobs"))?;
            enqueue_many(&self.setup, jobs)
                .await
                .map_err(q_err("cannot enqueue the rate jobs"))?;
            left -= k;
            self.bar.inc(k as u64);
        }
        Ok(())
    }

    /// Starts `workers` processes, lets them run `secs`, stops them; returns the run, the
    /// SIGTERM's time (µs) and the recorded starts.
    async fn rate_run(
        &self,
        label: &str,
        secs: u32,
        workers: u16,
        concurrency: u16,
    ) -> Result<(PhaseRun, i64, Vec<(u64, String, i64)>), BenchError> {
        let loadavg = load_average();
        let before = self.rate_status().await?;
        self.phase(&format!("{label}: starting workers"), secs);
        let procs = start_workers(&self.scratch.url, workers, concurrency).await?;
        let ready = Instant::now();
        let t_ready = now_us();
        self.bar.set_message(format!("{label}: running"));
        let until = ready + Duration::from_secs(u64::from(secs)) + Duration::from_millis(250);
        loop {
            let now = Instant::now();
            if now >= until {
                break;
            }
            tokio::time::sleep((until - now).min(Duration::from_secs(1))).await;
            self.bar.set_position(ready.elapsed().as_secs());
        }
        let t_sig = now_us();
        let loadavg_after = load_average();
        self.bar.set_message(format!("{label}: stopping workers"));
        let counters = stop_workers(procs).await?;
        let after = self.rate_status().await?;
        let delta = |i: usize| Some(after[i]? - before[i]?);
        let starts = {
            let mut conn = db::acquire(&self.setup).await?;
            sql::bench_rate_starts(&mut conn)
                .await
                .map_err(db_err("cannot read the recorded starts"))?
        };
        let phase = PhaseRun {
            counters,
            run_s: secs_of(t_sig - t_ready),
            loadavg,
            loadavg_after,
            row_lock_waits: delta(0),
            row_lock_time_ms: delta(1),
            server_deadlocks: delta(2),
            ..PhaseRun::default()
        };
        Ok((phase, t_sig, starts))
    }

    /// Every job started at most once; every started job, and only those, completed, with
    /// one attempt; every start recorded.
    async fn rate_check_handlers(
        &mut self,
        label: &str,
        starts: &[(u64, String, i64)],
        counters: &ChildCounters,
    ) -> Result<sql::BenchRateRows, BenchError> {
        let rows = {
            let mut conn = db::acquire(&self.setup).await?;
            sql::bench_rate_rows(&mut conn, RATE_QUEUE)
                .await
                .map_err(db_err("cannot count the rate scenario's rows"))?
        };
        let mut ids: Vec<u64> = starts.iter().map(|s| s.0).collect();
        ids.sort_unstable();
        let runs = ids.len();
        ids.dedup();
        let twice = runs - ids.len();
        let distinct = i64::try_from(ids.len()).unwrap_or(i64::MAX);
        let detail = format!(
            "{runs} handler starts of {} jobs ({twice} started more than once), {} rows \
             completed ({} with attempts <> 1), {} rows neither pending nor completed, {} starts \
             recorded by the workers",
            ids.len(),
            rows.completed,
            rows.completed_not_one_attempt,
            rows.other,
            counters.recorded
        );
        let ok = twice == 0
            && rows.completed == distinct
            && rows.completed_not_one_attempt == 0
            && rows.other == 0
            && counters.recorded == runs as u64;
        self.check(
            format!("{label}: handlers"),
            if ok { Ok(detail) } else { Err(detail) },
        );
        Ok(rows)
    }

    /// The keyed run.
    async fn rate_keyed(&mut self, s: &RateSettings, out: &mut RateRun) -> Result<(), BenchError> {
        let label = "rate keyed";
        self.rate_reset().await?;
        let mut keys = Vec::new();
        for (key, limit) in KEYS {
            let r = rate(limit)?;
            keys.push((key, r, key_backlog(r, s.secs)));
        }
        let total: u32 = keys.iter().map(|k| k.2).sum::<u32>() + s.plain_jobs;
        self.phase(&format!("{label}: enqueueing"), total);
        let t = Instant::now();
        for &(key, r, n) in &keys {
            self.rate_enqueue(key, Some(r), n).await?;
        }
        self.rate_enqueue(PLAIN, None, s.plain_jobs).await?;
        let enqueue_s = t.elapsed().as_secs_f64();
        let (mut phase, t_sig, starts) = self
            .rate_run(label, s.secs, RATE_WORKERS, s.concurrency)
            .await?;
        phase.enqueue_s = enqueue_s;
        let buckets = {
            let mut conn = db::acquire(&self.setup).await?;
            sql::bench_rate_buckets(&mut conn, RATE_QUEUE)
                .await
                .map_err(db_err("cannot read the rate buckets"))?
        };
        let gaps = {
            let mut conn = db::acquire(&self.setup).await?;
            sql::bench_rate_claim_gaps(&mut conn)
                .await
                .map_err(db_err("cannot read the claim times"))?
        };
        let rows = self
            .rate_check_handlers(label, &starts, &phase.counters)
            .await?;
        let run_us = i64::from(s.secs) * 1_000_000;
        let of = |tag: &str| -> Vec<i64> {
            starts
                .iter()
                .filter(|st| st.1 == tag)
                .map(|st| st.2)
                .collect()
        };
        for &(key, r, n) in &keys {
            let mut k = analyse_key(&of(key), r, run_us, t_sig);
            k.key = key.to_owned();
            k.enqueued = n;
            if let Some(b) = buckets.iter().find(|b| b.key == key) {
                k.slack_ms = Some(ms(b.slack_us));
                k.decisions = Some(b.decisions);
            }
            k.claim_to_start_ms = gaps
                .iter()
                .filter(|g| g.0 == key)
                .map(|g| ms(g.1))
                .collect();
            k.claim_to_start_ms.sort_by(f64::total_cmp);
            let detail = format!(
                "{} starts, at most {} in any {} ms window (limit {})",
                k.starts,
                k.max_per_window,
                k.period_us / 1000,
                k.limit
            );
            self.check(
                format!("{label}: key {key} within its limit"),
                if k.max_per_window <= r.count() as usize {
                    Ok(detail)
                } else {
                    Err(detail)
                },
            );
            out.keys.push(k);
        }
        out.plain = analyse_plain(&of(PLAIN), run_us, t_sig, rows.pending_plain == 0);
        out.plain.enqueued = s.plain_jobs;
        out.keyed_phase = phase;
        Ok(())
    }

    /// A plain-only run (`when`: before or after the keyed run): three processes on unlimited
    /// jobs alone.
    async fn rate_plain_only(
        &mut self,
        s: &RateSettings,
        out: &mut RateRun,
        when: &str,
    ) -> Result<(), BenchError> {
        let label = format!("rate plain only {when}");
        let label = label.as_str();
        self.rate_reset().await?;
        // More than the workers can start in the run, at most --rate-plain-jobs.
        let n = s
            .plain_jobs
            .min(PLAIN_ONLY_PER_S.saturating_mul(s.plain_secs));
        self.phase(&format!("{label}: enqueueing"), n);
        let t = Instant::now();
        self.rate_enqueue(PLAIN, None, n).await?;
        let enqueue_s = t.elapsed().as_secs_f64();
        let (mut phase, t_sig, starts) = self
            .rate_run(label, s.plain_secs, RATE_WORKERS, s.concurrency)
            .await?;
        phase.enqueue_s = enqueue_s;
        let rows = self
            .rate_check_handlers(label, &starts, &phase.counters)
            .await?;
        let plain: Vec<i64> = starts.iter().map(|st| st.2).collect();
        let mut alone = analyse_plain(
            &plain,
            i64::from(s.plain_secs) * 1_000_000,
            t_sig,
            rows.pending_plain == 0,
        );
        alone.enqueued = n;
        out.alone.push(alone);
        out.plain_phases.push(phase);
        Ok(())
    }

    /// The head-of-line run: pickups on an empty queue, then beside a full key's backlog.
    async fn rate_hol(&mut self, s: &RateSettings, out: &mut RateRun) -> Result<(), BenchError> {
        let label = "rate head of line";
        self.rate_reset().await?;
        let loadavg = load_average();
        let before = self.rate_status().await?;
        self.phase(&format!("{label}: empty queue"), HOL_TRIES);
        let procs = start_workers(&self.scratch.url, 1, s.concurrency).await?;
        // Let the worker reach its idle poll interval.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let ready = Instant::now();
        let mut empty = Vec::new();
        for _ in 0..HOL_TRIES {
            empty.push(self.rate_pickup().await?);
            self.bar.inc(1);
        }
        self.phase(&format!("{label}: enqueueing"), s.hol_jobs);
        let t = Instant::now();
        self.rate_enqueue(HOL_KEY, Some(rate(HOL_RATE)?), s.hol_jobs)
            .await?;
        let enqueue_s = t.elapsed().as_secs_f64();
        self.rate_wait_full(HOL_KEY).await?;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        self.phase(&format!("{label}: beside the backlog"), HOL_TRIES);
        let mut beside = Vec::new();
        for _ in 0..HOL_TRIES {
            beside.push(self.rate_pickup().await?);
            self.bar.inc(1);
        }
        let run_s = ready.elapsed().as_secs_f64();
        let loadavg_after = load_average();
        let counters = stop_workers(procs).await?;
        let after = self.rate_status().await?;
        let delta = |i: usize| Some(after[i]? - before[i]?);
        let starts = {
            let mut conn = db::acquire(&self.setup).await?;
            sql::bench_rate_starts(&mut conn)
                .await
                .map_err(db_err("cannot read the recorded starts"))?
        };
        self.rate_check_handlers(label, &starts, &counters).await?;
        let key_started = starts.iter().filter(|st| st.1 == HOL_KEY).count();
        let detail = format!(
            "{key_started} of the {} jobs of key {HOL_KEY} ({HOL_RATE}) started",
            s.hol_jobs
        );
        self.check(
            format!("{label}: key {HOL_KEY} within its limit"),
            if key_started <= 1 {
                Ok(detail)
            } else {
                Err(detail)
            },
        );
        empty.sort_by(f64::total_cmp);
        beside.sort_by(f64::total_cmp);
        out.hol = HolRun {
            backlog: s.hol_jobs,
            key_started,
            pickups_ms: beside,
            empty_ms: empty,
        };
        out.hol_phase = PhaseRun {
            counters,
            enqueue_s,
            run_s,
            loadavg,
            loadavg_after,
            row_lock_waits: delta(0),
            row_lock_time_ms: delta(1),
            server_deadlocks: delta(2),
        };
        Ok(())
    }

    /// Waits until `key`'s bucket is closed (its limit reached).
    async fn rate_wait_full(&self, key: &str) -> Result<(), BenchError> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let buckets = {
                let mut conn = db::acquire(&self.setup).await?;
                sql::bench_rate_buckets(&mut conn, RATE_QUEUE)
                    .await
                    .map_err(db_err("cannot read the rate buckets"))?
            };
            if buckets
                .iter()
                .any(|b| b.key == key && b.decisions > 0 && b.open_in_us > 0)
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(BenchError::new(
                    format!("key {key}'s bucket was not full after 60 s"),
                    "check the worker's errors above",
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// One pickup: after a random pause, an unlimited job enqueued from this process; the time
    /// from the enqueue's return to its handler's start (ms).
    async fn rate_pickup(&self) -> Result<f64, BenchError> {
        tokio::time::sleep(Duration::from_millis(fastrand::u64(300..800))).await;
        let id = BenchRate {
            tag: PROBE.to_owned(),
        }
        .enqueue(&self.setup)
        .await
        .map_err(q_err("cannot enqueue the pickup job"))?
        .id()
        .0;
        let committed = now_us();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let started = {
                let mut conn = db::acquire(&self.setup).await?;
                sql::bench_rate_start_of(&mut conn, id)
                    .await
                    .map_err(db_err("cannot read the recorded starts"))?
            };
            if let Some(us) = started {
                return Ok(ms(us - committed));
            }
            if Instant::now() > deadline {
                return Err(BenchError::new(
                    format!("the unlimited job {id} did not start within 30 s"),
                    "check the worker's errors above",
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Starts of `k` whose first claim's UPDATE came more than ε − 1 ms before them (the start
/// guard's deadline, which counts from before the claim was sent, so from earlier still).
fn over_slack(k: &KeyRun) -> Option<usize> {
    let slack = k.slack_ms?;
    Some(
        k.claim_to_start_ms
            .iter()
            .filter(|&&v| v > slack - 1.0)
            .count(),
    )
}

/// The head-of-line target: one poll ceiling and one claim, in milliseconds.
fn hol_target_ms() -> f64 {
    WorkerConfig::DEFAULT_POLL_CEILING.as_secs_f64() * 1000.0 + CLAIM_ALLOWANCE_MS
}

impl RateRun {
    fn ratio(&self) -> Option<f64> {
        let alone = self.alone_per_s()?;
        (alone > 0.0).then(|| self.plain.per_s / alone)
    }

    fn late_starts(&self) -> u64 {
        self.keyed_phase.counters.rate_late_starts
    }

    /// The unlimited rate without keys: the mean of the plain-only runs.
    fn alone_per_s(&self) -> Option<f64> {
        #[allow(clippy::cast_precision_loss)]
        let n = self.alone.len() as f64;
        (!self.alone.is_empty()).then(|| self.alone.iter().map(|a| a.per_s).sum::<f64>() / n)
    }

    fn phases(&self) -> Vec<(&'static str, &PhaseRun)> {
        let mut v = Vec::new();
        let names = ["plain_only_before", "plain_only_after"];
        if let Some(p) = self.plain_phases.first() {
            v.push((names[0], p));
        }
        v.push(("keyed", &self.keyed_phase));
        if let Some(p) = self.plain_phases.get(1) {
            v.push((names[1], p));
        }
        v.push(("head_of_line", &self.hol_phase));
        v
    }

    fn lock_waits(&self) -> (u64, u64) {
        self.phases().iter().fold((0, 0), |(w, d), (_, p)| {
            (w + p.counters.lock_waits, d + p.counters.deadlocks)
        })
    }

    fn hol_p99(&self) -> Option<f64> {
        (!self.hol.pickups_ms.is_empty()).then(|| percentile(&self.hol.pickups_ms, 99.0))
    }

    /// The `rate` object of `--json`.
    pub(crate) fn json(&self) -> Value {
        let s = self.settings.unwrap_or_default();
        let r3 = |v: Option<f64>| v.map(|v| round_to(v, 3));
        let p = |v: &[f64], q: f64| (!v.is_empty()).then(|| round_to(percentile(v, q), 3));
        let mut keys = serde_json::Map::new();
        for k in &self.keys {
            keys.insert(
                k.key.clone(),
                json!({
                    "limit": k.limit,
                    "n": k.count,
                    "period_ms": k.period_us / 1000,
                    "enqueued": k.enqueued,
                    "starts": k.starts,
                    "window_s": round_to(k.window_s, 3),
                    "starts_measured": k.measured,
                    "starts_allowed": round_to(k.allowed, 1),
                    "utilisation": r3(k.utilisation),
                    "max_per_window": k.max_per_window,
                    "n_plus_1_span_min_ms": r3(k.span_min_ms),
                    "n_plus_1_span_p50_ms": r3(k.span_p50_ms),
                    "slack_ms": r3(k.slack_ms),
                    "decisions": k.decisions,
                    "claim_to_start_p50_ms": p(&k.claim_to_start_ms, 50.0),
                    "claim_to_start_p90_ms": p(&k.claim_to_start_ms, 90.0),
                    "claim_to_start_p99_ms": p(&k.claim_to_start_ms, 99.0),
                    "claim_to_start_over_slack": over_slack(k),
                    "starts_per_10s": k.per_slice,
                }),
            );
        }
        let plain = |p: &PlainRun| {
            json!({
                "enqueued": p.enqueued,
                "starts": p.starts,
                "per_s": round_to(p.per_s, 1),
                "window_s": round_to(p.window_s, 3),
                "drained": p.drained,
            })
        };
        let mut phases = serde_json::Map::new();
        for (name, p) in self.phases() {
            phases.insert(
                name.to_owned(),
                json!({
                    "enqueue_s": round_to(p.enqueue_s, 2),
                    "run_s": round_to(p.run_s, 2),
                    "loadavg_1m": p.loadavg,
                    "loadavg_1m_after": p.loadavg_after,
                    "row_lock_waits": p.row_lock_waits,
                    "row_lock_time_ms": p.row_lock_time_ms,
                    "server_deadlocks": p.server_deadlocks,
                    "workers": p.counters.json(),
                }),
            );
        }
        let (timeouts, deadlocks) = self.lock_waits();
        let h = &self.hol;
        let hol99 = self.hol_p99();
        json!({
            "queue": RATE_QUEUE,
            "workers": RATE_WORKERS,
            "concurrency": s.concurrency,
            "seconds": s.secs,
            "plain_seconds": s.plain_secs,
            "poll_ceiling_ms": WorkerConfig::DEFAULT_POLL_CEILING.as_secs_f64() * 1000.0,
            "total_s": round_to(self.total_s, 1),
            "keys": Value::Object(keys),
            "late_starts": self.late_starts(),
            "rate_admitted": self.keyed_phase.counters.rate_admitted,
            "unlimited": plain(&self.plain),
            "unlimited_alone_runs": self.alone.iter().map(plain).collect::<Vec<_>>(),
            "unlimited_per_s": round_to(self.plain.per_s, 1),
            "unlimited_alone_per_s": self.alone_per_s().map(|v| round_to(v, 1)),
            "unlimited_ratio": r3(self.ratio()),
            "hol": {
                "backlog": h.backlog,
                "key": HOL_KEY,
                "key_limit": HOL_RATE,
                "key_started": h.key_started,
                "tries": h.pickups_ms.len(),
                "pickup_p50_ms": p(&h.pickups_ms, 50.0),
                "pickup_p99_ms": p(&h.pickups_ms, 99.0),
                "pickup_max_ms": h.pickups_ms.last().map(|v| round_to(*v, 3)),
                "empty_queue_p50_ms": p(&h.empty_ms, 50.0),
                "empty_queue_p99_ms": p(&h.empty_ms, 99.0),
                "target_ms": hol_target_ms(),
            },
            "lock_wait_timeouts": timeouts,
            "deadlocks": deadlocks,
            "row_lock_waits": self.keyed_phase.row_lock_waits,
            "phases": Value::Object(phases),
            "targets": {
                "utilisation_min": TARGET_UTILISATION,
                "max_per_window_met": self.keys.iter().all(|k| k.max_per_window <= k.count as usize),
                "utilisation_met": !self.keys.is_empty()
                    && self.keys.iter().all(|k| k.utilisation.is_some_and(|u| u >= TARGET_UTILISATION)),
                "hol_pickup_met": hol99.map(|v| v <= hol_target_ms()),
                "no_lock_wait_timeout_met": timeouts == 0,
            },
        })
    }

    /// The text report's lines.
    pub(crate) fn human(&self) -> String {
        let s = self.settings.unwrap_or_default();
        let f = |v: Option<f64>, places: usize| {
            v.map_or_else(|| "-".to_owned(), |v| format!("{v:.places$}"))
        };
        let yes = |ok: bool| if ok { "met" } else { "MISSED" };
        let pc = |v: &[f64], q: f64| (!v.is_empty()).then(|| percentile(v, q));
        let mut text = format!(
            "\nrate limits: {RATE_WORKERS} worker processes at concurrency {} on {RATE_QUEUE}, \
             {} s with the keys, {} s without; {:.0} s in all\n",
            s.concurrency, s.secs, s.plain_secs, self.total_s
        );
        for k in &self.keys {
            text.push_str(&format!(
                "  key {} ({}): {} starts; at most {} in any {} ms window ({} <= {}); \
                 utilisation {} ({} of {:.0} allowed over {:.1} s; {} >= {TARGET_UTILISATION}); \
                 N+1 starts spanned {} ms at least, {} ms median; slack {} ms, {} decisions; \
                 first claim -> start p50 {} ms, p90 {} ms, {} over the slack\n",
                k.key,
                k.limit,
                k.starts,
                k.max_per_window,
                k.period_us / 1000,
                yes(k.max_per_window <= k.count as usize),
                k.count,
                f(k.utilisation, 3),
                k.measured,
                k.allowed,
                k.window_s,
                k.utilisation.map_or("-", |u| yes(u >= TARGET_UTILISATION)),
                f(k.span_min_ms, 1),
                f(k.span_p50_ms, 1),
                f(k.slack_ms, 1),
                k.decisions
                    .map_or_else(|| "-".to_owned(), |d| d.to_string()),
                f(pc(&k.claim_to_start_ms, 50.0), 1),
                f(pc(&k.claim_to_start_ms, 90.0), 1),
                over_slack(k).map_or_else(|| "-".to_owned(), |n| n.to_string()),
            ));
        }
        let drained = |p: &PlainRun| if p.drained { " (backlog ran out)" } else { "" };
        let alone: Vec<String> = self
            .alone
            .iter()
            .map(|a| format!("{:.0}/s{}", a.per_s, drained(a)))
            .collect();
        text.push_str(&format!(
            "  late starts (handed back by the start guard): {}; unlimited jobs beside the keys \
             {:.0}/s{}, alone {}/s (before and after: {}): ratio {}\n",
            self.late_starts(),
            self.plain.per_s,
            drained(&self.plain),
            f(self.alone_per_s(), 0),
            alone.join(", "),
            f(self.ratio(), 3),
        ));
        let h = &self.hol;
        let p = pc;
        text.push_str(&format!(
            "  head of line: beside {} jobs of a full key ({} started), an unlimited job's \
             pickup p50 {} ms, p99 {} ms ({} <= {:.0} ms); on the empty queue p50 {} ms, p99 {} \
             ms\n",
            h.backlog,
            h.key_started,
            f(p(&h.pickups_ms, 50.0), 1),
            f(p(&h.pickups_ms, 99.0), 1),
            self.hol_p99().map_or("-", |v| yes(v <= hol_target_ms())),
            hol_target_ms(),
            f(p(&h.empty_ms, 50.0), 1),
            f(p(&h.empty_ms, 99.0), 1),
        ));
        for (name, ph) in self.phases() {
            let c = &ph.counters;
            let late: Vec<String> = c
                .late_per_s
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(|(i, n)| format!("{n} in second {i}"))
                .collect();
            let late = if late.is_empty() {
                String::new()
            } else {
                format!(" ({})", late.join(", "))
            };
            text.push_str(&format!(
                "  {name} run: enqueue {:.1} s, run {:.1} s, load average {} before, {} at the \
                 end; workers: {} \
                 claims in {} polls ({} empty, {} probes), {} rate-admitted, {} late starts{late}, \
                 {} released (late starts and shutdown), {} s CPU\n",
                ph.enqueue_s,
                ph.run_s,
                f(ph.loadavg, 2),
                f(ph.loadavg_after, 2),
                c.claims,
                c.polls,
                c.empty_polls,
                c.probes,
                c.rate_admitted,
                c.rate_late_starts,
                c.released,
                f(c.cpu_s, 1),
            ));
        }
        let (timeouts, deadlocks) = self.lock_waits();
        let opt = |v: Option<i64>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
        let waits: Vec<String> = self
            .phases()
            .iter()
            .map(|(name, p)| format!("+{} ({name})", opt(p.row_lock_waits)))
            .collect();
        text.push_str(&format!(
            "  workers: {timeouts} lock wait timeouts, {deadlocks} deadlocks; server \
             Innodb_row_lock_waits (all sessions) {}\n",
            waits.join(", ")
        ));
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_count_finds_the_busiest_window() {
        assert_eq!(max_per_window(&[], 100), 0);
        assert_eq!(max_per_window(&[0, 10, 100, 110], 100), 2);
        assert_eq!(max_per_window(&[0, 10, 99, 110], 100), 3);
        assert_eq!(max_per_window(&[5, 5, 5], 1), 3);
        assert_eq!(spans(&[0, 10, 100, 110], 2), vec![100, 100]);
    }

    #[test]
    fn utilisation_counts_after_the_first_period() {
        // 2/s over 3 s, a start every 0.5 s from t0 = 0: [1 s, 3 s) holds 4 of 4 allowed.
        let starts: Vec<i64> = (0..8).map(|i| i * 500_000).collect();
        let k = analyse_key(&starts, "2/s".parse().unwrap(), 3_000_000, i64::MAX);
        assert_eq!(k.measured, 4);
        assert!((k.allowed - 4.0).abs() < 1e-9);
        assert_eq!(k.utilisation, Some(1.0));
        assert_eq!(k.max_per_window, 2);
        // Cut at the end of the run.
        let k = analyse_key(&starts, "2/s".parse().unwrap(), 3_000_000, 2_000_000);
        assert_eq!(k.measured, 2);
        assert_eq!(key_backlog("20/s".parse().unwrap(), 60), 2_000);
        assert_eq!(key_backlog("50/s".parse().unwrap(), 60), 5_000);
    }

    #[test]
    fn the_plain_rate_uses_the_run_or_the_backlog() {
        let starts: Vec<i64> = (0..=10).map(|i| i * 100_000).collect();
        let p = analyse_plain(&starts, 2_000_000, i64::MAX, false);
        assert!((p.per_s - 5.5).abs() < 1e-9, "{p:?}");
        let p = analyse_plain(&starts, 2_000_000, i64::MAX, true);
        assert!((p.per_s - 10.0).abs() < 1e-9, "{p:?}");
    }
}
