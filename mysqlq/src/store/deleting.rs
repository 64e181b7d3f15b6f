//! Completions that delete their rows (`WorkerBuilder::delete_completed`, "no history", as
//! Graphile Worker does): in one transaction the claims' rows are locked (token-guarded), those
//! no reader needs are deleted with their attempt history, the others are marked `completed`
//! as [`job_complete_many`] does, and a receipt of the write goes into
//! `mysqlq_completion_receipt`.
//!
//! **Kept rows.** A completed row some reader still needs is completed by the UPDATE, never
//! deleted: a workflow step (`workflow_id`: its dependents' settlement and the sweep read its
//! `completed` status, `upstream`/`upstream_all` read its result, and the workflow pruner deletes
//! it with its workflow) and a job holding its dedupe key for a window after completion
//! (`dedupe_window_us`: its row *is* the hold). Everything else that reads a job after it ended
//! reads only unfinished rows (ordering and concurrency keys, rate limits, the reaper) or keeps
//! its own record (the per-minute statistics, `mysqlq_run_minute`, the audit trail).
//!
//! **Why a receipt.** A token-guarded UPDATE leaves its token on the row, so a write retried
//! after its COMMIT reply was lost recognises its own earlier success (`settled`). A deleted row
//! leaves nothing: the retry finds no row, exactly as when the row is gone because another
//! worker completed (and deleted) the job after this worker's lease ran out, or an operator
//! deleted it once the reaper had taken it back. The first is this worker's completion — counted
//! once, no "lease lost" warning —, the others are a lost claim, counted by whoever completed it
//! (never twice). The receipt tells them apart: every write that deletes rows inserts one row,
//! keyed by a token the worker made for that write and used on each retry of it, listing the
//! jobs of the write it did *not* delete (`missed`, usually none). A claim whose row is gone was
//! deleted by this worker exactly when the receipt of a write that carried it — this write's
//! own, on a retry, or an earlier write whose outcome is unknown ([`Deleting::earlier`]) —
//! exists and does not list it; the claim is lost otherwise.
//!
//! An absent receipt means that write did not commit: receipt tokens are never reused, and the
//! locking read of the claims' rows comes first, so it waits for a write still being committed
//! by the server (which holds the locks of every row it deleted) before the receipt is read.
//! A write names each job once ([`complete_deleting`] refuses repeats), so a receipt's job ids
//! name its claims. The worker deletes a receipt once its write's outcome is known
//! ([`receipt_delete`]); the leader deletes receipts left by workers that died
//! ([`receipt_prune`]).

use std::collections::HashMap;
use std::time::Duration;

use sqlx::{AssertSqlSafe, Connection as _, MySqlConnection, Row};

use super::guarded::{GuardedReport, Owned, job_complete_many, job_ownership};
use super::sql::{bind_ids, micros, padded_len, placeholders};
use crate::{Error, JobId};

/// How a completion write deletes its rows: its receipt, and the receipts of earlier writes of
/// the same completions whose outcome is unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Deleting {
    /// This write's receipt token (a fresh UUID, made by the client): the same on every retry
    /// of this write, never used by another.
    pub receipt: String,
    /// Claims of this write that an earlier write carried which may have committed (its COMMIT
    /// reply was lost, or the claim transaction carrying it failed), with that write's receipt
    /// token: a claim may appear once per such write.
    pub earlier: Vec<(Owned, String)>,
}

/// Completions a write carries: the claims, and whether their rows are deleted.
#[derive(Debug, Clone, Copy, Default)]
pub struct Completing<'a> {
    /// The claims whose handlers returned `Ok`.
    pub jobs: &'a [Owned],
    /// `Some`: delete the rows no reader needs ([`complete_deleting`]); `None`: mark them
    /// `completed` ([`job_complete_many`]).
    pub delete: Option<&'a Deleting>,
}

/// `job_complete`: completes `c.jobs` on its own (not inside a claim): the token-guarded UPDATE
/// of [`job_complete_many`] (one autocommit statement), or, when deleting, the writes of
/// [`complete_deleting`] in a READ COMMITTED transaction of their own.
pub async fn job_complete(
    conn: &mut MySqlConnection,
    c: &Completing<'_>,
) -> Result<GuardedReport, Error> {
    let Some(d) = c.delete else {
        return job_complete_many(conn, c.jobs).await;
    };
    if c.jobs.is_empty() {
        return Ok(GuardedReport::default());
    }
    let mut tx = conn
        .begin_with("/* mysqlq:job_complete_delete */ SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION")
        .await?;
    let report = complete_deleting(&mut tx, c.jobs, d).await?;
    tx.commit().await?;
    Ok(report)
}

