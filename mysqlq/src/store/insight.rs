//! What the queues pages read besides the state counts and `mysqlq_run_minute`'s window sums:
//! the leader's depth history (`mysqlq_depth_minute`, written once a minute), a queue's
//! completions and failures per minute, and every queue's pause flag and limits.
//!
//! | statement | reads |
//! |---|---|
//! | `depth_minute_write` | writes one row per queue and non-zero state (one per queue at least) |
//! | `depth_minute_read` | a range of `mysqlq_depth_minute`'s primary key on `minute`, the queue checked on the entry |
//! | `run_minute_queue` | a range of `mysqlq_run_minute`'s primary key on `minute`, queue and series checked on the entry |
//! | `queue_settings_all` | `mysqlq_queue` in primary key order (a row per paused or limited queue) |

use sqlx::{AssertSqlSafe, MySqlConnection, Row};

use super::rate::stored_rate;
use super::sql::padded_len;
use crate::Error;
use crate::state::{OpState, StateCounts, Timestamp};

/// The states `mysqlq_depth_minute` holds (its `state` ENUM), in stacking order.
pub const DEPTH_STATES: [OpState; 7] = [
    OpState::Waiting,
    OpState::Ready,
    OpState::RateLimited,
    OpState::Scheduled,
    OpState::Retrying,
    OpState::Running,
    OpState::Failed,
];

/// Most queues one [`depth_minute_write`] writes (the gauges' own bound).
const MAX_DEPTH_QUEUES: usize = 1000;

/// The count of one depth state (`failed` as counted, capped or not).
fn depth_of(s: &StateCounts, state: OpState) -> u64 {
    s.get(state).map_or(0, |c| c.n)
}

/// `depth_minute_write`: the leader's state counts as the current minute's depth rows, in one
/// statement: per queue its non-zero states, and a queue whose states are all zero writes
/// `ready = 0` (so that the minute reads as counted, not as missing). Re-writing a minute
/// replaces its values (`n = VALUES(n)`), never adds to them. At most 1,000 queues, the first
/// given.
pub async fn depth_minute_write(
    conn: &mut MySqlConnection,
    queues: &[(&str, StateCounts)],
) -> Result<u64, Error> {
    let mut rows: Vec<(&str, &'static str, u64)> = Vec::new();
    for (queue, states) in queues.iter().take(MAX_DEPTH_QUEUES) {
        let before = rows.len();
        for state in DEPTH_STATES {
            let n = depth_of(states, state);
            if n > 0 {
                rows.push((queue, state.as_str(), n));
            }
        }
        if rows.len() == before {
            rows.push((queue, OpState::Ready.as_str(), 0));
        }
    }
    let Some(&last) = rows.last() else {
        return Ok(0);
    };
    let n = padded_len(rows.len());
    let mut sql = String::from(
        "/* mysqlq:depth_minute_write */ INSERT INTO mysqlq_depth_minute \
         (minute, queue_name, state, n) VALUES ",
    );
    for i in 0..n {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str("(DATE_FORMAT(UTC_TIMESTAMP(), '%Y-%m-%d %H:%i:00'), ?, ?, ?)");
    }
    sql.push_str(" ON DUPLICATE KEY UPDATE n = VALUES(n)");
    let mut q = sqlx::query(AssertSqlSafe(sql));
    // Padding repeats the last row, which writes the same value again.
    let padding = std::iter::repeat_n(last, n - rows.len());
    for (queue, state, count) in rows.iter().copied().chain(padding) {
        q = q.bind(queue).bind(state).bind(count);
    }
    q.execute(&mut *conn).await?;
    Ok(rows.len() as u64)
}

/// The depth of one queue and state in one minute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DepthRow {
    /// The minute (its start, UTC).
    pub minute: Timestamp,
    /// Whole minutes before the current one (0 to 59).
    pub minutes_ago: u32,
    /// The state.
    pub state: OpState,
    /// Jobs in it when the leader counted.
    pub n: u64,
}

const DEPTH_READ_SQL: &str = "/* mysqlq:depth_minute_read */ \
    SELECT minute, CAST(TIMESTAMPDIFF(MINUTE, minute, UTC_TIMESTAMP()) AS SIGNED) AS ago, \
      CAST(state AS CHAR) AS st, n \
    FROM mysqlq_depth_minute \
    WHERE minute > UTC_TIMESTAMP() - INTERVAL 60 MINUTE AND queue_name = ?";

/// `depth_minute_read`: `queue`'s depth rows of the last hour, oldest first, each minute's in
/// [`DEPTH_STATES`] order (sorted here: at most 60 × 7 rows, and the server would filesort).
pub async fn depth_minute_read(
    conn: &mut MySqlConnection,
    queue: &str,
) -> Result<Vec<DepthRow>, Error> {
    let rows = sqlx::query(DEPTH_READ_SQL)
        .bind(queue)
        .fetch_all(&mut *conn)
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let Ok(state) = r.try_get::<String, _>("st")?.parse::<OpState>() else {
            continue;
        };
        out.push(DepthRow {
            minute: r.try_get("minute")?,
            minutes_ago: minutes_ago(r.try_get("ago")?),
            state,
            n: r.try_get("n")?,
        });
    }
    out.sort_by_key(|r| (r.minute, r.state));
    Ok(out)
}

