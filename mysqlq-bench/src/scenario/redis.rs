//! The Redis scenario (`--scenario redis --redis-url URL`, or `all` with a URL): the framework's
//! drain and pickup runs again with the worker serving the queue over Redis Streams
//! (`docs/redis.md`: relay, stream, consumer group, take, handler, outcome in MySQL, then
//! `XACK` and `XDEL`), beside the MySQL path measured by the other scenarios in the same run,
//! and a pickup through the fast producer. The streams live under a prefix of the run's own and
//! are deleted afterwards.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use indicatif::ProgressBar;
use mysqlq::redis::{Redis, RedisConfig};
use mysqlq::{EnqueueOptions, NewJob, Worker};
use serde_json::{Value, json};

use crate::bench::{Bench, PICKUP_RATE, Side, wait_for};
use crate::error::{BenchError, q_err};
use crate::job::{BenchNoop, QUEUE};
use crate::probe::{Probe, now_us};
use crate::report::{round_to, values};
use crate::scenario::drain::Drainer;
use crate::table::Table;

/// What the Redis runs measured: the drain and pickup fields of a [`Side`], and the server.
#[derive(Debug, Default, Clone)]
pub(crate) struct RedisSide {
    pub(crate) side: Side,
    /// Pickup of jobs enqueued with the fast producer (`Redis::enqueue_many`), p50 and p99 ms,
    /// from the start of the call (so its INSERT and COMMIT count) to the handler's start.
    pub(crate) pickup_fast: Option<(f64, f64)>,
    pub(crate) server: Option<String>,
}

impl Bench<'_> {
    /// Drain (`rounds` runs) and pickup (same process, cross-process) over Redis.
    pub(crate) async fn redis_runs(
        &mut self,
        url: &str,
        rounds: u32,
    ) -> Result<RedisSide, BenchError> {
        let config = RedisConfig {
            prefix: format!("mysqlq-bench-{:016x}", fastrand::u64(..)),
            ..RedisConfig::default()
        };
        let redis = Redis::connect_with(url, config)
            .await
            .map_err(q_err("cannot use Redis at --redis-url"))?;
        let (a, b, c) = redis
            .version()
            .await
            .map_err(q_err("cannot read Redis's version"))?;
        let mut out = RedisSide {
            server: Some(format!("{a}.{b}.{c}")),
            ..RedisSide::default()
        };
        self.redis = Some(redis.clone());
        // The drain's server-counter diagnostics stay those of the MySQL path.
        let diag = self.diag.clone();
        let result = async {
            for round in 0..rounds {
                let first = self.checks.len();
                out.side
                    .drain
                    .push(self.drain(Drainer::FRAMEWORK, round).await?);
                self.label_redis(first);
            }
            let first = self.checks.len();
            out.side.pickup_same = Some(self.pickup(true, false).await?);
            out.side.pickup_cross = Some(self.pickup(true, true).await?);
            out.pickup_fast = Some(self.pickup_fast(&redis).await?);
            self.label_redis(first);
            Ok::<_, BenchError>(())
        }
        .await;
        self.redis = None;
        self.diag = diag;
        delete_stream(url, &redis).await;
        result.map(|()| out)
    }

    /// Pickup through the fast producer: an idle worker over Redis, one job per call at the
    /// pickup rate, each handler start checked once.
    async fn pickup_fast(&mut self, redis: &Redis) -> Result<(f64, f64), BenchError> {
        let n = self.pickup_jobs;
        let label = "pickup framework fast producer".to_owned();
        self.reset().await?;
        self.phase(&format!("{label}: idling"), n);
        let probe = Arc::new(Probe::timing());
        let pool = self
            .scratch
            .pool(Worker::recommended_pool_size(self.concurrency))
            .await?;
        let worker = self
            .worker(&pool, &probe)?
            .start()
            .await
            .map_err(q_err("the bench worker could not start"))?;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        self.bar.set_message(label.clone());
        let epool = self.scratch.pool(2).await?;
        let mut tick = tokio::time::interval(Duration::from_secs(1) / PICKUP_RATE);
        let mut calls = Vec::with_capacity(n as usize);
        let mut failed = None;
        for seq in 0..u64::from(n) {
            tick.tick().await;
            let job = match NewJob::from_job(&BenchNoop { seq }, &EnqueueOptions::default()) {
                Ok(j) => j,
                Err(e) => return Err(BenchError::mysqlq("cannot build the bench job", &e)),
            };
            let t = now_us();
            match redis.enqueue_many(&epool, [job]).await {
                Ok(e) => calls.push((e[0].id().0, t)),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
            self.bar.inc(1);
        }
        epool.close().await;
        let p = probe.clone();
        let waited = wait_for(&ProgressBar::hidden(), calls.len() as u64, move || {
            p.total()
        })
        .await;
        let m = worker.metrics();
        let _ = wait_for(&ProgressBar::hidden(), calls.len() as u64, || {
            m.counters.completions.load(Ordering::Relaxed)
        })
        .await;
        let _ = worker.shutdown().await;
        pool.close().await;
        if let Some(e) = failed {
            return Err(BenchError::mysqlq("the fast producer failed", &e));
        }
        waited?;
        self.check_pickups(&label, &probe, &calls, n, "enqueued one per call")
            .await
    }

    /// The checks made since `first` are about runs over Redis.
    fn label_redis(&mut self, first: usize) {
        for c in &mut self.checks[first..] {
            c.what = format!("redis {}", c.what);
        }
    }
}

