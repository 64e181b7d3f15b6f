//! The operator states counted in SQL (`docs/state_machine.md`, "Operator states"): statements
//! whose predicates mirror [`OpState::classify`](crate::state::OpState::classify) line for
//! line, assembled into [`StateCounts`] per queue; a capped count of a finished status; and the
//! limits that hold back the rows of one page, so that a list classifies each row as the counts
//! do.
//!
//! | statement | reads |
//! |---|---|
//! | `state_queues` | the queue names: a loose index scan of `idx_job_claim`, and `mysqlq_queue` |
//! | `state_counts` (S1) | every unfinished job of every queue: one range of `idx_job_recover`, index only |
//! | `state_relayed` (S2) | the `processing` jobs a Redis relay holds: the `processing` range of `idx_job_recover`, and those rows |
//! | `state_held` (S3) | the jobs a live 429 hold names: `idx_rate_hold_until`, then each job by primary key |
//! | `queue_rate_limited` | the due jobs a queue's limits hold back (`limits.rs`), for queues with due jobs |
//! | `state_finished` (S4) | a finished status of one queue: at most [`Capped::CAP`] + 1 entries of `idx_job_claim` (`state_finished_exact`: all of them; `state_finished_all`: of every queue, on `idx_job_finished`) |
//! | `state_page_held`, `state_page_keys`, `state_page_queue` | a page's 429 holds (`idx_rate_hold_until`), its key buckets (primary key), its queues' limits |
//!
//! Per queue, with `due` and `retried` the pending jobs due now and due later after a failed
//! attempt, `in_stream` the relayed ones, `held` the 429'd ones due later and `limited` the due
//! ones a limit holds back: `ready = due − limited + in_stream`, `running = processing −
//! in_stream`, `rate_limited = limited + held`, `retrying = retried − held(attempts > 0)`,
//! `scheduled = pending − due − retried − held(attempts = 0)`.

use std::collections::{HashMap, HashSet};

use sqlx::{MySqlConnection, Row};

use super::limits::{KEY_CLOSED, QUEUE_CLOSED_COLUMNS, queue_closed, queue_rate_limited};
use super::relay::RELAY_PREFIX;
use super::sql::{bind_ids, padded_len, placeholders};
use crate::state::{Capped, JobState, QueueStates, StateCounts, Timestamp};
use crate::{Error, JobId};

