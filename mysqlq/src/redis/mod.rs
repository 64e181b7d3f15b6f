//! The Redis Streams transport (feature `redis`): MySQL stays the source of truth, Redis carries
//! the work. The whole design, its guarantees and its measured windows are in `docs/redis.md`.
//!
//! Jobs are still enqueued in the caller's MySQL transaction. A worker started with
//! [`WorkerBuilder::redis`](crate::WorkerBuilder::redis) serves its queues over Redis:
//!
//! - its **relay** claims committed `pending` rows in MySQL (under a relay token and lease, no
//!   attempt taken) and `XADD`s them to the stream `<prefix>:<queue>` (default prefix `mysqlq`),
//!   never letting a stream grow past [`RedisConfig::stream_cap`] (the backlog stays in MySQL);
//! - its **consumer** reads with `XREADGROUP GROUP mysqlq <consumer> COUNT <free slots> BLOCK …`,
//!   *takes* each job in MySQL (a token-guarded write that hands the row to this worker under a
//!   token of its own), runs the same `#[job]` handlers with the same error classes, writes the
//!   outcome to MySQL batched and token-guarded, then `XACK`s and `XDEL`s the entry;
//! - its **sweeper** takes over, with `XAUTOCLAIM`, entries whose consumer stopped touching them
//!   for a lease, and decides from MySQL (attempts) and Redis (delivery count) whether the job
//!   runs again or is dead (`failed`).
//!
//! Redis is not trusted with durability: whatever Redis loses, the MySQL row still says who holds
//! the job and until when, and the job comes back to `pending` and is relayed again.
//!
//! ```no_run
//! # async fn run(pool: sqlx::MySqlPool) -> Result<(), mysqlq::Error> {
//! let redis = mysqlq::redis::Redis::connect("redis://127.0.0.1:6379").await?;
//! let worker = mysqlq::Worker::builder(pool).redis(redis).start().await?;
//! worker.run_until_signal().await?;
//! # Ok(()) }
//! ```

pub(crate) mod entry;
mod inspect;
mod producer;

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};

use crate::Error;

pub(crate) use entry::{Entry, EntryId};
pub use inspect::{ConsumerInfo, StreamInfo, relayed};

/// The consumer group every mysqlq consumer reads in.
pub const GROUP: &str = "mysqlq";

/// The oldest Redis the transport runs on: `XAUTOCLAIM` came with 6.2.
pub const MIN_VERSION: (u32, u32) = (6, 2);

/// Settings of the Redis transport. Every field has a documented default (`DEFAULT_*`).
#[derive(Debug, Clone)]
pub struct RedisConfig {
    /// Key prefix: queue `q` is carried by the stream `<prefix>:<q>`. Default
    /// [`RedisConfig::DEFAULT_PREFIX`].
    pub prefix: String,
    /// Most entries a stream holds (unread, being run, not yet deleted). Above it the relay
    /// stops relaying and the backlog waits in MySQL: back-pressure instead of `MAXLEN`, which
    /// would drop entries. Default [`RedisConfig::DEFAULT_STREAM_CAP`].
    pub stream_cap: u64,
    /// The lease a relay holds on the rows it put in a stream, renewed while their entries wait
    /// unread. When the relay dies, its rows come back to `pending` after at most this long
    /// plus one maintenance interval. Default [`RedisConfig::DEFAULT_RELAY_LEASE`].
    pub relay_lease: Duration,
    /// How often a relay checks that Redis still holds the unread entries it added (a restart
    /// without persistence, `FLUSHALL`, a deleted stream) and hands lost ones back to `pending`.
    /// Default [`RedisConfig::DEFAULT_CHECK_INTERVAL`].
    pub check_interval: Duration,
    /// How long one `XREADGROUP` blocks when the streams are empty. Default
    /// [`RedisConfig::DEFAULT_BLOCK`].
    pub block: Duration,
    /// Most jobs the relay claims and adds per round. Default
    /// [`RedisConfig::DEFAULT_RELAY_BATCH`].
    pub relay_batch: u32,
}

impl RedisConfig {
    /// Streams are `mysqlq:<queue>`.
    pub const DEFAULT_PREFIX: &str = "mysqlq";
    /// 10,000 entries per stream.
    pub const DEFAULT_STREAM_CAP: u64 = 10_000;
    /// A 60-second relay lease.
    pub const DEFAULT_RELAY_LEASE: Duration = Duration::from_secs(60);
    /// Lost entries are looked for every second.
    pub const DEFAULT_CHECK_INTERVAL: Duration = Duration::from_secs(1);
    /// `XREADGROUP … BLOCK 1000`.
    pub const DEFAULT_BLOCK: Duration = Duration::from_secs(1);
    /// 500 jobs per relay round.
    pub const DEFAULT_RELAY_BATCH: u32 = 500;

    /// The stream of `queue`.
    pub fn stream_key(&self, queue: &str) -> String {
        format!("{}:{queue}", self.prefix)
    }

