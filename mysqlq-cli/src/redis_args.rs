//! The Redis transport on the command line (feature `redis`): `--redis-url` (env
//! `MYSQLQ_REDIS_URL`) and its settings, global to every command: `work` serves its queues over
//! Redis Streams, `stats` and `doctor` show the stream side.

use std::time::Duration;

use clap::Args;
use mysqlq::redis::{Redis, RedisConfig, StreamInfo};

use crate::args::parse_duration;
use crate::error::CliError;
use crate::out::Table;

/// Redis Streams transport (docs/redis.md), under a heading of its own in `--help`.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Redis Streams transport (feature `redis`)")]
pub(crate) struct RedisArgs {
    /// Redis URL (redis://[:password@]host:6379[/db]): `work` serves its queues over Redis
    /// Streams, `stats` and `doctor` show the streams [env: MYSQLQ_REDIS_URL]
    #[arg(
        long = "redis-url",
        env = "MYSQLQ_REDIS_URL",
        hide_env = true,
        global = true,
        value_name = "URL"
    )]
    pub(crate) url: Option<String>,
    /// Key prefix of the streams: queue Q is the stream PREFIX:Q
    #[arg(long = "redis-prefix", default_value = RedisConfig::DEFAULT_PREFIX, global = true, value_name = "PREFIX")]
    pub(crate) prefix: String,
    /// Most entries one stream holds; above it the relay leaves the backlog in MySQL
    #[arg(long = "redis-stream-cap", default_value_t = RedisConfig::DEFAULT_STREAM_CAP, global = true, value_name = "N")]
    pub(crate) stream_cap: u64,
    /// Lease of jobs a relay put in a stream (renewed while they wait unread)
    #[arg(long = "redis-relay-lease", default_value = "60s", value_parser = parse_duration, global = true, value_name = "DUR")]
    pub(crate) relay_lease: Duration,
}

impl RedisArgs {
    /// The settings these flags give.
    pub(crate) fn config(&self) -> RedisConfig {
        RedisConfig {
            prefix: self.prefix.clone(),
            stream_cap: self.stream_cap,
            relay_lease: self.relay_lease,
            ..RedisConfig::default()
        }
    }

    /// Connects when a URL was given.
    pub(crate) async fn connect(&self) -> Result<Option<Redis>, CliError> {
        let Some(url) = &self.url else {
            return Ok(None);
        };
        Redis::connect_with(url, self.config())
            .await
            .map(Some)
            .map_err(|e| {
                CliError::new(
                    format!("cannot use Redis: {}", mysqlq::error_chain(&e)),
                    "start Redis, or fix --redis-url / MYSQLQ_REDIS_URL",
                )
            })
    }
}

/// The stream side of `stats`: one line per queue (with the jobs MySQL says are in the
/// stream, held by a relay), then its consumers.
pub(crate) fn render_streams(streams: &[StreamInfo], relayed: &[(String, u64)]) -> String {
    let mut t = Table::new(&[
        "STREAM",
        ">LENGTH",
        ">UNREAD",
        ">PENDING",
        ">RELAYED (MYSQL)",
        "CONSUMERS",
    ]);
    for s in streams {
        let in_mysql = relayed
            .iter()
            .find(|(q, _)| *q == s.queue)
            .map_or(0, |(_, n)| *n);
        t.row(vec![
            s.stream.clone(),
            s.length.to_string(),
            s.unread.map_or_else(|| "?".to_owned(), |u| u.to_string()),
            s.pending.to_string(),
            in_mysql.to_string(),
            s.consumers
                .iter()
                .map(|c| {
                    format!(
                        "{} ({} pending, idle {}s)",
                        c.name,
                        c.pending,
                        c.idle_ms / 1000
                    )
                })
                .collect::<Vec<_>>()
                .join(", "),
        ]);
    }
    format!("\nredis streams\n{}", t.render())
}
