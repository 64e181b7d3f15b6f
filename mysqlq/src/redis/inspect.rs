//! The stream side for operators: length, unread and pending entries, consumers and how long
//! each has been idle (`stats`, `doctor`, the dashboard), and the doctor's checks of Redis.

use std::time::Duration;

use redis::streams::{StreamInfoConsumersReply, StreamInfoGroupsReply};

use super::{GROUP, MIN_VERSION, Redis, is_no_group};
use crate::Error;
use crate::admin::{Check, Level};

/// One queue's stream, as Redis sees it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StreamInfo {
    /// The queue.
    pub queue: String,
    /// The stream key (`mysqlq:<queue>`).
    pub stream: String,
    /// Entries in the stream (`XLEN`): unread, being run, or acknowledged and not deleted yet.
    pub length: u64,
    /// The group `mysqlq` exists (it does once a worker has read the stream).
    pub group: bool,
    /// Entries delivered to a consumer and not acknowledged yet (the group's pending list).
    pub pending: u64,
    /// Entries not delivered yet (Redis 7's `lag`; `None` when Redis cannot tell).
    pub unread: Option<u64>,
    /// The group's consumers.
    pub consumers: Vec<ConsumerInfo>,
}

/// One consumer of a group.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ConsumerInfo {
    /// The consumer's name: the worker's `worker-id#random` identity.
    pub name: String,
    /// Entries delivered to it and not acknowledged.
    pub pending: u64,
    /// Milliseconds since it last read or touched its entries.
    pub idle_ms: u64,
}

impl Redis {
    /// The stream of each queue: length, group, pending per consumer, idle consumers.
    pub async fn streams(&self, queues: &[String]) -> Result<Vec<StreamInfo>, Error> {
        let mut out = Vec::with_capacity(queues.len());
        let mut conn = self.conn();
        for queue in queues {
            let stream = self.stream_key(queue);
            let length: u64 = redis::cmd("XLEN")
                .arg(&stream)
                .query_async(&mut conn)
                .await?;
            let mut info = StreamInfo {
                queue: queue.clone(),
                stream: stream.clone(),
                length,
                group: false,
                pending: 0,
                unread: None,
                consumers: Vec::new(),
            };
            if length > 0 || exists(&mut conn, &stream).await? {
                let groups: StreamInfoGroupsReply = redis::cmd("XINFO")
                    .arg("GROUPS")
                    .arg(&stream)
                    .query_async(&mut conn)
                    .await?;
                if let Some(g) = groups.groups.iter().find(|g| g.name == GROUP) {
                    info.group = true;
                    info.pending = g.pending as u64;
                    info.unread = g.lag.map(|l| l as u64);
                    let r: redis::RedisResult<StreamInfoConsumersReply> = redis::cmd("XINFO")
                        .arg("CONSUMERS")
                        .arg(&stream)
                        .arg(GROUP)
                        .query_async(&mut conn)
                        .await;
                    match r {
                        Ok(c) => {
                            info.consumers = c
                                .consumers
                                .into_iter()
                                .map(|c| ConsumerInfo {
                                    name: c.name,
                                    pending: c.pending as u64,
                                    idle_ms: c.idle as u64,
                                })
                                .collect();
                        }
                        Err(e) if is_no_group(&e) => info.group = false,
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            out.push(info);
        }
        Ok(out)
    }

    /// The doctor's checks of the Redis side: reachable, version ≥ 6.2 (`XAUTOCLAIM`), and per
    /// queue the stream's length against its cap, pending entries per consumer, and consumers
    /// idle for longer than `idle_after` (a worker that died holding entries).
    pub async fn doctor(&self, queues: &[String], idle_after: Duration) -> Vec<Check> {
        let mut checks = Vec::new();
        let check = |level, name, detail: String, fix: Option<&str>| Check {
            level,
            name,
            detail,
            fix: fix.map(str::to_owned),
        };
        match self.version().await {
            Ok((ma, mi, pa)) if (ma, mi) >= MIN_VERSION => checks.push(check(
                Level::Ok,
                "redis",
                format!("Redis {ma}.{mi}.{pa} reachable"),
                None,
            )),
            Ok((ma, mi, pa)) => checks.push(check(
                Level::Fail,
                "redis",
                format!("Redis {ma}.{mi}.{pa} is older than 6.2, which XAUTOCLAIM needs"),
                Some("upgrade Redis to 6.2 or newer"),
            )),
            Err(e) => {
                checks.push(check(
                    Level::Fail,
                    "redis",
                    format!("Redis not reachable: {}", crate::error_chain(&e)),
                    Some("start Redis, or fix the URL (--redis-url, MYSQLQ_REDIS_URL)"),
                ));
                return checks;
            }
        }
        let streams = match self.streams(queues).await {
            Ok(s) => s,
            Err(e) => {
                checks.push(check(
                    Level::Fail,
                    "redis streams",
                    format!("could not read the streams: {}", crate::error_chain(&e)),
                    None,
                ));
                return checks;
            }
        };
        let cap = self.config().stream_cap;
        for s in streams {
            let consumers: Vec<String> = s
                .consumers
                .iter()
                .map(|c| format!("{} {} pending", c.name, c.pending))
                .collect();
            let level = if s.length >= cap {
                Level::Warn
            } else {
                Level::Ok
            };
            checks.push(check(
                level,
                "redis stream",
                format!(
                    "{}: {} entries (cap {cap}), {} unread, {} pending{}",
                    s.stream,
                    s.length,
                    s.unread.map_or_else(|| "?".to_owned(), |u| u.to_string()),
                    s.pending,
                    if consumers.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", consumers.join(", "))
                    }
                ),
                (s.length >= cap).then_some(
                    "the stream is at its cap: the relay holds the backlog in MySQL until \
                     consumers catch up; start more workers",
                ),
            ));
            let idle_ms = u64::try_from(idle_after.as_millis()).unwrap_or(u64::MAX);
            for c in s.consumers.iter().filter(|c| c.idle_ms > idle_ms) {
                checks.push(check(
                    if c.pending > 0 {
                        Level::Warn
                    } else {
                        Level::Info
                    },
                    "redis consumer",
                    format!(
                        "{}: consumer {} idle for {}s with {} pending",
                        s.stream,
                        c.name,
                        c.idle_ms / 1000,
                        c.pending
                    ),
                    (c.pending > 0).then_some(
                        "its worker stopped without acknowledging: live workers take its entries \
                         over after the lease (XAUTOCLAIM); nothing to do unless this persists",
                    ),
                ));
            }
        }
        checks
    }
}

/// Jobs MySQL says are in a stream (held by a relay, not taken yet), per queue.
pub async fn relayed(pool: &sqlx::MySqlPool) -> Result<Vec<(String, u64)>, Error> {
    let mut conn = pool.acquire().await?;
    crate::store::job_relay_counts(&mut conn).await
}

async fn exists<C: redis::aio::ConnectionLike + Send>(
    conn: &mut C,
    key: &str,
) -> Result<bool, Error> {
    let n: u64 = redis::cmd("EXISTS").arg(key).query_async(conn).await?;
    Ok(n > 0)
}