    fn validate(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::Config(m));
        if self.prefix.is_empty() || self.prefix.len() > 64 {
            return bad(format!(
                "redis key prefix `{}` must be 1 to 64 characters",
                self.prefix
            ));
        }
        if self.stream_cap == 0 {
            return bad("redis stream cap must be at least 1".into());
        }
        if self.relay_lease < Duration::from_secs(1) {
            return bad(format!(
                "relay lease {:?} must be at least 1s",
                self.relay_lease
            ));
        }
        if self.check_interval.is_zero() || self.check_interval * 3 > self.relay_lease {
            return bad(format!(
                "relay check interval {:?} must be above zero and at most a third of the relay lease {:?}",
                self.check_interval, self.relay_lease
            ));
        }
        if self.block < Duration::from_millis(1) || self.block > Duration::from_secs(60) {
            return bad(format!(
                "XREADGROUP block {:?} must be between 1ms and 60s",
                self.block
            ));
        }
        if self.relay_batch == 0 || self.relay_batch > 5_000 {
            return bad(format!(
                "relay batch {} must be between 1 and 5000",
                self.relay_batch
            ));
        }
        Ok(())
    }
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            prefix: Self::DEFAULT_PREFIX.to_owned(),
            stream_cap: Self::DEFAULT_STREAM_CAP,
            relay_lease: Self::DEFAULT_RELAY_LEASE,
            check_interval: Self::DEFAULT_CHECK_INTERVAL,
            block: Self::DEFAULT_BLOCK,
            relay_batch: Self::DEFAULT_RELAY_BATCH,
        }
    }
}

/// A Redis server the transport uses: a client, one shared connection that reconnects by
/// itself, and the [`RedisConfig`]. Cheap to clone.
#[derive(Clone)]
pub struct Redis {
    client: redis::Client,
    conn: ConnectionManager,
    config: RedisConfig,
}

impl std::fmt::Debug for Redis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redis")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Redis {
    /// Connects to the Redis at `url` (`redis://[:password@]host:port[/db]`) with the default
    /// [`RedisConfig`].
    pub async fn connect(url: &str) -> Result<Self, Error> {
        Self::connect_with(url, RedisConfig::default()).await
    }

    /// Connects with `config`; fails at once when Redis does not answer.
    pub async fn connect_with(url: &str, config: RedisConfig) -> Result<Self, Error> {
        config.validate()?;
        let client = redis::Client::open(url)?;
        let cm = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(5)))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let conn = ConnectionManager::new_with_config(client.clone(), cm).await?;
        Ok(Self {
            client,
            conn,
            config,
        })
    }

    /// The settings.
    pub fn config(&self) -> &RedisConfig {
        &self.config
    }

    /// The stream of `queue`: `<prefix>:<queue>`.
    pub fn stream_key(&self, queue: &str) -> String {
        self.config.stream_key(queue)
    }

    /// The shared connection (reconnects by itself; requests fail while Redis is down).
    pub(crate) fn conn(&self) -> ConnectionManager {
        self.conn.clone()
    }

    /// A connection of its own, for blocking reads (a blocked `XREADGROUP` would hold up every
    /// other request on a shared connection), with no response timeout shorter than the block.
    pub(crate) async fn dedicated(&self) -> Result<MultiplexedConnection, Error> {
        let cfg = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(self.config.block + Duration::from_secs(5)));
        Ok(self
            .client
            .get_multiplexed_async_connection_with_config(&cfg)
            .await?)
    }

    /// The server's version, from `INFO server` (`redis_version`, or `valkey_version`).
    pub async fn version(&self) -> Result<(u32, u32, u32), Error> {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut self.conn())
            .await?;
        parse_version(&info)
            .ok_or_else(|| Error::invalid("redis version", "INFO server names no redis_version"))
    }

    /// Creates the consumer group of `queue`'s stream (and the stream) if missing, reading from
    /// the start (`0`), so entries added before the group existed are read too.
    pub async fn ensure_group(&self, queue: &str) -> Result<(), Error> {
        ensure_group(&mut self.conn(), &self.stream_key(queue)).await
    }
}

/// `XGROUP CREATE <stream> mysqlq 0 MKSTREAM`, a group that exists already being fine.
pub(crate) async fn ensure_group<C: redis::aio::ConnectionLike + Send>(
    conn: &mut C,
    stream: &str,
) -> Result<(), Error> {
    let r: redis::RedisResult<()> = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(stream)
        .arg(GROUP)
        .arg("0")
        .arg("MKSTREAM")
        .query_async(conn)
        .await;
    match r {
        Ok(()) => Ok(()),
        Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// `true` for Redis's "no such group" (the stream was deleted or Redis lost its data).
pub(crate) fn is_no_group(e: &redis::RedisError) -> bool {
    e.code() == Some("NOGROUP")
}

fn parse_version(info: &str) -> Option<(u32, u32, u32)> {
    let line = info.lines().find_map(|l| {
        l.strip_prefix("redis_version:")
            .or_else(|| l.strip_prefix("valkey_version:"))
    })?;
    let mut parts = line.trim().split('.').map(|p| p.parse::<u32>().ok());
    Some((
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_info() {
        let info = "# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:00000000\r\n";
        assert_eq!(parse_version(info), Some((7, 0, 15)));
        assert_eq!(parse_version("valkey_version:8.1\n"), Some((8, 1, 0)));
        assert_eq!(parse_version("# Server\n"), None);
    }

    #[test]
    fn settings_are_checked() {
        assert!(RedisConfig::default().validate().is_ok());
        let c = RedisConfig {
            stream_cap: 0,
            ..RedisConfig::default()
        };
        assert!(c.validate().is_err());
        let c = RedisConfig {
            check_interval: Duration::from_secs(30),
            ..RedisConfig::default()
        };
        assert!(c.validate().is_err());
        assert_eq!(RedisConfig::default().stream_key("emails"), "mysqlq:emails");
    }
}
