//! The periodic scenario: [`PERIODIC_WORKERS`] workers with their default settings carry one
//! schedule that ticks every second, for `--periodic-seconds`. Reported: how late each tick's
//! job was enqueued — its row's `created_at` minus the tick, both on the database clock — as p50,
//! p99 and max; checked: every tick between the schedule's first (its baseline, recorded without
//! a job) and the last second before the workers were stopped is in the ledger with exactly one
//! job, and no other job was enqueued.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mysqlq::{Periodic, Worker, WorkerHandle};
use serde_json::{Value, json};

use crate::bench::Bench;
use crate::db;
use crate::error::{BenchError, db_err, q_err};
use crate::job::BenchNoop;
use crate::probe::Probe;
use crate::report::{percentile, round_to};
use crate::sql::{self, BenchTick};

/// Workers carrying the schedule (each would be a process of its own in production).
pub(crate) const PERIODIC_WORKERS: usize = 3;
/// The schedule: every second (6 fields, seconds first).
pub(crate) const SCHEDULE: &str = "* * * * * *";
/// The schedule's ledger name.
const NAME: &str = "mysqlq-bench-periodic";

/// What the periodic run measured.
#[derive(Debug, Clone)]
pub(crate) struct PeriodicRun {
    /// How long the workers ran.
    pub(crate) seconds: u32,
    /// Ticks whose job was enqueued.
    pub(crate) ticks: usize,
    /// Each enqueued tick's lateness in milliseconds, sorted.
    pub(crate) lateness_ms: Vec<f64>,
}

impl Bench<'_> {
    /// One periodic run of `seconds`.
    pub(crate) async fn periodic(&mut self, seconds: u32) -> Result<PeriodicRun, BenchError> {
        let label = "periodic framework";
        self.reset().await?;
        self.phase(
            &format!("{label}: {PERIODIC_WORKERS} workers, a tick every second"),
            seconds,
        );
        let probe = Arc::new(Probe::counting(Vec::new()));
        let pool = self
            .scratch
            .pool(Worker::recommended_pool_size(self.concurrency))
            .await?;
        let schedule = Periodic::new(SCHEDULE, &BenchNoop { seq: 0 })
            .map_err(q_err("cannot build the bench's schedule"))?
            .named(NAME);
        let mut workers: Vec<WorkerHandle> = Vec::new();
        for i in 0..PERIODIC_WORKERS {
            let started = match self.worker(&pool, &probe) {
                Ok(b) => b
                    .worker_id(format!("mysqlq-bench-periodic-{i}"))
                    .periodic(schedule.clone())
                    .start()
                    .await
                    .map_err(q_err("the bench worker could not start")),
                Err(e) => Err(e),
            };
            match started {
                Ok(w) => workers.push(w),
                Err(e) => {
                    for w in workers {
                        let _ = w.shutdown().await;
                    }
                    return Err(e);
                }
            }
        }
        let began = Instant::now();
        let run_for = Duration::from_secs(u64::from(seconds));
        while began.elapsed() < run_for {
            tokio::time::sleep(Duration::from_millis(250)).await;
            self.bar.set_position(began.elapsed().as_secs());
        }
        let stopped_us = {
            let mut conn = db::acquire(&self.setup).await?;
            sql::bench_now_us(&mut conn)
                .await
                .map_err(db_err("cannot read the database clock"))?
        };
        for w in workers {
            let _ = w.shutdown().await;
        }
        pool.close().await;
        let ticks = {
            let mut conn = db::acquire(&self.setup).await?;
            sql::bench_ticks(&mut conn, NAME)
                .await
                .map_err(db_err("cannot read the periodic jobs' ledger"))?
        };
        let jobs = self.counts().await?.rows;
        // A tick of the last second before the stop may still have been on its way.
        let window_end = stopped_us.div_euclid(1_000_000) - 1;
        self.check(
            format!("{label}: every tick enqueued once"),
            verify(&ticks, window_end, jobs),
        );
        Ok(PeriodicRun {
            seconds,
            ticks: ticks.iter().filter(|t| t.job_id.is_some()).count(),
            lateness_ms: lateness_ms(&ticks),
        })
    }
}