/// Completes `c` inside the caller's READ COMMITTED transaction (a claim's).
pub(super) async fn complete_in(
    tx: &mut MySqlConnection,
    c: &Completing<'_>,
) -> Result<GuardedReport, Error> {
    match c.delete {
        _ if c.jobs.is_empty() => Ok(GuardedReport::default()),
        None => job_complete_many(tx, c.jobs).await,
        Some(d) => complete_deleting(tx, c.jobs, d).await,
    }
}

/// The deleting completion, inside the caller's READ COMMITTED transaction (see the module
/// docs): `job_complete_lock` locks the claims still `processing` under their token (by primary
/// key), `job_complete_delete` deletes those no reader needs with their attempt history (one
/// multi-table DELETE), `job_complete_kept` marks the others `completed`, `receipt_insert`
/// records the write when it deleted anything; then the claims it did not write are told
/// apart: settled by an earlier write under their token (a kept row, or a row gone whose
/// receipt says so), cancelled by an operator, or lost. Refuses a job named twice.
pub(super) async fn complete_deleting(
    tx: &mut MySqlConnection,
    jobs: &[Owned],
    d: &Deleting,
) -> Result<GuardedReport, Error> {
    let mut ids: Vec<JobId> = jobs.iter().map(|j| j.id).collect();
    ids.sort_unstable();
    if ids.windows(2).any(|w| w[0] == w[1]) {
        return Err(Error::invalid(
            "deleting completion",
            "a job is named twice: its receipt could not tell which claim it deleted",
        ));
    }
    let ours = lock_ours(tx, jobs).await?;
    let deleted: Vec<JobId> = ours.iter().filter(|(_, keep)| !keep).map(|o| o.0).collect();
    let kept: Vec<JobId> = ours.iter().filter(|(_, keep)| *keep).map(|o| o.0).collect();
    if !deleted.is_empty() {
        let sql = AssertSqlSafe(format!(
            "/* mysqlq:job_complete_delete */ DELETE j, a FROM job_queue AS j FORCE INDEX (PRIMARY) \
             LEFT JOIN mysqlq_job_attempt AS a ON a.job_id = j.id WHERE j.id IN ({})",
            placeholders(padded_len(deleted.len()))
        ));
        bind_ids(sqlx::query(sql), &deleted)
            .execute(&mut *tx)
            .await?;
    }
    if !kept.is_empty() {
        let sql = AssertSqlSafe(format!(
            "/* mysqlq:job_complete_kept */ UPDATE job_queue FORCE INDEX (PRIMARY) \
             SET status = 'completed', finished_at = UTC_TIMESTAMP(6), lease_expires_at = NULL \
             WHERE id IN ({}) AND status = 'processing'",
            placeholders(padded_len(kept.len()))
        ));
        let n = bind_ids(sqlx::query(sql), &kept)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if n != kept.len() as u64 {
            // Impossible while this transaction holds their locks: write nothing (the caller
            // drops the transaction, which rolls it back).
            return Err(Error::invalid(
                "deleting completion",
                format!("locked {} rows to complete but updated {n}", kept.len()),
            ));
        }
    }
    let rest: Vec<Owned> = jobs
        .iter()
        .filter(|j| !ours.iter().any(|(id, _)| *id == j.id))
        .cloned()
        .collect();
    if !deleted.is_empty() {
        let missed: Vec<String> = jobs
            .iter()
            .filter(|j| !deleted.contains(&j.id))
            .map(|j| j.id.0.to_string())
            .collect();
        sqlx::query(
            "/* mysqlq:receipt_insert */ INSERT INTO mysqlq_completion_receipt \
             (token, missed, created_at) VALUES (?, ?, UTC_TIMESTAMP(6))",
        )
        .bind(&d.receipt)
        .bind((!missed.is_empty()).then(|| missed.join(",")))
        .execute(&mut *tx)
        .await?;
    }
    let mut report = GuardedReport {
        done: ours.len() as u64,
        ..GuardedReport::default()
    };
    if rest.is_empty() {
        return Ok(report);
    }
    let o = job_ownership(tx, &rest).await?;
    if !o.owned.is_empty() {
        return Err(Error::invalid(
            "deleting completion",
            "a claimed row was neither locked nor written; nothing was written",
        ));
    }
    report.settled = o.settled;
    report.cancelled = o.cancelled;
    let mine = deleted_earlier(tx, &o.gone, d).await?;
    for claim in o.lost {
        if mine.contains(&claim) {
            report.settled.push(claim);
        } else {
            if o.gone.contains(&claim) {
                report.gone.push(claim.clone());
            }
            report.lost.push(claim);
        }
    }
    Ok(report)
}