/// A count read as `SIGNED` (never negative).
fn non_negative(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// Most rows `Admin::limited_rows` looks at in one call (a page).
pub const MAX_PAGE_ROWS: usize = 500;

/// Every queue that has a row or a `mysqlq_queue` row, by name, at most `?`.
const QUEUES_SQL: &str = "/* mysqlq:state_queues */ \
    SELECT CAST(t.q AS CHAR) AS queue_name FROM ( \
      SELECT DISTINCT queue_name AS q FROM job_queue \
      UNION SELECT queue_name FROM mysqlq_queue) t \
    ORDER BY t.q LIMIT ?";

/// S1: the unfinished jobs by status and queue, with the pending ones split by due time and
/// attempts, from `idx_job_recover` alone.
const COUNTS_SQL: &str = "/* mysqlq:state_counts */ \
    SELECT CAST(status AS CHAR) AS st, CAST(queue_name AS CHAR) AS q, \
      CAST(COUNT(*) AS SIGNED) AS n, \
      CAST(IFNULL(SUM(available_at <= UTC_TIMESTAMP(6)), 0) AS SIGNED) AS due, \
      CAST(IFNULL(SUM(available_at > UTC_TIMESTAMP(6) AND attempts > 0), 0) AS SIGNED) AS retried, \
      TIMESTAMPDIFF(MICROSECOND, MIN(IF(available_at <= UTC_TIMESTAMP(6), available_at, NULL)), \
        UTC_TIMESTAMP(6)) AS oldest_us \
    FROM job_queue FORCE INDEX (idx_job_recover) \
    WHERE status IN ('waiting', 'pending', 'processing') \
    GROUP BY status, queue_name";

/// S2: the `processing` jobs a relay holds (in a stream, not taken), per queue; binds the
/// `LIKE` pattern of [`RELAY_PREFIX`].
const RELAYED_SQL: &str = "/* mysqlq:state_relayed */ \
    SELECT CAST(queue_name AS CHAR) AS q, CAST(COUNT(*) AS SIGNED) AS n \
    FROM job_queue FORCE INDEX (idx_job_recover) \
    WHERE status = 'processing' AND locked_by LIKE ? \
    GROUP BY queue_name";

/// S3: the pending jobs due later that a live 429 hold names (each once), per queue, and how
/// many of them had a failed attempt.
const HELD_SQL: &str = "/* mysqlq:state_held */ \
    SELECT CAST(j.queue_name AS CHAR) AS q, CAST(COUNT(*) AS SIGNED) AS n, \
      CAST(IFNULL(SUM(j.attempts > 0), 0) AS SIGNED) AS retried \
    FROM (SELECT DISTINCT hh.job_id FROM mysqlq_rate_hold hh \
          WHERE hh.held_until > UTC_TIMESTAMP(6)) h \
    JOIN job_queue j ON j.id = h.job_id \
    WHERE j.status = 'pending' AND j.available_at > UTC_TIMESTAMP(6) \
    GROUP BY j.queue_name";

/// S4 of one queue: at most `?` entries of a status.
const FINISHED_SQL: &str = "/* mysqlq:state_finished */ \
    SELECT CAST(COUNT(*) AS SIGNED) FROM ( \
      SELECT 1 FROM job_queue FORCE INDEX (idx_job_claim) \
      WHERE queue_name = ? AND status = ? LIMIT ?) t";

/// S4 of one queue, every entry (the leader's gauges, as they always counted).
const FINISHED_EXACT_SQL: &str = "/* mysqlq:state_finished_exact */ \
    SELECT CAST(COUNT(*) AS SIGNED) FROM job_queue FORCE INDEX (idx_job_claim) \
    WHERE queue_name = ? AND status = ?";

/// S4 of every queue: at most `?` entries of a status.
const FINISHED_ALL_SQL: &str = "/* mysqlq:state_finished_all */ \
    SELECT CAST(COUNT(*) AS SIGNED) FROM ( \
      SELECT 1 FROM job_queue FORCE INDEX (idx_job_finished) WHERE status = ? LIMIT ?) t";

/// One queue's limits, as a page's rows need them: [`QUEUE_CLOSED_COLUMNS`] and its
/// `processing` jobs (what a global limit counts); binds the queue four times.
fn page_queue_sql() -> String {
    format!(
        "/* mysqlq:state_page_queue */ SELECT {QUEUE_CLOSED_COLUMNS}, \
           (SELECT COUNT(*) FROM job_queue FORCE INDEX (idx_job_claim) \
            WHERE queue_name = ? AND status = 'processing')"
    )
}

/// The live 429 holds that name one of `n` ids.
fn page_held_sql(n: usize) -> String {
    format!(
        "/* mysqlq:state_page_held */ SELECT h.job_id FROM mysqlq_rate_hold h \
         WHERE h.held_until > UTC_TIMESTAMP(6) AND h.job_id IN ({})",
        placeholders(n)
    )
}

/// Which of `n` `(queue, key)` buckets admit nothing now ([`KEY_CLOSED`]).
fn page_keys_sql(n: usize) -> String {
    let pairs = vec!["(?, ?)"; n].join(", ");
    format!(
        "/* mysqlq:state_page_keys */ SELECT CAST(b.queue_name AS CHAR) AS q, \
           CAST(b.rate_key AS CHAR) AS k FROM mysqlq_rate_bucket b \
         WHERE (b.queue_name, b.rate_key) IN ({pairs}) AND b.rate_key <> '' AND {KEY_CLOSED}"
    )
}

/// What [`queue_counts`] counts of the finished states.
#[derive(Debug, Clone, Copy)]
pub(super) struct Counting {
    /// The finished states counted per queue (`failed` stays 0 when it is not one of them).
    pub finished: &'static [JobState],
    /// Up to how many jobs each is counted (`None`: all of them).
    pub cap: Option<u64>,
    /// At most this many queues, the first by name.
    pub max_queues: u32,
}

/// One queue's figures as the statements read them, before the assembly.
#[derive(Debug, Clone, Default)]
pub(super) struct Counted {
    pub queue: String,
    pub waiting: u64,
    pub pending: u64,
    /// Pending and due now.
    pub due: u64,
    /// Pending, due later, after a failed attempt.
    pub retried: u64,
    pub processing: u64,
    /// Microseconds since the oldest due pending job became due.
    pub oldest_us: Option<i64>,
    /// Of `processing`, held by a relay.
    pub relayed: u64,
    /// Pending, due later, named by a live 429 hold.
    pub held: u64,
    /// Of `held`, after a failed attempt.
    pub held_retried: u64,
    /// Of `due`, held back by a limit (`queue_rate_limited`).
    pub limited: u64,
    pub completed: Option<Capped>,
    pub failed: Capped,
    pub cancelled: Option<Capped>,
}

impl Counted {
    /// The assembly (see the module's docs).
    pub(super) fn states(&self) -> StateCounts {
        StateCounts {
            waiting: self.waiting,
            ready: self.due.saturating_sub(self.limited) + self.relayed,
            in_stream: self.relayed,
            rate_limited: self.limited + self.held,
            scheduled: self
                .pending
                .saturating_sub(self.due + self.retried)
                .saturating_sub(self.held - self.held_retried.min(self.held)),
            retrying: self.retried.saturating_sub(self.held_retried),
            running: self.processing.saturating_sub(self.relayed),
            completed: self.completed,
            failed: self.failed,
            cancelled: self.cancelled,
        }
    }

    /// The queue's row of `Admin::state_counts`.
    pub(super) fn queue_states(&self) -> QueueStates {
        QueueStates {
            queue: self.queue.clone(),
            states: self.states(),
            oldest_ready_age_us: self.oldest_us.map(non_negative),
        }
    }
}

/// `state_queues`, S1–S3, then per queue `queue_rate_limited` (when it has due jobs) and S4
/// for each of `c.finished`: every queue's figures, by queue name.
pub(super) async fn queue_counts(
    conn: &mut MySqlConnection,
    c: Counting,
) -> Result<Vec<Counted>, Error> {
    let names: Vec<String> = sqlx::query_scalar(QUEUES_SQL)
        .bind(c.max_queues)
        .fetch_all(&mut *conn)
        .await?;
    let mut out: Vec<Counted> = names
        .into_iter()
        .map(|queue| Counted {
            queue,
            ..Counted::default()
        })
        .collect();
    let at: HashMap<String, usize> = out
        .iter()
        .enumerate()
        .map(|(i, q)| (q.queue.clone(), i))
        .collect();
    let rows = sqlx::query(COUNTS_SQL).fetch_all(&mut *conn).await?;
    for r in rows {
        let Some(&i) = at.get(&r.try_get::<String, _>("q")?) else {
            continue;
        };
        let q = &mut out[i];
        let n = non_negative(r.try_get("n")?);
        match r.try_get::<String, _>("st")?.as_str() {
            "waiting" => q.waiting = n,
            "pending" => {
                q.pending = n;
                q.due = non_negative(r.try_get("due")?);
                q.retried = non_negative(r.try_get("retried")?);
                q.oldest_us = r.try_get("oldest_us")?;
            }
            _ => q.processing = n,
        }
    }
    let rows = sqlx::query(RELAYED_SQL)
        .bind(format!("{RELAY_PREFIX}%"))
        .fetch_all(&mut *conn)
        .await?;
    for r in rows {
        if let Some(&i) = at.get(&r.try_get::<String, _>("q")?) {
            out[i].relayed = non_negative(r.try_get("n")?);
        }
    }
    let rows = sqlx::query(HELD_SQL).fetch_all(&mut *conn).await?;
    for r in rows {
        if let Some(&i) = at.get(&r.try_get::<String, _>("q")?) {
            out[i].held = non_negative(r.try_get("n")?);
            out[i].held_retried = non_negative(r.try_get("retried")?);
        }
    }
    for q in &mut out {
        if q.due > 0 {
            q.limited = queue_rate_limited(conn, &q.queue, q.due, q.processing).await?;
        }
        for &status in c.finished {
            let n = queue_finished(conn, &q.queue, status, c.cap).await?;
            match status {
                JobState::Completed => q.completed = Some(n),
                JobState::Cancelled => q.cancelled = Some(n),
                _ => q.failed = n,
            }
        }
    }
    Ok(out)
}

/// S4 of one queue: its jobs of `status`, up to `cap` (`None`: all).
async fn queue_finished(
    conn: &mut MySqlConnection,
    queue: &str,
    status: JobState,
    cap: Option<u64>,
) -> Result<Capped, Error> {
    Ok(match cap {
        Some(cap) => {
            let n: i64 = sqlx::query_scalar(FINISHED_SQL)
                .bind(queue)
                .bind(status.as_str())
                .bind(cap.saturating_add(1))
                .fetch_one(&mut *conn)
                .await?;
            Capped::of(non_negative(n), cap)
        }
        None => {
            let n: i64 = sqlx::query_scalar(FINISHED_EXACT_SQL)
                .bind(queue)
                .bind(status.as_str())
                .fetch_one(&mut *conn)
                .await?;
            Capped::exact(non_negative(n))
        }
    })
}

/// `state_counts`: every queue's jobs by [`OpState`](crate::state::OpState), the queues by
/// name; the unfinished states exact, `completed`, `failed` and `cancelled` each counted up to
/// [`Capped::CAP`] per queue.
pub async fn state_counts(conn: &mut MySqlConnection) -> Result<Vec<QueueStates>, Error> {
    let counted = queue_counts(
        conn,
        Counting {
            finished: &[JobState::Completed, JobState::Failed, JobState::Cancelled],
            cap: Some(Capped::CAP),
            max_queues: u32::MAX,
        },
    )
    .await?;
    Ok(counted.iter().map(Counted::queue_states).collect())
}

/// [`state_counts`] without the completed and cancelled jobs (`None` in the counts): what a
/// page that refreshes itself can afford at a million finished rows.
pub async fn state_counts_open(conn: &mut MySqlConnection) -> Result<Vec<QueueStates>, Error> {
    let counted = queue_counts(
        conn,
        Counting {
            finished: &[JobState::Failed],
            cap: Some(Capped::CAP),
            max_queues: u32::MAX,
        },
    )
    .await?;
    Ok(counted.iter().map(Counted::queue_states).collect())
}

/// `state_finished`, `state_finished_all` (S4): the jobs of `status` in `queue` (or in every
/// queue), counted up to [`Capped::CAP`]: "100k+" past it.
pub async fn finished_count(
    conn: &mut MySqlConnection,
    status: JobState,
    queue: Option<&str>,
) -> Result<Capped, Error> {
    match queue {
        Some(q) => queue_finished(conn, q, status, Some(Capped::CAP)).await,
        None => {
            let n: i64 = sqlx::query_scalar(FINISHED_ALL_SQL)
                .bind(status.as_str())
                .bind(Capped::CAP + 1)
                .fetch_one(&mut *conn)
                .await?;
            Ok(Capped::of(non_negative(n), Capped::CAP))
        }
    }
}

/// A row of a page, as `Admin::limited_rows` needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRow<'a> {
    /// `id`.
    pub id: JobId,
    /// `queue_name`.
    pub queue: &'a str,
    /// `rate_key`.
    pub rate_key: Option<&'a str>,
    /// `status`.
    pub status: JobState,
    /// `available_at`.
    pub available_at: Timestamp,
}