/// Every tick after the first (the baseline) up to `window_end` (seconds since the epoch) has
/// exactly one job in `job_queue`, and the queue holds no job that no tick enqueued (`jobs`
/// rows in all).
fn verify(ticks: &[BenchTick], window_end: i64, jobs: i64) -> Result<String, String> {
    let Some(first) = ticks.first() else {
        return Err("no tick was recorded".into());
    };
    let mut missing = Vec::new();
    let mut in_window = 0;
    for s in first.tick_s + 1..=window_end {
        in_window += 1;
        let ok = ticks
            .iter()
            .any(|t| t.tick_s == s && t.job_id.is_some() && t.late_us.is_some());
        if !ok {
            missing.push(s - first.tick_s);
        }
    }
    let mut ids: Vec<u64> = ticks.iter().filter_map(|t| t.job_id).collect();
    let with_job = ids.len();
    ids.sort_unstable();
    ids.dedup();
    let detail = format!(
        "{in_window} ticks in the window, {} without their job; {jobs} jobs for {with_job} \
         ticks recorded with one ({} distinct)",
        missing.len(),
        ids.len()
    );
    let one_each = i64::try_from(with_job).is_ok_and(|n| n == jobs) && ids.len() == with_job;
    if missing.is_empty() && one_each && in_window > 0 {
        Ok(detail)
    } else if missing.is_empty() {
        Err(detail)
    } else {
        let first_missing: Vec<String> = missing.iter().take(5).map(|s| format!("+{s}s")).collect();
        Err(format!(
            "{detail} (missing: {} after the baseline)",
            first_missing.join(", ")
        ))
    }
}

/// The lateness of every tick whose job is in the queue, in milliseconds, sorted.
fn lateness_ms(ticks: &[BenchTick]) -> Vec<f64> {
    #[allow(clippy::cast_precision_loss)]
    let mut v: Vec<f64> = ticks
        .iter()
        .filter_map(|t| t.late_us)
        .map(|us| us as f64 / 1000.0)
        .collect();
    v.sort_by(f64::total_cmp);
    v
}

impl PeriodicRun {
    /// (p50, p99, max) lateness in milliseconds (`None` without an enqueued tick).
    pub(crate) fn figures(&self) -> Option<(f64, f64, f64)> {
        let max = *self.lateness_ms.last()?;
        Some((
            percentile(&self.lateness_ms, 50.0),
            percentile(&self.lateness_ms, 99.0),
            max,
        ))
    }

    /// The `periodic` object of `--json`.
    pub(crate) fn json(&self) -> Value {
        let f = self.figures();
        json!({
            "workers": PERIODIC_WORKERS,
            "schedule": SCHEDULE,
            "seconds": self.seconds,
            "ticks_enqueued": self.ticks,
            "lateness_p50_ms": f.map(|f| round_to(f.0, 3)),
            "lateness_p99_ms": f.map(|f| round_to(f.1, 3)),
            "lateness_max_ms": f.map(|f| round_to(f.2, 3)),
        })
    }

    /// The text report's lines.
    pub(crate) fn human(&self) -> String {
        let figures = self.figures().map_or_else(
            || "no tick enqueued".to_owned(),
            |(p50, p99, max)| format!("p50 {p50:.1} ms, p99 {p99:.1} ms, max {max:.1} ms"),
        );
        format!(
            "\nperiodic jobs: {PERIODIC_WORKERS} workers on one schedule ticking every second, \
             {} s, {} ticks enqueued; lateness (the tick's job row written, minus the tick, \
             database clock): {figures}\n",
            self.seconds, self.ticks
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tick(tick_s: i64, job_id: Option<u64>) -> BenchTick {
        BenchTick {
            tick_s,
            job_id,
            late_us: job_id.map(|_| 2_000),
        }
    }

    #[test]
    fn every_tick_of_the_window_needs_one_job() {
        let ticks = [tick(100, None), tick(101, Some(1)), tick(102, Some(2))];
        assert!(verify(&ticks, 102, 2).is_ok());
        // A tick at the very end may still have been on its way: outside the window.
        assert!(verify(&ticks, 101, 2).is_ok());
        let gap = [tick(100, None), tick(101, Some(1)), tick(103, Some(2))];
        let e = verify(&gap, 103, 2).unwrap_err();
        assert!(e.contains("missing: +2s"), "{e}");
        // A job no tick accounts for.
        assert!(verify(&ticks, 102, 3).is_err());
        assert!(verify(&[], 102, 0).is_err());
        assert_eq!(lateness_ms(&ticks), vec![2.0, 2.0]);
    }
}
