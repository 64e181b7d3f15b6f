//! The pickup scenario: an idle consumer, jobs enqueued one at a time at 20/s, latency from the
//! enqueue's commit to the handler's start. Same process, and another process (this binary's
//! hidden `bench-enqueue`, so no in-process wake-up can help).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use indicatif::ProgressBar;
use mysqlq::Worker;
use sqlx::MySqlPool;
use tokio::io::AsyncBufReadExt as _;

use crate::args::EnqueueArgs;
use crate::bench::{Bench, PICKUP_RATE, wait_for, who};
use crate::error::{BenchError, db_err, q_err};
use crate::job::{BenchNoop, KIND, QUEUE};
use crate::probe::{Probe, lock, now_us};
use crate::report::percentile;
use crate::scenario::consumer::Consumer;
use crate::{db, sql};

impl Bench<'_> {
    /// One pickup run; returns (p50, p99) in milliseconds.
    pub(crate) async fn pickup(
        &mut self,
        framework: bool,
        cross: bool,
    ) -> Result<(f64, f64), BenchError> {
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
        let consumer = Consumer::start(self, framework, &pool, &probe).await?;
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
        if let Some(h) = consumer.worker() {
            let m = h.metrics();
            let _ = wait_for(&ProgressBar::hidden(), total, || {
                m.counters.completions.load(Ordering::Relaxed)
            })
            .await;
        }
        consumer.stop().await?;
        pool.close().await;
        let commits = commits?;
        waited?;
        self.check_pickups(&label, &probe, &commits, n, "enqueued one at a time")
            .await
    }

    /// Checks that each job of `enqueued` (id, when its enqueue committed, in µs) started its
    /// handler exactly once and that the `n` rows of the run are completed; returns the pickup
    /// latency's (p50, p99) in milliseconds, from the commit to the handler's start.
    pub(crate) async fn check_pickups(
        &mut self,
        label: &str,
        probe: &Probe,
        enqueued: &[(u64, i64)],
        n: u32,
        how: &str,
    ) -> Result<(f64, f64), BenchError> {
        let starts = lock(probe.starts.as_ref().expect("timing probe")).clone();
        let mut latencies = Vec::with_capacity(enqueued.len());
        let mut wrong = 0usize;
        for (id, committed) in enqueued {
            let mine: Vec<i64> = starts
                .iter()
                .filter(|(i, _)| i == id)
                .map(|(_, t)| *t)
                .collect();
            if mine.len() != 1 {
                wrong += 1;
            }
            if let Some(t) = mine.first() {
                #[allow(clippy::cast_precision_loss)]
                latencies.push((t - committed).max(0) as f64 / 1000.0);
            }
        }
        let detail = format!(
            "{} handler runs for {} jobs {how}, {wrong} not run exactly once",
            starts.len(),
            enqueued.len()
        );
        let ok = wrong == 0 && starts.len() == enqueued.len();
        self.check(
            format!("{label}: handlers"),
            if ok { Ok(detail) } else { Err(detail) },
        );
        self.check_rows_completed(label, n).await?;
        latencies.sort_by(f64::total_cmp);
        Ok((percentile(&latencies, 50.0), percentile(&latencies, 99.0)))
    }

    /// Runs `bench-enqueue` in a child process of this binary; returns (id, commit µs) pairs.
    pub(crate) async fn enqueue_in_child(
        &self,
        n: u32,
        raw: bool,
    ) -> Result<Vec<(u64, i64)>, BenchError> {
        let exe = std::env::current_exe().map_err(|e| {
            BenchError::new(
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
            BenchError::new(
                format!("cannot start the enqueueing process: {e}"),
                "check the process limits",
            )
        })?;
        let stdout = child.stdout.take().ok_or_else(|| {
            BenchError::new("the enqueueing process has no stdout", "this is a bug")
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
            BenchError::new(
                format!("the enqueueing process: {e}"),
                "see its error above",
            )
        })?;
        if !status.success() || commits.len() != usize::try_from(n).unwrap_or(0) {
            return Err(BenchError::new(
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

/// Enqueues `n` jobs one at a time, `rate` per second, each in its own autocommit statement;
/// `sink(id, µs)` gets each job's id and the wall-clock time its enqueue returned (committed).
pub(crate) async fn enqueue_paced(
    pool: &MySqlPool,
    n: u32,
    rate: u32,
    raw: bool,
    mut sink: impl FnMut(u64, i64),
) -> Result<Vec<(u64, i64)>, BenchError> {
    let mut tick = tokio::time::interval(Duration::from_secs(1) / rate.max(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut out = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
    for seq in 0..u64::from(n) {
        tick.tick().await;
        let id = if raw {
            let payload = format!("{{\"seq\":{seq}}}");
            let mut conn = db::acquire(pool).await?;
            sql::bench_insert_one(&mut conn, QUEUE, KIND, &payload)
                .await
                .map_err(db_err("baseline INSERT failed"))?
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
pub(crate) async fn child_enqueue(url: &str, a: &EnqueueArgs) -> Result<(), BenchError> {
    let pool = db::pool(url, 2).await?;
    let r = enqueue_paced(&pool, a.count, a.rate, a.raw, |id, t| println!("{id} {t}")).await;
    pool.close().await;
    r.map(|_| ())
}