/// `state_page_held`, `state_page_keys`, `state_page_queue`: which of a page's `pending` rows
/// a limit holds back at `now` (the time the page was read, by the database's clock), as the
/// counts judge it: a live 429 hold names the job; or it is due and its key's bucket is closed
/// or held, or its queue is held, at its rate or at its global limit. The rows' `limited`
/// for [`RowFacts`](crate::state::RowFacts). At most [`MAX_PAGE_ROWS`] rows; three statements
/// at most, plus one per queue with due rows.
pub async fn rows_limited(
    conn: &mut MySqlConnection,
    rows: &[PageRow<'_>],
    now: Timestamp,
) -> Result<HashSet<JobId>, Error> {
    if rows.len() > MAX_PAGE_ROWS {
        return Err(Error::invalid(
            "page",
            format!("{} rows; at most {MAX_PAGE_ROWS} at once", rows.len()),
        ));
    }
    let pending: Vec<&PageRow<'_>> = rows
        .iter()
        .filter(|r| r.status == JobState::Pending)
        .collect();
    if pending.is_empty() {
        return Ok(HashSet::new());
    }
    let ids: Vec<JobId> = pending.iter().map(|r| r.id).collect();
    let sql = page_held_sql(padded_len(ids.len()));
    let held: Vec<u64> = bind_ids(sqlx::query(sqlx::AssertSqlSafe(sql)), &ids)
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|r| r.try_get::<u64, _>(0))
        .collect::<Result<_, _>>()?;
    let held: HashSet<u64> = held.into_iter().collect();

    let due: Vec<&PageRow<'_>> = pending
        .iter()
        .copied()
        .filter(|r| r.available_at <= now)
        .collect();
    let mut keys: Vec<(&str, &str)> = due
        .iter()
        .filter_map(|r| r.rate_key.filter(|k| !k.is_empty()).map(|k| (r.queue, k)))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let mut closed_keys: HashSet<(String, String)> = HashSet::new();
    if !keys.is_empty() {
        let n = padded_len(keys.len());
        let mut q = sqlx::query(sqlx::AssertSqlSafe(page_keys_sql(n)));
        for i in 0..n {
            let (queue, key) = keys[i.min(keys.len() - 1)];
            q = q.bind(queue).bind(key);
        }
        for r in q.fetch_all(&mut *conn).await? {
            closed_keys.insert((r.try_get("q")?, r.try_get("k")?));
        }
    }
    let mut queues: Vec<&str> = due.iter().map(|r| r.queue).collect();
    queues.sort_unstable();
    queues.dedup();
    let mut closed_queues: HashSet<&str> = HashSet::new();
    for queue in queues {
        let (held_q, full, global, running): (i64, i64, Option<u32>, i64) =
            sqlx::query_as(sqlx::AssertSqlSafe(page_queue_sql()))
                .bind(queue)
                .bind(queue)
                .bind(queue)
                .bind(queue)
                .fetch_one(&mut *conn)
                .await?;
        if queue_closed(held_q, full, global, non_negative(running)) {
            closed_queues.insert(queue);
        }
    }
    Ok(pending
        .iter()
        .filter(|r| {
            held.contains(&r.id.0)
                || (r.available_at <= now
                    && (closed_queues.contains(r.queue)
                        || r.rate_key.is_some_and(|k| {
                            closed_keys.contains(&(r.queue.to_owned(), k.to_owned()))
                        })))
        })
        .map(|r| r.id)
        .collect())
}

