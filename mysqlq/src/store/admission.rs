//! Per-key admission inside the claim transaction: which of the claim SELECT's candidates may
//! run, given their ordering keys (at most the head of a key, and only while none of the key
//! runs) and concurrency keys (at most the key's limit running).
//!
//! The claim SELECT already filters both, cheaply, but its subqueries are consistent reads: their
//! snapshot can miss rows that the locking scan sees (committed while the statement runs), and
//! two claimers deciding at once each see the other's choice as not yet made. So a key is
//! decided here again, strictly: its lock row (`mysqlq_ordering`, `mysqlq_concurrency`) is locked
//! first, then a fresh read (a new statement at READ COMMITTED sees every commit before it)
//! counts what runs. A second claimer of the same key waits for nothing: lock rows are taken with
//! `FOR UPDATE SKIP LOCKED`, and the candidates of a key another claim is deciding right now
//! stay `pending` for the next round. So no claim waits behind another (a frozen claimer holding
//! a key cannot stall the others, nor their carried completions and heartbeats), except when two
//! claims create the same key's row at the same instant.

use sqlx::{AssertSqlSafe, MySqlConnection, Row};

use super::sql::{padded_len, placeholders};
use crate::{Error, JobId};

/// The columns a claim reads (decoded by the claim's `claimed_job`, keys for [`admit`]).
pub(super) const CLAIM_COLUMNS: &str = "j.id, j.kind, CAST(j.payload AS CHAR) AS payload, j.attempts, j.max_attempts, \
                j.concurrency_key, j.concurrency_limit, j.ordering_key, CAST(j.meta AS CHAR) AS meta, j.workflow_id, \
                TIMESTAMPDIFF(MICROSECOND, GREATEST(j.available_at, j.created_at), UTC_TIMESTAMP(6)) AS waited_us";

/// What keeps a `pending` job `j` from being claimed beside its queue being paused: an earlier
/// unfinished job of its ordering key (or one running), or its concurrency key at its limit.
/// Decided again, strictly, by [`admit`].
pub(super) const KEY_GATES: &str = "(j.ordering_key IS NULL OR NOT EXISTS ( \
                 SELECT 1 FROM job_queue o WHERE o.ordering_key = j.ordering_key AND o.id <> j.id \
                 AND (o.ordering_status = 'processing' OR (o.ordering_status = 'pending' AND o.id < j.id)))) \
           AND (j.concurrency_key IS NULL OR ( \
                 SELECT COUNT(*) FROM job_queue c \
                 WHERE c.concurrency_key = j.concurrency_key AND c.concurrency_status = 'processing') < j.concurrency_limit)";

/// A candidate of the claim, in claim order, with its keys.
#[derive(Debug, Clone)]
pub(super) struct Candidate {
    pub id: JobId,
    pub ordering_key: Option<String>,
    /// The concurrency key and its limit.
    pub concurrency: Option<(String, u16)>,
}

/// The table of lock rows of one kind of key.
#[derive(Debug, Clone, Copy)]
enum Keys {
    Ordering,
    Concurrency,
}

impl Keys {
    /// (table, column, tag). Constants, never input.
    fn names(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Self::Ordering => ("mysqlq_ordering", "ordering_key", "job_claim_ordering"),
            Self::Concurrency => (
                "mysqlq_concurrency",
                "concurrency_key",
                "job_claim_concurrency",
            ),
        }
    }
}

/// Decides the candidates' keys; returns the indexes (into `candidates`) not admitted. Ordering
/// keys first, then concurrency keys of the candidates still in: every claimer takes its locks in
/// that order.
pub(super) async fn admit(
    conn: &mut MySqlConnection,
    candidates: &[Candidate],
) -> Result<Vec<usize>, Error> {
    let mut dropped = Vec::new();
    let ordering = distinct(candidates.iter().filter_map(|c| c.ordering_key.as_deref()));
    if !ordering.is_empty() {
        let locked = lock_keys(conn, Keys::Ordering, &ordering).await?;
        for key in &ordering {
            let of_key = candidates
                .iter()
                .enumerate()
                .filter(|(_, c)| c.ordering_key.as_deref() == Some(*key));
            let head = if locked.iter().any(|l| l == key) {
                ordering_head(conn, key).await?
            } else {
                None
            };
            dropped.extend(of_key.filter(|(_, c)| Some(c.id) != head).map(|(i, _)| i));
        }
    }
    let still_in = |i: &usize| !dropped.contains(i);
    let concurrency = distinct(
        (0..candidates.len())
            .filter(still_in)
            .filter_map(|i| candidates[i].concurrency.as_ref().map(|(k, _)| k.as_str())),
    );
    if !concurrency.is_empty() {
        let locked = lock_keys(conn, Keys::Concurrency, &concurrency).await?;
        let mut out = Vec::new();
        for key in &concurrency {
            let of_key: Vec<(usize, u16)> = (0..candidates.len())
                .filter(still_in)
                .filter_map(|i| match &candidates[i].concurrency {
                    Some((k, limit)) if k == key => Some((i, *limit)),
                    _ => None,
                })
                .collect();
            let room = if locked.iter().any(|l| l == key) {
                let running = concurrency_running(conn, key).await?;
                let limit = of_key.iter().map(|&(_, l)| i64::from(l)).min().unwrap_or(1);
                usize::try_from((limit - running).max(0)).unwrap_or(0)
            } else {
                0
            };
            out.extend(of_key.iter().skip(room).map(|&(i, _)| i));
        }
        dropped.extend(out);
    }
    Ok(dropped)
}