/// `0..=59` from a `TIMESTAMPDIFF` in minutes.
fn minutes_ago(ago: i64) -> u32 {
    u32::try_from(ago.clamp(0, 59)).unwrap_or(0)
}

/// Completed and failed attempts of one queue in one minute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThroughputRow {
    /// The minute (its start, UTC).
    pub minute: Timestamp,
    /// Whole minutes before the current one (0 to 59).
    pub minutes_ago: u32,
    /// Attempts that completed.
    pub completed: u64,
    /// Attempts that moved their job to `failed`.
    pub failed: u64,
}

const RUN_MINUTE_QUEUE_SQL: &str = "/* mysqlq:run_minute_queue */ \
    SELECT minute, CAST(TIMESTAMPDIFF(MINUTE, minute, UTC_TIMESTAMP()) AS SIGNED) AS ago, \
      CAST(IFNULL(SUM(IF(series = 'completed', n, 0)), 0) AS SIGNED) AS completed, \
      CAST(IFNULL(SUM(IF(series = 'failed', n, 0)), 0) AS SIGNED) AS failed \
    FROM mysqlq_run_minute \
    WHERE minute > UTC_TIMESTAMP() - INTERVAL 60 MINUTE AND queue_name = ? \
      AND series IN ('completed', 'failed') \
    GROUP BY minute ORDER BY minute";

/// `run_minute_queue`: `queue`'s completed and failed attempts per minute over the last hour,
/// oldest first (minutes without either are absent), summed over kinds and buckets.
pub async fn run_minute_queue(
    conn: &mut MySqlConnection,
    queue: &str,
) -> Result<Vec<ThroughputRow>, Error> {
    let rows = sqlx::query(RUN_MINUTE_QUEUE_SQL)
        .bind(queue)
        .fetch_all(&mut *conn)
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        out.push(ThroughputRow {
            minute: r.try_get("minute")?,
            minutes_ago: minutes_ago(r.try_get("ago")?),
            completed: u64::try_from(r.try_get::<i64, _>("completed")?).unwrap_or(0),
            failed: u64::try_from(r.try_get::<i64, _>("failed")?).unwrap_or(0),
        });
    }
    Ok(out)
}

/// A queue's row of `mysqlq_queue`: its pause flag and limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSettings {
    /// The queue.
    pub queue: String,
    /// Workers do not claim its jobs.
    pub paused: bool,
    /// Its rate and global limit ([`super::QueueLimits`]).
    pub limits: super::QueueLimits,
}

/// Most rows [`queue_settings_all`] reads.
const MAX_SETTINGS: u32 = 10_000;

const SETTINGS_SQL: &str = "/* mysqlq:queue_settings_all */ \
    SELECT CAST(queue_name AS CHAR) AS q, CAST(paused AS SIGNED) AS paused, rate_limit, \
      rate_period_us, global_limit \
    FROM mysqlq_queue FORCE INDEX (PRIMARY) ORDER BY queue_name LIMIT ?";

/// `queue_settings_all`: every queue that has a `mysqlq_queue` row (paused, or with limits), by
/// name; at most 10,000.
pub async fn queue_settings_all(conn: &mut MySqlConnection) -> Result<Vec<QueueSettings>, Error> {
    let rows = sqlx::query(SETTINGS_SQL)
        .bind(MAX_SETTINGS)
        .fetch_all(&mut *conn)
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        out.push(QueueSettings {
            queue: r.try_get("q")?,
            paused: r.try_get::<i64, _>("paused")? != 0,
            limits: super::QueueLimits {
                rate: stored_rate(r.try_get("rate_limit")?, r.try_get("rate_period_us")?),
                global: r.try_get("global_limit")?,
            },
        });
    }
    Ok(out)
}

/// `EXPLAIN`s the reads of this module with the binds they run with (`queue`). Returns `(tag,
/// plan)` pairs.
#[cfg(feature = "__internal-store")]
pub async fn insight_explain(
    conn: &mut MySqlConnection,
    queue: &str,
) -> Result<Vec<(&'static str, Vec<super::admin::PlanRow>)>, Error> {
    let mut out = Vec::new();
    for (tag, sql) in [
        ("depth_minute_read", DEPTH_READ_SQL),
        ("run_minute_queue", RUN_MINUTE_QUEUE_SQL),
    ] {
        let rows = sqlx::query(AssertSqlSafe(format!("EXPLAIN {sql}")))
            .bind(queue)
            .fetch_all(&mut *conn)
            .await?;
        out.push((tag, rows.iter().map(super::admin::PlanRow::read).collect()));
    }
    let rows = sqlx::query(AssertSqlSafe(format!("EXPLAIN {SETTINGS_SQL}")))
        .bind(MAX_SETTINGS)
        .fetch_all(&mut *conn)
        .await?;
    out.push((
        "queue_settings_all",
        rows.iter().map(super::admin::PlanRow::read).collect(),
    ));
    Ok(out)
}