/// `EXPLAIN`s every statement of this file, and `queue_rate_limited`, with the binds they run
/// with (`queue` where one is bound). Returns `(statement tag, plan)` pairs.
#[cfg(feature = "__internal-store")]
pub async fn states_explain(
    conn: &mut MySqlConnection,
    queue: &str,
) -> Result<Vec<(&'static str, Vec<super::explain::PlanRow>)>, Error> {
    enum B {
        S(String),
        U(u64),
    }
    let s = |v: &str| B::S(v.to_owned());
    let relay = format!("{RELAY_PREFIX}%");
    let cap = Capped::CAP + 1;
    let plans: Vec<(&'static str, String, Vec<B>)> = vec![
        ("state_queues", QUEUES_SQL.into(), vec![B::U(1000)]),
        ("state_counts", COUNTS_SQL.into(), vec![]),
        ("state_relayed", RELAYED_SQL.into(), vec![s(&relay)]),
        ("state_held", HELD_SQL.into(), vec![]),
        (
            "state_finished",
            FINISHED_SQL.into(),
            vec![s(queue), s("failed"), B::U(cap)],
        ),
        (
            "state_finished_exact",
            FINISHED_EXACT_SQL.into(),
            vec![s(queue), s("failed")],
        ),
        (
            "state_finished_all",
            FINISHED_ALL_SQL.into(),
            vec![s("completed"), B::U(cap)],
        ),
        (
            "queue_rate_limited",
            super::limits::queue_rate_limited_sql(),
            vec![s(queue), s(queue), s(queue), s(queue)],
        ),
        ("state_page_held", page_held_sql(2), vec![B::U(1), B::U(2)]),
        (
            "state_page_keys",
            page_keys_sql(2),
            vec![s(queue), s("a"), s(queue), s("b")],
        ),
        (
            "state_page_queue",
            page_queue_sql(),
            vec![s(queue), s(queue), s(queue), s(queue)],
        ),
    ];
    let mut out = Vec::with_capacity(plans.len());
    for (tag, sql, binds) in plans {
        let mut q = sqlx::query(sqlx::AssertSqlSafe(format!("EXPLAIN {sql}")));
        for b in binds {
            q = match b {
                B::S(v) => q.bind(v),
                B::U(v) => q.bind(v),
            };
        }
        let rows = q.fetch_all(&mut *conn).await?;
        out.push((
            tag,
            rows.iter().map(super::explain::PlanRow::read).collect(),
        ));
    }
    Ok(out)
}