/// The distinct keys, sorted.
fn distinct<'a>(keys: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut keys: Vec<&str> = keys.collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// Locks the lock rows of `keys` without waiting for another claim's; returns the keys locked.
/// Rows that do not exist yet are created (and so locked); only that can wait, for another claim
/// creating the same key at the same instant.
async fn lock_keys(
    conn: &mut MySqlConnection,
    kind: Keys,
    keys: &[&str],
) -> Result<Vec<String>, Error> {
    let (table, column, tag) = kind.names();
    let select = |suffix: &str, n: usize| {
        AssertSqlSafe(format!(
            "/* mysqlq:{tag} */ SELECT {column} FROM {table} WHERE {column} IN ({}){suffix}",
            placeholders(padded_len(n))
        ))
    };
    let mut locked: Vec<String> = bind_keys(
        sqlx::query_scalar(select(" FOR UPDATE SKIP LOCKED", keys.len())),
        keys,
    )
    .fetch_all(&mut *conn)
    .await?;
    let rest: Vec<&str> = keys
        .iter()
        .copied()
        .filter(|k| !locked.iter().any(|l| l == k))
        .collect();
    if rest.is_empty() {
        return Ok(locked);
    }
    // Rows that exist but were not locked: another claim is deciding these keys now.
    let busy: Vec<String> = bind_keys(sqlx::query_scalar(select("", rest.len())), &rest)
        .fetch_all(&mut *conn)
        .await?;
    for key in rest.into_iter().filter(|k| !busy.iter().any(|b| b == k)) {
        let insert = AssertSqlSafe(format!(
            "/* mysqlq:{tag} */ INSERT INTO {table} ({column}) VALUES (?) \
             ON DUPLICATE KEY UPDATE {column} = {column}"
        ));
        sqlx::query(insert).bind(key).execute(&mut *conn).await?;
        locked.push(key.to_owned());
    }
    Ok(locked)
}

fn bind_keys<'q, O>(
    mut q: sqlx::query::QueryScalar<'q, sqlx::MySql, O, sqlx::mysql::MySqlArguments>,
    keys: &[&'q str],
) -> sqlx::query::QueryScalar<'q, sqlx::MySql, O, sqlx::mysql::MySqlArguments> {
    for i in 0..padded_len(keys.len()) {
        q = q.bind(keys[i.min(keys.len() - 1)]);
    }
    q
}

/// The job of ordering key `key` that may start now: its lowest pending id, when none of the
/// key is `processing`. A fresh read, under the key's lock.
async fn ordering_head(conn: &mut MySqlConnection, key: &str) -> Result<Option<JobId>, Error> {
    let row = sqlx::query(
        "/* mysqlq:job_claim_ordering */ SELECT \
           CAST(EXISTS (SELECT 1 FROM job_queue WHERE ordering_key = ? AND ordering_status = 'processing') AS SIGNED) AS running, \
           (SELECT MIN(id) FROM job_queue WHERE ordering_key = ? AND ordering_status = 'pending') AS head",
    )
    .bind(key)
    .bind(key)
    .fetch_one(&mut *conn)
    .await?;
    let running: i64 = row.try_get("running")?;
    let head: Option<u64> = row.try_get("head")?;
    Ok(head.filter(|_| running == 0).map(JobId))
}

/// How many jobs of concurrency key `key` run now. A fresh read, under the key's lock.
async fn concurrency_running(conn: &mut MySqlConnection, key: &str) -> Result<i64, Error> {
    Ok(sqlx::query_scalar(
        "/* mysqlq:job_claim_concurrency */ SELECT COUNT(*) FROM job_queue \
         WHERE concurrency_key = ? AND concurrency_status = 'processing'",
    )
    .bind(key)
    .fetch_one(&mut *conn)
    .await?)
}
