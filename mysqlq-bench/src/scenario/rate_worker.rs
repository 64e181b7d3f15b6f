//! The rate scenario's worker processes: `bench-worker` (hidden), a child of this binary running
//! one mysqlq worker with its defaults but the concurrency on [`RATE_QUEUE`], started and stopped
//! through [`crate::scenario::child`] (SIGTERM, its counters read).
//!
//! Handlers note their start first thing ([`crate::job::BenchRate`]) and hand it to the
//! process's [`Recorder`] through a channel; a task writes the starts to `bench_starts` in
//! batches, so recording adds nothing before a start. The child prints `ready` once its worker
//! runs, and at exit (SIGTERM, SIGINT, or its stdin closed: the parent is gone) one line
//! `counters {json}` with its worker's counters, after the graceful shutdown and the last batch.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mysqlq::Worker;
use serde_json::{Value, json};
use sqlx::MySqlPool;
use tokio::sync::{mpsc, oneshot};

use crate::args::WorkerArgs;
use crate::error::{BenchError, db_err, q_err};
use crate::job::{self, RATE_QUEUE};
use crate::probe::lock;
use crate::scenario::child::{ChildProc, StdinWatch, cpu_seconds, stop_all, stop_signal};
use crate::{db, sql};

/// How often the recorder writes what its handlers started.
const FLUSH_EVERY: Duration = Duration::from_millis(50);
/// Most starts per INSERT.
const INSERT_ROWS: usize = 1_000;

/// One handler start: job id, tag (its rate key, or `plain`), wall-clock µs.
pub(crate) struct Start {
    id: u64,
    tag: String,
    us: i64,
}

/// The handlers' side of the recorder: a channel to the batch inserter.
pub(crate) struct Recorder {
    tx: mpsc::UnboundedSender<Start>,
}

impl Recorder {
    /// Notes a start (never waits).
    pub(crate) fn started(&self, id: u64, tag: String, us: i64) {
        let _ = self.tx.send(Start { id, tag, us });
    }
}

/// Writes the starts it receives every [`FLUSH_EVERY`] until `stop`, then the rest; returns how
/// many it wrote.
async fn insert_loop(
    pool: MySqlPool,
    worker: u16,
    mut rx: mpsc::UnboundedReceiver<Start>,
    mut stop: oneshot::Receiver<()>,
) -> Result<u64, BenchError> {
    let mut written = 0u64;
    let mut stopping = false;
    loop {
        if !stopping {
            tokio::select! {
                () = tokio::time::sleep(FLUSH_EVERY) => {}
                _ = &mut stop => stopping = true,
            }
        }
        let mut batch = Vec::new();
        while batch.len() < INSERT_ROWS {
            match rx.try_recv() {
                Ok(s) => batch.push(s),
                Err(_) => break,
            }
        }
        if !batch.is_empty() {
            let rows: Vec<(u64, &str, i64)> =
                batch.iter().map(|s| (s.id, s.tag.as_str(), s.us)).collect();
            let mut conn = db::acquire(&pool).await?;
            sql::bench_rate_insert_starts(&mut conn, worker, &rows)
                .await
                .map_err(db_err("cannot record the handlers' starts"))?;
            written += rows.len() as u64;
        }
        if stopping && batch.len() < INSERT_ROWS {
            return Ok(written);
        }
    }
}

