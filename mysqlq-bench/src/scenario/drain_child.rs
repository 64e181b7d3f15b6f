//! `bench-drain` (hidden): one drain process of the scaling scenario, a child of this binary.
//!
//! It drains the pre-enqueued jobs of the bench queue either with a real worker (a
//! [`FrameworkVariant`]: the worker's defaults, `--concurrency`, `--batch` and the variant's
//! settings) or with `--concurrency` raw claim loops ([`baseline_drain_loop`], the drain
//! baseline's loop). Before it prints `ready` it has its pool and the ids of the queue's rows
//! (its probe counts each handler run); on `go` it starts the worker or the loops and prints
//! `progress N` (jobs completed) whenever that changed, every 2 ms at most. At SIGTERM (or the
//! end of stdin) it stops — the worker with its graceful shutdown — and prints
//! `counters {json}`: claim transactions, completion flushes, lost completions, the worker's
//! start time, its CPU time, and which jobs its handlers ran (for the parent's exactly-once
//! check over every process).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use mysqlq::Worker;
use serde_json::{Value, json};
use sqlx::MySqlPool;
use tokio::task::JoinSet;

use crate::args::DrainChildArgs;
use crate::baseline::{DrainCounters, baseline_drain_loop};
use crate::bench::{BASELINE_POOL_MAX, worker_builder};
use crate::error::{BenchError, db_err, q_err};
use crate::job::QUEUE;
use crate::probe::Probe;
use crate::scenario::child::{StdinWatch, cpu_seconds, stop_signal};
use crate::scenario::drain::FrameworkVariant;
use crate::sql::RawTable;
use crate::{db, sql};

/// How often the child looks whether its progress changed.
const PROGRESS_EVERY: Duration = Duration::from_millis(2);

/// `bench-drain` (internal).
pub(crate) async fn child_drain(url: &str, a: &DrainChildArgs) -> Result<(), BenchError> {
    let concurrency = usize::from(a.concurrency);
    let pool = if a.raw {
        db::pool(url, u32::from(a.concurrency).min(BASELINE_POOL_MAX)).await?
    } else {
        db::pool(url, Worker::recommended_pool_size(concurrency)).await?
    };
    let ids = {
        let mut conn = db::acquire(&pool).await?;
        sql::bench_ids(&mut conn, QUEUE)
            .await
            .map_err(db_err("cannot read the bench's job ids"))?
    };
    let probe = Arc::new(Probe::counting(ids));
    let watch = StdinWatch::start();
    println!("ready");
    let stop = stop_signal(watch.eof);
    tokio::pin!(stop);
    tokio::select! {
        _ = watch.go => {}
        () = &mut stop => {
            // Stopped before it was told to go: nothing ran.
            println!("counters {}", json!({ "runs": probe.runs_json() }));
            return Ok(());
        }
    }
    let counters = if a.raw {
        raw(&pool, &probe, a, stop).await?
    } else {
        let variant = FrameworkVariant::named(&a.variant).ok_or_else(|| {
            BenchError::usage(
                format!("no framework side `{}`", a.variant),
                "this is a bug in the bench",
            )
        })?;
        framework(&pool, &probe, a, variant, stop).await?
    };
    let mut counters = counters;
    counters["runs"] = probe.runs_json();
    counters["cpu_s"] = json!(cpu_seconds());
    println!("counters {counters}");
    pool.close().await;
    Ok(())
}

/// Prints `progress N` whenever `done()` changed, until `stop` fires.
async fn report_progress(done: impl Fn() -> u64, stop: impl Future<Output = ()>) {
    tokio::pin!(stop);
    let mut last = 0;
    loop {
        let now = done();
        if now != last {
            println!("progress {now}");
            last = now;
        }
        tokio::select! {
            () = tokio::time::sleep(PROGRESS_EVERY) => {}
            () = &mut stop => return,
        }
    }
}

/// The first error of a raw loop (pending forever when they all end well).
async fn first_error(tasks: &mut JoinSet<Result<(), BenchError>>) -> BenchError {
    while let Some(r) = tasks.join_next().await {
        match r {
            Ok(Err(e)) => return e,
            Err(e) if !e.is_cancelled() => {
                return BenchError::new(
                    format!("a raw claim loop failed: {e}"),
                    "this is a bug in the bench",
                );
            }
            Ok(Ok(())) | Err(_) => {}
        }
    }
    std::future::pending().await
}

/// A worker until `stop`, then its graceful shutdown; its counters.
async fn framework(
    pool: &MySqlPool,
    probe: &Arc<Probe>,
    a: &DrainChildArgs,
    variant: FrameworkVariant,
    stop: impl Future<Output = ()>,
) -> Result<Value, BenchError> {
    let builder = worker_builder(pool, probe, usize::from(a.concurrency), a.batch)?
        .worker_id(format!("mysqlq-bench-drain-{}", a.index));
    let builder = (variant.configure)(builder);
    let starting = Instant::now();
    let handle = builder
        .start()
        .await
        .map_err(q_err("the bench worker could not start"))?;
    let start_ms = starting.elapsed().as_secs_f64() * 1000.0;
    let metrics = handle.metrics();
    report_progress(
        || metrics.counters.completions.load(Ordering::Relaxed),
        stop,
    )
    .await;
    let shutdown = handle.shutdown().await;
    let c = metrics.counters.snapshot();
    Ok(json!({
        // Claim transactions: polls less the ready probes of idle loops.
        "claims": c.polls.saturating_sub(c.probes),
        "flushes": c.completion_flushes,
        "piggybacked": c.piggybacked,
        "completions": c.completions,
        "lost": c.lost,
        "start_ms": start_ms,
        "shutdown_ok": shutdown.is_ok(),
    }))
}

/// `--concurrency` raw claim loops until the queue is empty, reporting progress until `stop`;
/// their counters.
async fn raw(
    pool: &MySqlPool,
    probe: &Arc<Probe>,
    a: &DrainChildArgs,
    stop: impl Future<Output = ()>,
) -> Result<Value, BenchError> {
    let batch = a.batch.unwrap_or(mysqlq::WorkerConfig::DEFAULT_BATCH_SIZE);
    let worker = format!("bench-baseline:{}", std::process::id());
    let counters = Arc::new(DrainCounters::default());
    // Counts the completed jobs; never drawn.
    let bar = ProgressBar::hidden();
    let mut tasks = JoinSet::new();
    for _ in 0..a.concurrency {
        let (pool, probe, worker, counters, bar) = (
            pool.clone(),
            probe.clone(),
            worker.clone(),
            counters.clone(),
            bar.clone(),
        );
        tasks.spawn(async move {
            baseline_drain_loop(
                &pool,
                RawTable::JobQueue,
                &probe,
                batch,
                &worker,
                &counters,
                &bar,
            )
            .await
        });
    }
    let failed = tokio::select! {
        () = report_progress(|| bar.position(), stop) => None,
        e = first_error(&mut tasks) => Some(e),
    };
    // The loops end by themselves once they find the queue empty; any still running are
    // stopped here (the parent stops the child only after every job completed).
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    if let Some(e) = failed {
        return Err(e);
    }
    Ok(json!({
        "claims": counters.claims.load(Ordering::Relaxed),
        "flushes": counters.flushes.load(Ordering::Relaxed),
        "piggybacked": 0,
        "completions": bar.position(),
        "lost": counters.lost.load(Ordering::Relaxed),
    }))
}
