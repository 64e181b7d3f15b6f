//! The single-row enqueue scenario: one row per autocommit call from `min(concurrency, 64)`
//! tasks (framework: `BenchNoop { seq }.enqueue(&pool)`; baseline: a plain `INSERT`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use tokio::task::JoinSet;

use crate::bench::{Bench, SINGLE_TASKS_MAX, per_s, who};
use crate::error::{BenchError, db_err, q_err};
use crate::job::{BenchNoop, KIND, QUEUE};
use crate::{db, sql};

impl Bench<'_> {
    /// One single-row enqueue run; returns jobs/s.
    pub(crate) async fn enqueue_single(
        &mut self,
        framework: bool,
        round: u32,
    ) -> Result<f64, BenchError> {
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
                        return Ok::<(), BenchError>(());
                    }
                    if framework {
                        BenchNoop { seq }
                            .enqueue(&pool)
                            .await
                            .map_err(q_err("enqueue failed"))?;
                    } else {
                        let payload = format!("{{\"seq\":{seq}}}");
                        let mut conn = db::acquire(&pool).await?;
                        sql::bench_insert_one(&mut conn, QUEUE, KIND, &payload)
                            .await
                            .map_err(db_err("baseline INSERT failed"))?;
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
}