/// `bench-worker` (internal): runs until SIGTERM, SIGINT or the end of stdin, then shuts the
/// worker down gracefully and prints its counters.
pub(crate) async fn child_worker(url: &str, a: &WorkerArgs) -> Result<(), BenchError> {
    let concurrency = usize::from(a.concurrency);
    let pool = db::pool(url, Worker::recommended_pool_size(concurrency)).await?;
    let rec_pool = db::pool(url, 1).await?;
    let (tx, rx) = mpsc::unbounded_channel();
    let (stop_tx, stop_rx) = oneshot::channel();
    let inserter = tokio::spawn(insert_loop(rec_pool.clone(), a.index, rx, stop_rx));
    let started = Worker::builder(pool.clone())
        .registry(job::rate_registry()?)
        .queues([RATE_QUEUE])
        .concurrency(concurrency)
        .worker_id(format!("mysqlq-bench-rate-{}", a.index))
        .state(Arc::new(Recorder { tx }))
        .start()
        .await
        .map_err(q_err("the bench worker could not start"))?;
    let metrics = started.metrics();
    println!("ready");
    // The late starts of each second since the worker ran (an atomic read a second).
    let late_per_s = Arc::new(Mutex::new(Vec::new()));
    let sampler = {
        let metrics = metrics.clone();
        let late_per_s = late_per_s.clone();
        tokio::spawn(async move {
            let mut last = 0;
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            loop {
                tick.tick().await;
                let now = metrics.counters.rate_late_starts.load(Ordering::Relaxed);
                lock(&late_per_s).push(now - last);
                last = now;
            }
        })
    };
    stop_signal(StdinWatch::start().eof).await;
    sampler.abort();
    let late_per_s = lock(&late_per_s).clone();
    let stopping = Instant::now();
    let shutdown = started.shutdown().await;
    let shutdown_ms = stopping.elapsed().as_secs_f64() * 1000.0;
    let _ = stop_tx.send(());
    let recorded = match inserter.await {
        Ok(r) => r?,
        Err(e) => {
            return Err(BenchError::new(
                format!("the recorder failed: {e}"),
                "this is a bug in the bench",
            ));
        }
    };
    let c = metrics.counters.snapshot();
    println!(
        "counters {}",
        json!({
            "polls": c.polls,
            "empty_polls": c.empty_polls,
            "probes": c.probes,
            "claims": c.claims,
            "completions": c.completions,
            "rate_admitted": c.rate_admitted,
            "rate_late_starts": c.rate_late_starts,
            "lock_waits": c.lock_waits,
            "deadlocks": c.deadlocks,
            "db_errors": c.db_errors,
            "released": c.released,
            "lost": c.lost,
            "recorded": recorded,
            "shutdown_ms": shutdown_ms,
            "shutdown_ok": shutdown.is_ok(),
            "cpu_s": cpu_seconds(),
            "late_per_s": late_per_s,
        })
    );
    pool.close().await;
    rec_pool.close().await;
    Ok(())
}

/// The counters one `bench-worker` printed at exit (summed over several with `add`).
#[derive(Debug, Clone, Default)]
pub(crate) struct ChildCounters {
    pub(crate) workers: u32,
    pub(crate) polls: u64,
    pub(crate) empty_polls: u64,
    pub(crate) probes: u64,
    pub(crate) claims: u64,
    pub(crate) completions: u64,
    pub(crate) rate_admitted: u64,
    pub(crate) rate_late_starts: u64,
    pub(crate) lock_waits: u64,
    pub(crate) deadlocks: u64,
    pub(crate) db_errors: u64,
    pub(crate) released: u64,
    pub(crate) lost: u64,
    pub(crate) recorded: u64,
    /// The slowest worker's graceful shutdown.
    pub(crate) shutdown_ms_max: f64,
    /// CPU seconds of the worker processes, summed.
    pub(crate) cpu_s: Option<f64>,
    /// Late starts in each second since the process's worker ran, summed over the processes.
    pub(crate) late_per_s: Vec<u64>,
}

