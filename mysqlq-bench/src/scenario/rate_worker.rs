//! The rate scenario's worker processes: `bench-worker` (hidden), a child of this binary running
//! one mysqlq worker with its defaults but the concurrency on [`RATE_QUEUE`], and the parent's
//! handle on it ([`WorkerProc`]: started, told to stop with SIGTERM, its counters read).
//!
//! Handlers note their start first thing ([`crate::job::BenchRate`]) and hand it to the
//! process's [`Recorder`] through a channel; a task writes the starts to `bench_starts` in
//! batches, so recording adds nothing before a start. The child prints `ready` once its worker
//! runs, and at exit (SIGTERM, SIGINT, or its stdin closed: the parent is gone) one line
//! `counters {json}` with its worker's counters, after the graceful shutdown and the last batch.

use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mysqlq::Worker;
use serde_json::{Value, json};
use sqlx::MySqlPool;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _};
use tokio::process::{Child, ChildStdin};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::args::WorkerArgs;
use crate::error::{BenchError, db_err, q_err};
use crate::job::{self, RATE_QUEUE};
use crate::probe::lock;
use crate::{db, sql};

/// How often the recorder writes what its handlers started.
const FLUSH_EVERY: Duration = Duration::from_millis(50);
/// Most starts per INSERT.
const INSERT_ROWS: usize = 1_000;
/// Longest wait for a child to print `ready`.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest wait for a child to exit after SIGTERM (its graceful shutdown waits up to 30 s).
const EXIT_TIMEOUT: Duration = Duration::from_secs(60);

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

/// This process's CPU time (user + system), in seconds, from `/proc/self/stat` (`None`
/// elsewhere). Assumes 100 clock ticks per second, as on every Linux of the last decades.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
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
    stop_signal().await;
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

/// SIGTERM, SIGINT, or the end of stdin (the parent is gone).
async fn stop_signal() {
    // A thread of its own, not tokio's stdin: the runtime's shutdown would wait for its
    // blocking read, which only ends when the parent closes the pipe.
    let (eof_tx, eof) = oneshot::channel::<()>();
    let watching = std::thread::Builder::new()
        .name("stdin-watch".into())
        .spawn(move || {
            use std::io::Read as _;
            let mut buf = [0u8; 64];
            let mut stdin = std::io::stdin();
            while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
            let _ = eof_tx.send(());
        })
        .is_ok();
    let stdin_closed = async {
        if watching {
            let _ = eof.await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
                () = stdin_closed => {}
            }
            return;
        }
    }
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = stdin_closed => {}
    }
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

/// A running `bench-worker` child.
pub(crate) struct WorkerProc {
    child: Child,
    /// Held open: the child stops when it closes (the bench is gone).
    stdin: Option<ChildStdin>,
    ready: Option<oneshot::Receiver<()>>,
    /// The child's `counters` line, once it printed it.
    counters: JoinHandle<Option<String>>,
    /// Its stderr, shown if it fails.
    stderr: JoinHandle<String>,
}

impl WorkerProc {
    /// Starts `bench-worker --index index --concurrency concurrency` on the scratch database.
    pub(crate) fn spawn(url: &str, index: u16, concurrency: u16) -> Result<Self, BenchError> {
        let exe = std::env::current_exe().map_err(|e| {
            BenchError::new(
                format!("cannot find this program to start the worker processes: {e}"),
                "run the bench from a regular file",
            )
        })?;
        let mut cmd = tokio::process::Command::new(exe);
        cmd.arg("bench-worker")
            .args([
                "--index",
                &index.to_string(),
                "--concurrency",
                &concurrency.to_string(),
            ])
            .env("DATABASE_URL", url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| {
            BenchError::new(
                format!("cannot start a worker process: {e}"),
                "check the process limits",
            )
        })?;
        let no_pipe = || BenchError::new("a worker process has no stdout", "this is a bug");
        let stdout = child.stdout.take().ok_or_else(no_pipe)?;
        let stderr = child.stderr.take().ok_or_else(no_pipe)?;
        let (ready_tx, ready) = oneshot::channel();
        let counters = tokio::spawn(async move {
            let mut ready_tx = Some(ready_tx);
            let mut lines = tokio::io::BufReader::new(stdout).lines();
            let mut counters = None;
            while let Ok(Some(line)) = lines.next_line().await {
                if line == "ready" {
                    if let Some(tx) = ready_tx.take() {
                        let _ = tx.send(());
                    }
                } else if let Some(rest) = line.strip_prefix("counters ") {
                    counters = Some(rest.to_owned());
                }
            }
            counters
        });
        let stderr = tokio::spawn(async move {
            let mut text = String::new();
            let _ = tokio::io::BufReader::new(stderr)
                .read_to_string(&mut text)
                .await;
            text
        });
        Ok(Self {
            stdin: child.stdin.take(),
            child,
            ready: Some(ready),
            counters,
            stderr,
        })
    }

