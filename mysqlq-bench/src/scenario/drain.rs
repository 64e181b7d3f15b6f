//! The drain scenario: pre-enqueued no-op jobs drained by a real [`mysqlq::Worker`] (framework)
//! or by `concurrency` tasks looping the article's claim and completion (baseline).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mysqlq::Worker;
use tokio::task::JoinSet;

use crate::baseline::baseline_drain_loop;
use crate::bench::{BASELINE_POOL_MAX, Bench, per_s, wait_for, who};
use crate::error::{BenchError, q_err};
use crate::probe::Probe;
use crate::scenario::memory::{peak_rss_bytes, reset_peak_rss};

impl Bench<'_> {
    /// One drain run; returns jobs/s.
    pub(crate) async fn drain(&mut self, framework: bool, round: u32) -> Result<f64, BenchError> {
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

    pub(crate) async fn drain_framework(
        &mut self,
        probe: &Arc<Probe>,
    ) -> Result<(Duration, u64), BenchError> {
        let n = u64::from(self.jobs);
        let pool = self
            .scratch
            .pool(Worker::recommended_pool_size(self.concurrency))
            .await?;
        let builder = self.worker(&pool, probe)?;
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

    pub(crate) async fn drain_baseline(
        &mut self,
        probe: &Arc<Probe>,
    ) -> Result<(Duration, u64), BenchError> {
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
        let lost = lost.load(Ordering::Relaxed);
        if lost > 0 {
            self.check(
                "drain baseline: ownership".to_owned(),
                Err(format!("{lost} completions refused (token no longer held)")),
            );
        }
        Ok((took, claims.load(Ordering::Relaxed)))
    }
}