/// Deletes the run's stream (its entries were all deleted by the consumers already).
async fn delete_stream(url: &str, redis: &Redis) {
    if let Ok(client) = redis::Client::open(url)
        && let Ok(mut c) = client.get_multiplexed_async_connection().await
    {
        let _: redis::RedisResult<()> = redis::cmd("DEL")
            .arg(redis.stream_key(QUEUE))
            .query_async(&mut c)
            .await;
    }
}

impl RedisSide {
    /// Drain and pickup, keyed as for the MySQL path (the enqueue metrics are not measured).
    fn values(&self) -> Vec<(&'static str, Option<f64>)> {
        let mut v: Vec<_> = values(&self.side).into_iter().skip(2).collect();
        v.push((
            "pickup_fast_producer_p50_ms",
            self.pickup_fast.map(|p| round_to(p.0, 3)),
        ));
        v.push((
            "pickup_fast_producer_p99_ms",
            self.pickup_fast.map(|p| round_to(p.1, 3)),
        ));
        v
    }

    /// The `redis` object of `--json`.
    pub(crate) fn json(&self) -> Value {
        let mut o: serde_json::Map<String, Value> = self
            .values()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), json!(v)))
            .collect();
        o.insert("redis_server".into(), json!(self.server));
        Value::Object(o)
    }

    /// The text table, beside the MySQL path's framework numbers (`mysql`, in the same order).
    pub(crate) fn human(&self, mysql: &[Option<f64>]) -> String {
        let mut t = Table::new(&["OVER REDIS STREAMS", ">REDIS", ">MYSQL CLAIMS"]);
        let labels = [
            "drain (jobs/s)",
            "pickup same process p50 (ms)",
            "pickup same process p99 (ms)",
            "pickup cross-process p50 (ms)",
            "pickup cross-process p99 (ms)",
            "pickup fast producer p50 (ms)",
            "pickup fast producer p99 (ms)",
        ];
        let fmt = |v: Option<f64>, places: usize| {
            v.map_or_else(|| "-".to_owned(), |x| format!("{x:.places$}"))
        };
        for (i, (label, (_, r))) in labels.iter().zip(self.values()).enumerate() {
            let places = if i == 0 { 0 } else { 1 };
            t.row(vec![
                (*label).to_owned(),
                fmt(r, places),
                fmt(mysql.get(i).copied().flatten(), places),
            ]);
        }
        format!(
            "\nRedis {} (streams under a prefix of this run, deleted afterwards):\n{}",
            self.server.as_deref().unwrap_or("?"),
            t.render()
        )
    }
}