/// `job_complete_lock`: locks the rows of `jobs` still `processing` under their claim's token
/// (by primary key: it never reads a row it does not name); returns each with whether it is
/// kept (a workflow step, or a dedupe key held for a window after completion).
async fn lock_ours(tx: &mut MySqlConnection, jobs: &[Owned]) -> Result<Vec<(JobId, bool)>, Error> {
    let n = padded_len(jobs.len());
    let mut pairs = String::new();
    for i in 0..n {
        pairs.push_str(if i == 0 { "(?, ?)" } else { ", (?, ?)" });
    }
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:job_complete_lock */ SELECT id, \
         CAST(workflow_id IS NOT NULL OR dedupe_window_us IS NOT NULL AS SIGNED) AS keep \
         FROM job_queue FORCE INDEX (PRIMARY) WHERE id IN ({}) AND status = 'processing' \
         AND (id, claim_token) IN ({pairs}) FOR UPDATE",
        placeholders(n)
    ));
    let ids: Vec<JobId> = jobs.iter().map(|j| j.id).collect();
    let mut q = bind_ids(sqlx::query(sql), &ids);
    for i in 0..n {
        let j = &jobs[i.min(jobs.len() - 1)];
        q = q.bind(j.id.0).bind(j.token.as_str());
    }
    q.fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|r| Ok((JobId(r.try_get("id")?), r.try_get::<i64, _>("keep")? != 0)))
        .collect()
}

/// Which of `gone` (claims whose row no longer exists) a write of this worker deleted: this
/// write's own receipt (a retry) or an earlier write's ([`Deleting::earlier`]) exists and does not
/// list the job among those it missed (`receipt_read`).
async fn deleted_earlier(
    tx: &mut MySqlConnection,
    gone: &[Owned],
    d: &Deleting,
) -> Result<Vec<Owned>, Error> {
    if gone.is_empty() {
        return Ok(Vec::new());
    }
    let mut tokens: Vec<&str> = vec![d.receipt.as_str()];
    for (claim, token) in &d.earlier {
        if gone.contains(claim) && !tokens.contains(&token.as_str()) {
            tokens.push(token);
        }
    }
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:receipt_read */ SELECT token, missed FROM mysqlq_completion_receipt \
         WHERE token IN ({})",
        placeholders(tokens.len())
    ));
    let mut q = sqlx::query(sql);
    for t in &tokens {
        q = q.bind(*t);
    }
    let mut receipts: HashMap<String, Vec<u64>> = HashMap::new();
    for r in q.fetch_all(&mut *tx).await? {
        let missed: Option<String> = r.try_get("missed")?;
        let ids = missed
            .as_deref()
            .unwrap_or_default()
            .split(',')
            .filter_map(|s| s.parse().ok())
            .collect();
        receipts.insert(r.try_get("token")?, ids);
    }
    let deleted_by = |token: &str, id: JobId| {
        receipts
            .get(token)
            .is_some_and(|missed| !missed.contains(&id.0))
    };
    Ok(gone
        .iter()
        .filter(|claim| {
            deleted_by(&d.receipt, claim.id)
                || d.earlier
                    .iter()
                    .any(|(c, token)| c == *claim && deleted_by(token, claim.id))
        })
        .cloned()
        .collect())
}

/// `receipt_delete`: deletes the receipts `tokens` (their writes' outcomes are known). Returns
/// the rows deleted.
pub async fn receipt_delete(conn: &mut MySqlConnection, tokens: &[String]) -> Result<u64, Error> {
    if tokens.is_empty() {
        return Ok(0);
    }
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:receipt_delete */ DELETE FROM mysqlq_completion_receipt WHERE token IN ({})",
        placeholders(tokens.len())
    ));
    let mut q = sqlx::query(sql);
    for t in tokens {
        q = q.bind(t);
    }
    Ok(q.execute(&mut *conn).await?.rows_affected())
}

/// `receipt_prune`: deletes up to `limit` receipts older than `older_than` (left by workers
/// that died before deleting them). Returns the rows deleted.
pub async fn receipt_prune(
    conn: &mut MySqlConnection,
    older_than: Duration,
    limit: u32,
) -> Result<u64, Error> {
    Ok(sqlx::query(
        "/* mysqlq:receipt_prune */ DELETE FROM mysqlq_completion_receipt \
         WHERE created_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND LIMIT ?",
    )
    .bind(micros(older_than))
    .bind(limit)
    .execute(&mut *conn)
    .await?
    .rows_affected())
}
