//! Redis for the transport's tests: the shared server at `MYSQLQ_TEST_REDIS_URL` (default
//! `redis://127.0.0.1:6379`) under a key prefix of the test's own, deleted afterwards, or a
//! private throwaway `redis-server` ([`PrivateRedis`]) for the tests that kill, restart or
//! flush it.

use std::time::Duration;

use mysqlq::redis::{Redis, RedisConfig};

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