    /// Waits until the child's worker runs.
    pub(crate) async fn ready(&mut self) -> Result<(), BenchError> {
        let Some(ready) = self.ready.take() else {
            return Ok(());
        };
        match tokio::time::timeout(READY_TIMEOUT, ready).await {
            Ok(Ok(())) => Ok(()),
            _ => {
                let _ = self.child.start_kill();
                let _ = self.child.wait().await;
                let err = (&mut self.stderr).await.unwrap_or_default();
                Err(BenchError::new(
                    format!(
                        "a worker process did not start: {}",
                        err.trim().replace('\n', " ")
                    ),
                    "see its error",
                ))
            }
        }
    }

    /// Sends SIGTERM (the worker's graceful shutdown), by the child's process id.
    pub(crate) fn terminate(&self) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }

    /// Waits for the child's exit (after [`terminate`](Self::terminate)); its counters.
    pub(crate) async fn finish(mut self) -> Result<ChildCounters, BenchError> {
        let status = match tokio::time::timeout(EXIT_TIMEOUT, self.child.wait()).await {
            Ok(s) => s.ok(),
            Err(_) => {
                let _ = self.child.start_kill();
                let _ = self.child.wait().await;
                None
            }
        };
        drop(self.stdin.take());
        let line = (&mut self.counters).await.ok().flatten();
        let err = (&mut self.stderr).await.unwrap_or_default();
        match (status, line) {
            (Some(s), Some(line)) if s.success() => {
                let v: Value = serde_json::from_str(&line).map_err(|e| {
                    BenchError::new(
                        format!("a worker process printed unreadable counters ({e}): {line}"),
                        "this is a bug in the bench",
                    )
                })?;
                Ok(ChildCounters::parse(&v))
            }
            (status, _) => Err(BenchError::new(
                format!(
                    "a worker process ended with {} without its counters: {}",
                    status.map_or_else(|| "no exit in time".to_owned(), |s| s.to_string()),
                    err.trim().replace('\n', " ")
                ),
                "see its error",
            )),
        }
    }
}

/// Starts `n` worker processes at once and waits until each runs.
pub(crate) async fn start_workers(
    url: &str,
    n: u16,
    concurrency: u16,
) -> Result<Vec<WorkerProc>, BenchError> {
    let mut procs = Vec::new();
    for i in 0..n {
        procs.push(WorkerProc::spawn(url, i, concurrency)?);
    }
    for p in &mut procs {
        p.ready().await?;
    }
    Ok(procs)
}

/// SIGTERM to every process at once, then each one's counters, summed.
pub(crate) async fn stop_workers(procs: Vec<WorkerProc>) -> Result<ChildCounters, BenchError> {
    for p in &procs {
        p.terminate();
    }
    let mut sum: Option<ChildCounters> = None;
    let mut first_err = None;
    for p in procs {
        match p.finish().await {
            Ok(c) => sum = Some(sum.map_or_else(|| c.clone(), |s| s.add(&c))),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(sum.unwrap_or_default()),
    }
}