impl ChildCounters {
    fn parse(v: &Value) -> Self {
        let n = |k: &str| v[k].as_u64().unwrap_or(0);
        Self {
            workers: 1,
            polls: n("polls"),
            empty_polls: n("empty_polls"),
            probes: n("probes"),
            claims: n("claims"),
            completions: n("completions"),
            rate_admitted: n("rate_admitted"),
            rate_late_starts: n("rate_late_starts"),
            lock_waits: n("lock_waits"),
            deadlocks: n("deadlocks"),
            db_errors: n("db_errors"),
            released: n("released"),
            lost: n("lost"),
            recorded: n("recorded"),
            shutdown_ms_max: v["shutdown_ms"].as_f64().unwrap_or(0.0),
            cpu_s: v["cpu_s"].as_f64(),
            late_per_s: v["late_per_s"]
                .as_array()
                .map(|a| a.iter().map(|x| x.as_u64().unwrap_or(0)).collect())
                .unwrap_or_default(),
        }
    }

    /// `self + o`, counter by counter.
    pub(crate) fn add(&self, o: &Self) -> Self {
        Self {
            workers: self.workers + o.workers,
            polls: self.polls + o.polls,
            empty_polls: self.empty_polls + o.empty_polls,
            probes: self.probes + o.probes,
            claims: self.claims + o.claims,
            completions: self.completions + o.completions,
            rate_admitted: self.rate_admitted + o.rate_admitted,
            rate_late_starts: self.rate_late_starts + o.rate_late_starts,
            lock_waits: self.lock_waits + o.lock_waits,
            deadlocks: self.deadlocks + o.deadlocks,
            db_errors: self.db_errors + o.db_errors,
            released: self.released + o.released,
            lost: self.lost + o.lost,
            recorded: self.recorded + o.recorded,
            shutdown_ms_max: self.shutdown_ms_max.max(o.shutdown_ms_max),
            cpu_s: match (self.cpu_s, o.cpu_s) {
                (Some(a), Some(b)) => Some(a + b),
                (a, b) => a.or(b),
            },
            late_per_s: (0..self.late_per_s.len().max(o.late_per_s.len()))
                .map(|i| {
                    self.late_per_s.get(i).copied().unwrap_or(0)
                        + o.late_per_s.get(i).copied().unwrap_or(0)
                })
                .collect(),
        }
    }

    pub(crate) fn json(&self) -> Value {
        json!({
            "processes": self.workers,
            "polls": self.polls,
            "empty_polls": self.empty_polls,
            "probes": self.probes,
            "claims": self.claims,
            "completions": self.completions,
            "rate_admitted": self.rate_admitted,
            "rate_late_starts": self.rate_late_starts,
            "lock_wait_timeouts": self.lock_waits,
            "deadlocks": self.deadlocks,
            "db_errors": self.db_errors,
            "released": self.released,
            "lost": self.lost,
            "starts_recorded": self.recorded,
            "shutdown_ms_max": crate::report::round_to(self.shutdown_ms_max, 1),
            "cpu_s": self.cpu_s.map(|c| crate::report::round_to(c, 2)),
            // [second since the workers ran, late starts in it], seconds with any.
            "late_starts_by_second": self
                .late_per_s
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(|(i, n)| json!([i, n]))
                .collect::<Vec<_>>(),
        })
    }
}

/// Starts `n` worker processes at once and waits until each runs.
pub(crate) async fn start_workers(
    url: &str,
    n: u16,
    concurrency: u16,
) -> Result<Vec<ChildProc>, BenchError> {
    let mut procs = Vec::new();
    for i in 0..n {
        let args = [
            "bench-worker".to_owned(),
            "--index".to_owned(),
            i.to_string(),
            "--concurrency".to_owned(),
            concurrency.to_string(),
        ];
        procs.push(ChildProc::spawn(url, &args)?);
    }
    for p in &mut procs {
        p.ready().await?;
    }
    Ok(procs)
}

/// SIGTERM to every process at once, then each one's counters, summed.
pub(crate) async fn stop_workers(procs: Vec<ChildProc>) -> Result<ChildCounters, BenchError> {
    let lines = stop_all(procs).await?;
    Ok(lines
        .iter()
        .map(ChildCounters::parse)
        .reduce(|a, b| a.add(&b))
        .unwrap_or_default())
}
