//! The bulk enqueue scenario: all jobs in one call (framework: [`mysqlq::enqueue_many`], chunked
//! by the framework; baseline: hand-written multi-row INSERTs of the same chunk size).

use std::time::Instant;

use indicatif::ProgressBar;
use mysqlq::{EnqueueOptions, NewJob};
use sqlx::MySqlPool;

use crate::bench::{Bench, per_s, who};
use crate::error::{BenchError, db_err, q_err};
use crate::job::{BenchNoop, KIND, QUEUE};
use crate::{db, sql};

impl Bench<'_> {
    /// One bulk enqueue run; returns jobs/s.
    pub(crate) async fn enqueue_bulk(
        &mut self,
        framework: bool,
        round: u32,
    ) -> Result<f64, BenchError> {
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
}

async fn bulk_framework(pool: &MySqlPool, n: u32) -> Result<(), BenchError> {
    let jobs = (0..u64::from(n))
        .map(|seq| NewJob::from_job(&BenchNoop { seq }, &EnqueueOptions::new()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(q_err("cannot build the bench jobs"))?;
    mysqlq::enqueue_many(pool, jobs)
        .await
        .map_err(q_err("enqueue_many failed"))?;
    Ok(())
}

async fn bulk_baseline(pool: &MySqlPool, n: u32, bar: &ProgressBar) -> Result<(), BenchError> {
    let mut conn = db::acquire(pool).await?;
    let chunk = u64::try_from(sql::BASELINE_CHUNK_ROWS).unwrap_or(500);
    let mut seq = 0u64;
    while seq < u64::from(n) {
        let end = (seq + chunk).min(u64::from(n));
        let payloads: Vec<String> = (seq..end).map(|s| format!("{{\"seq\":{s}}}")).collect();
        sql::bench_insert_many(&mut conn, QUEUE, KIND, &payloads)
            .await
            .map_err(db_err("baseline multi-row INSERT failed"))?;
        bar.inc(end - seq);
        seq = end;
    }
    Ok(())
}
