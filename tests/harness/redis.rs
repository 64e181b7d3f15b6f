//! Redis for the transport's tests: the shared server at `MYSQLQ_TEST_REDIS_URL` (default
//! `redis://127.0.0.1:6379`) under a key prefix of the test's own, deleted afterwards, or a
//! private throwaway `redis-server` ([`PrivateRedis`]) for the tests that kill, restart or
//! flush it.

use std::time::Duration;

use mysqlq::JobId;
use mysqlq::redis::{Redis, RedisConfig};

use crate::TestDb;
use crate::jobs::Noop;

pub use mysqlq_testkit::PrivateRedis;

/// The shared Redis the tests use.
pub fn shared_url() -> String {
    std::env::var("MYSQLQ_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// Settings for a test: a prefix no other test uses, short intervals.
pub fn test_config() -> RedisConfig {
    RedisConfig {
        prefix: format!("mysqlq-t-{}-{:08x}", std::process::id(), fastrand::u32(..)),
        relay_lease: Duration::from_secs(3),
        check_interval: Duration::from_millis(200),
        block: Duration::from_millis(500),
        ..RedisConfig::default()
    }
}

/// A Redis for one test: its keys live under [`RedisConfig::prefix`] and are deleted on drop.
pub struct TestRedis {
    /// The server's URL.
    pub url: String,
    /// The settings the test's workers use.
    pub config: RedisConfig,
}

impl TestRedis {
    /// On the shared server (fails, never skips, when it does not answer).
    pub fn shared() -> Self {
        Self::on(&shared_url(), test_config())
    }

    /// On the server at `url`, with `config`.
    pub fn on(url: &str, config: RedisConfig) -> Self {
        Self {
            url: url.to_owned(),
            config,
        }
    }

    /// A connection with the test's settings.
    pub async fn connect(&self) -> Redis {
        Redis::connect_with(&self.url, self.config.clone())
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "cannot reach Redis at {}: {e} (start it: redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save \"\" --appendonly no)",
                    self.url
                )
            })
    }

    /// A plain connection for the test's own commands.
    pub async fn raw(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .expect("connect to Redis")
    }

    /// The stream of `queue`.
    pub fn stream(&self, queue: &str) -> String {
        self.config.stream_key(queue)
    }

    /// `XLEN` of `queue`'s stream.
    pub async fn len(&self, queue: &str) -> u64 {
        redis::cmd("XLEN")
            .arg(self.stream(queue))
            .query_async(&mut self.raw().await)
            .await
            .expect("XLEN")
    }
}

/// (job, runs) of every job that recorded `event` in `test_runs`, by job id.
pub async fn runs(db: &TestDb, event: &str) -> Vec<(u64, i64)> {
    sqlx::query_as(
        "SELECT job_id, COUNT(*) FROM test_runs WHERE event = ? GROUP BY job_id ORDER BY job_id",
    )
    .bind(event)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

/// A job's status, attempts and last error.
pub async fn status_of(db: &TestDb, id: JobId) -> (String, u32, Option<String>) {
    sqlx::query_as("SELECT CAST(status AS CHAR), attempts, last_error FROM job_queue WHERE id = ?")
        .bind(id.0)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// The group's pending entries (delivered, not acknowledged) of `queue`'s stream.
pub async fn group_pending(r: &TestRedis, queue: &str) -> u64 {
    let v: redis::Value = redis::cmd("XPENDING")
        .arg(r.stream(queue))
        .arg("mysqlq")
        .query_async(&mut r.raw().await)
        .await
        .unwrap();
    match v {
        redis::Value::Array(items) => match items.first() {
            Some(redis::Value::Int(n)) => u64::try_from(*n).unwrap(),
            other => panic!("XPENDING said {other:?}"),
        },
        other => panic!("XPENDING said {other:?}"),
    }
}

/// A consumer that reads the stream and then does nothing (a process that died at once).
pub async fn ghost_read(r: &TestRedis, queue: &str) -> Vec<(String, Vec<(String, String)>)> {
    let reply: redis::streams::StreamReadReply = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("mysqlq")
        .arg("ghost")
        .arg("COUNT")
        .arg(100)
        .arg("STREAMS")
        .arg(r.stream(queue))
        .arg(">")
        .query_async(&mut r.raw().await)
        .await
        .unwrap();
    reply
        .keys
        .into_iter()
        .flat_map(|k| k.ids)
        .map(|e| {
            let mut fields: Vec<(String, String)> = e
                .map
                .iter()
                .map(|(k, v)| (k.clone(), redis::from_redis_value_ref::<String>(v).unwrap()))
                .collect();
            fields.sort();
            (e.id, fields)
        })
        .collect()
}

/// Puts one job in the stream through the fast producer and has the ghost read it.
pub async fn job_read_by_ghost(
    db: &TestDb,
    r: &TestRedis,
) -> (JobId, String, Vec<(String, String)>) {
    let redis = r.connect().await;
    redis.ensure_group("test").await.unwrap();
    let job = mysqlq::NewJob::from_job(&Noop { n: 1 }, &mysqlq::EnqueueOptions::default()).unwrap();
    let id = redis.enqueue_many(&db.pool, [job]).await.unwrap()[0].id();
    let read = ghost_read(r, "test").await;
    assert_eq!(read.len(), 1);
    let (entry, fields) = read.into_iter().next().unwrap();
    (id, entry, fields)
}

impl Drop for TestRedis {
    fn drop(&mut self) {
        let Ok(client) = redis::Client::open(self.url.as_str()) else {
            return;
        };
        let Ok(mut c) = client.get_connection_with_timeout(Duration::from_secs(2)) else {
            return;
        };
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}:*", self.config.prefix))
            .query(&mut c)
            .unwrap_or_default();
        if !keys.is_empty() {
            let _: redis::RedisResult<()> = redis::cmd("DEL").arg(&keys).query(&mut c);
        }
    }
}
