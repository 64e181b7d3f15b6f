//! Token-guarded writes after the claim (complete, heartbeat, release, the end of an attempt)
//! and the ownership check that tells a lost job from one this token already settled.

use std::time::Duration;

use sqlx::{AssertSqlSafe, MySqlConnection, Row};

use super::attempts::{AttemptRecord, job_attempt_record};
use super::sql::{bind_ids, micros, padded_len, placeholders, truncate_error};
use crate::{Error, JobId};

/// A job a worker holds: its id and the token of the claim that gave it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owned {
    /// `id`.
    pub id: JobId,
    /// `claim_token`.
    pub token: String,
}

/// How a token-guarded write over many jobs went. Every list names **claims** (id and token),
/// never bare ids: one statement may carry two claims of the same job (a job snoozed and at once
/// claimed again by the same worker, whose heartbeat still names the old claim beside the new
/// one), and the old claim's loss must not be read as the new one's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GuardedReport {
    /// Jobs written by this statement.
    pub done: u64,
    /// Claims whose guard failed because someone else moved the job: another claim owns it
    /// now, or the reaper took it back after its lease expired.
    pub lost: Vec<Owned>,
    /// Claims whose guard failed because an earlier write under the same token already moved
    /// the job out of `processing` (a retried write whose first COMMIT reply was lost, or a
    /// heartbeat racing the job's own completion): nothing was lost.
    pub settled: Vec<Owned>,
    /// Claims whose guard failed because an operator cancelled the job
    /// ([`crate::admin::Admin::cancel`]): stop running it, nothing more to write.
    pub cancelled: Vec<Owned>,
    /// Claims whose row another transaction held, left unwritten rather than waited for
    /// ([`job_heartbeat`] only): not renewed this time, to be tried again soon.
    pub skipped: Vec<Owned>,
    /// Of [`GuardedReport::lost`], the claims whose row no longer exists. A row deleted by its
    /// own completion (a worker that deletes completed jobs, `WorkerBuilder::delete_completed`)
    /// reads so to every statement but that completion's own writer, which tells it apart by
    /// its receipt ([`super::deleting`]): a heartbeat racing the job's completion leaves such a
    /// claim to the writer.
    pub gone: Vec<Owned>,
}

impl GuardedReport {
    /// The claim `(id, token)` was lost (see [`GuardedReport::lost`]).
    pub fn is_lost(&self, id: JobId, token: &str) -> bool {
        names(&self.lost, id, token)
    }

    /// The claim `(id, token)` had already settled its job (see [`GuardedReport::settled`]).
    pub fn is_settled(&self, id: JobId, token: &str) -> bool {
        names(&self.settled, id, token)
    }

    /// An operator cancelled the job of claim `(id, token)` (see [`GuardedReport::cancelled`]).
    pub fn is_cancelled(&self, id: JobId, token: &str) -> bool {
        names(&self.cancelled, id, token)
    }

    /// The row of claim `(id, token)` was held by another transaction and left unwritten (see
    /// [`GuardedReport::skipped`]).
    pub fn is_skipped(&self, id: JobId, token: &str) -> bool {
        names(&self.skipped, id, token)
    }

    /// The row of the lost claim `(id, token)` no longer exists (see [`GuardedReport::gone`]).
    pub fn is_gone(&self, id: JobId, token: &str) -> bool {
        names(&self.gone, id, token)
    }
}

fn names(claims: &[Owned], id: JobId, token: &str) -> bool {
    claims.iter().any(|c| c.id == id && c.token == token)
}

/// Runs a token-guarded UPDATE over `jobs` (`WHERE id IN (…) AND status = 'processing' AND
/// (id, claim_token) IN ((…))`), then names the jobs it did not change, split into lost and
/// already settled by this token ([`job_ownership`]).
async fn guarded_update(
    conn: &mut MySqlConnection,
    tag: &str,
    moves: Moves,
    set: &str,
    leading: Option<i64>,
    jobs: &[Owned],
) -> Result<GuardedReport, Error> {
    if jobs.is_empty() {
        return Ok(GuardedReport::default());
    }
    let n = padded_len(jobs.len());
    let mut pairs = String::new();
    for i in 0..n {
        pairs.push_str(if i == 0 { "(?, ?)" } else { ", (?, ?)" });
    }
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:{tag} */ UPDATE job_queue FORCE INDEX (PRIMARY) SET {set} WHERE id IN ({}) \
         AND status = 'processing' AND (id, claim_token) IN ({pairs})",
        placeholders(n)
    ));
    let mut q = sqlx::query(sql);
    if let Some(v) = leading {
        q = q.bind(v);
    }
    let ids: Vec<JobId> = jobs.iter().map(|j| j.id).collect();
    q = bind_ids(q, &ids);
    for i in 0..n {
        let j = &jobs[i.min(jobs.len() - 1)];
        q = q.bind(j.id.0).bind(j.token.as_str());
    }
    let done = q.execute(&mut *conn).await?.rows_affected();
    let mut report = GuardedReport {
        done,
        ..GuardedReport::default()
    };
    if done < jobs.len() as u64 {
        let mut o = job_ownership(conn, jobs).await?;
        // The read after the write finds this write's own rows moved out of `processing` under
        // their tokens too, as an earlier write's: not settled by an earlier write, written now
        // (counted in `done`). They are the `done` latest-updated of them (`updated_at` moves
        // on every UPDATE, and nothing writes a claim's row under its token after its outcome).
        if !o.settled.is_empty() && moves == Moves::OutOfProcessing {
            o.settled_updated_us
                .sort_by_key(|(_, us)| std::cmp::Reverse(*us));
            let now: Vec<Owned> = o
                .settled_updated_us
                .iter()
                .take(usize::try_from(done).unwrap_or(usize::MAX))
                .map(|(claim, _)| claim.clone())
                .collect();
            o.settled.retain(|c| !now.contains(c));
        }
        report.lost = o.lost;
        report.gone = o.gone;
        report.settled = o.settled;
        report.cancelled = o.cancelled;
    }
    Ok(report)
}

/// Where a guarded write's `SET` moves its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Moves {
    /// Out of `processing` (a completion, a release): the rows it wrote under a token that stays
    /// on them read as settled by that token afterwards.
    OutOfProcessing,
    /// Nowhere: they stay `processing` (a heartbeat).
    Nowhere,
}

/// Where a set of claims stands: each claim (id and token) in one list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Ownership {
    /// Still `processing` under the claim's token.
    pub owned: Vec<Owned>,
    /// Moved out of `processing` by a write under the claim's token (the token stays on the
    /// row until the next claim): the holder's own write committed.
    pub settled: Vec<Owned>,
    /// Held under another token, moved by the reaper (which clears the token), or deleted.
    pub lost: Vec<Owned>,
    /// Of `lost`, the claims whose row no longer exists.
    pub gone: Vec<Owned>,
    /// Cancelled by an operator while the claim's token was on the row (`status =
    /// 'cancelled'` with `cancelled_by` set): not lost to another worker, but not to be run or
    /// written any more.
    pub cancelled: Vec<Owned>,
    /// The claims of `settled` with their row's `updated_at` (µs since the epoch).
    pub settled_updated_us: Vec<(Owned, i64)>,
}

/// `job_ownership`: classifies the claims `jobs` by their row's current status, token and
/// canceller (two claims of one job are told apart by their tokens). A plain read: call it after
/// a guarded write, whose row locks mean the rows it saw are committed.
pub(super) async fn job_ownership(
    conn: &mut MySqlConnection,
    jobs: &[Owned],
) -> Result<Ownership, Error> {
    let mut out = Ownership::default();
    if jobs.is_empty() {
        return Ok(out);
    }
    let ids: Vec<JobId> = jobs.iter().map(|j| j.id).collect();
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:job_ownership */ SELECT id, CAST(status AS CHAR) AS status, claim_token, \
         CAST(cancelled_by IS NOT NULL AS SIGNED) AS by_operator, \
         CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', updated_at) AS SIGNED) AS updated_us \
         FROM job_queue FORCE INDEX (PRIMARY) WHERE id IN ({})",
        placeholders(padded_len(ids.len()))
    ));
    let rows = bind_ids(sqlx::query(sql), &ids)
        .fetch_all(&mut *conn)
        .await?;
    for j in jobs {
        let row = rows
            .iter()
            .find(|r| r.try_get::<u64, _>("id").ok() == Some(j.id.0));
        let (status, token, by_operator, updated_us) = match row {
            Some(r) => (
                r.try_get::<String, _>("status")?,
                r.try_get::<Option<String>, _>("claim_token")?,
                r.try_get::<i64, _>("by_operator")? != 0,
                r.try_get::<Option<i64>, _>("updated_us")?.unwrap_or(0),
            ),
            None => {
                out.lost.push(j.clone());
                out.gone.push(j.clone());
                continue;
            }
        };
        let into = match (status.as_str(), token.as_deref() == Some(j.token.as_str())) {
            ("processing", true) => &mut out.owned,
            ("cancelled", true) if by_operator => &mut out.cancelled,
            (_, true) => {
                out.settled_updated_us.push((j.clone(), updated_us));
                &mut out.settled
            }
            _ => &mut out.lost,
        };
        into.push(j.clone());
    }
    Ok(out)
}

/// What the holder of a claim token keeps on a row after it moved the job out of `processing`:
/// `locked_by` and `claim_token` stay (they name the last attempt's worker and token, and let a
/// retried write recognise its own commit); only the lease goes. The token grants ownership only
/// together with `status = 'processing'`, and every claim writes a new one.
const CLEAR_OWNER: &str = "lease_expires_at = NULL";

/// `job_complete_many`: marks jobs `completed` in one statement (token-guarded).
pub async fn job_complete_many(
    conn: &mut MySqlConnection,
    jobs: &[Owned],
) -> Result<GuardedReport, Error> {
    let set = format!("status = 'completed', finished_at = UTC_TIMESTAMP(6), {CLEAR_OWNER}");
    guarded_update(
        conn,
        "job_complete_many",
        Moves::OutOfProcessing,
        &set,
        None,
        jobs,
    )
    .await
}

/// `job_heartbeat`: extends the leases of in-flight jobs (token-guarded), in one transaction
/// that first locks, without waiting, the rows no one else holds (`FOR UPDATE SKIP LOCKED`), then
/// renews those. A row another transaction holds — an application's `SELECT … FOR UPDATE`, this
/// worker's own write of that job's outcome, an operator's action — is left for the next round
/// ([`GuardedReport::skipped`]) instead of being waited for: one statement renews every lease,
/// and waiting for one row (up to `innodb_lock_wait_timeout`) stopped them all.
pub async fn job_heartbeat(
    conn: &mut MySqlConnection,
    lease: Duration,
    jobs: &[Owned],
) -> Result<GuardedReport, Error> {
    use sqlx::Connection as _;
    if jobs.is_empty() {
        return Ok(GuardedReport::default());
    }
    let ids: Vec<JobId> = jobs.iter().map(|j| j.id).collect();
    // READ COMMITTED, and every statement reads by primary key (FORCE INDEX): the UPDATE below
    // names only rows this transaction locked, so it reads no row another transaction holds.
    // Planned on a secondary index (`status = 'processing'`, chosen when the ids named outnumber
    // the running jobs), it would lock each running row it passes, and wait for any another
    // transaction holds: InnoDB's semi-consistent read skips held rows only on a scan of the
    // clustered index (`guarded_writes_never_wait_for_a_row_they_do_not_name`).
    let mut tx = conn
        .begin_with("/* mysqlq:job_heartbeat */ SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION")
        .await?;
    let lock = AssertSqlSafe(format!(
        "/* mysqlq:job_heartbeat_lock */ SELECT id FROM job_queue FORCE INDEX (PRIMARY) WHERE id IN ({}) \
         FOR UPDATE SKIP LOCKED",
        placeholders(padded_len(ids.len()))
    ));
    let locked: Vec<u64> = bind_ids(sqlx::query(lock), &ids)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|r| r.try_get::<u64, _>("id"))
        .collect::<Result<_, _>>()?;
    let (free, passed): (Vec<Owned>, Vec<Owned>) =
        jobs.iter().cloned().partition(|j| locked.contains(&j.id.0));
    let set = "lease_expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND";
    let mut report = guarded_update(
        &mut tx,
        "job_heartbeat",
        Moves::Nowhere,
        set,
        Some(micros(lease)),
        &free,
    )
    .await?;
    tx.commit().await?;
    if !passed.is_empty() {
        // Not locked by this statement: held by another transaction, or gone. A plain read of
        // the last committed state tells: still this claim's (skipped: try again soon), lost,
        // settled by this token, or cancelled by an operator.
        let o = job_ownership(conn, &passed).await?;
        report.lost.extend(o.lost);
        report.gone.extend(o.gone);
        report.settled.extend(o.settled);
        report.cancelled.extend(o.cancelled);
        report.skipped = o.owned;
    }
    Ok(report)
}

/// `job_release`: hands claimed jobs back to `pending` without consuming the attempt (worker
/// shutdown; jobs claimed but never started, or cancelled at the deadline).
pub async fn job_release(
    conn: &mut MySqlConnection,
    jobs: &[Owned],
) -> Result<GuardedReport, Error> {
    let set =
        format!("status = 'pending', attempts = IF(attempts > 0, attempts - 1, 0), {CLEAR_OWNER}");
    guarded_update(
        conn,
        "job_release",
        Moves::OutOfProcessing,
        &set,
        None,
        jobs,
    )
    .await
}

/// `job_relay_release`: hands relayed jobs (held under a relay's token, in a stream or about to
/// be) back to `pending` with nothing else changed: no attempt was taken, so none is given back.
/// The relay does this when Redis lost their entries, when an `XADD` failed or did not fit under
/// the stream's cap, and at shutdown; a consumer does it for entries it read but cannot run.
#[cfg(any(feature = "redis", feature = "__internal-store"))]
pub async fn job_relay_release(
    conn: &mut MySqlConnection,
    jobs: &[Owned],
) -> Result<GuardedReport, Error> {
    let set = "status = 'pending', locked_by = NULL, claim_token = NULL, lease_expires_at = NULL";
    guarded_update(
        conn,
        "job_relay_release",
        Moves::OutOfProcessing,
        set,
        None,
        jobs,
    )
    .await
}

/// Where a failed attempt sends a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Back to `pending`, runnable after `delay` (a retry).
    Retry {
        /// Delay before the next attempt.
        delay: Duration,
    },
    /// Back to `pending` after `delay` without consuming the attempt (snooze).
    Snooze {
        /// Delay before the next attempt.
        delay: Duration,
    },
    /// To `failed` (attempts exhausted or a permanent error).
    Fail,
    /// To `cancelled`.
    Cancel,
    /// Back to `pending` after `delay` without consuming the attempt, holding the job's rate
    /// key (its queue, without one) until then: `JobError::rate_limited`.
    RateLimited {
        /// How long the key is held.
        delay: Duration,
    },
}

/// How a token-guarded write of one job went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// This statement wrote it.
    Now,
    /// An earlier write under the same token had already moved the job out of `processing`
    /// (a retried write whose first COMMIT reply was lost): nothing more to do.
    Already,
    /// Ownership was lost: another claim owns the job, or the reaper took it back.
    Lost,
    /// An operator cancelled the job while this token held it: nothing is written.
    Cancelled,
}

/// `available_at` for "now + ? microseconds", clamped to the largest `DATETIME` so that an
/// absurd delay (a snooze of `Duration::MAX`) schedules the job at the end of time instead of
/// failing the write with error 1441 (datetime overflow) forever.
macro_rules! at_delay {
    () => {
        "UTC_TIMESTAMP(6) + INTERVAL LEAST(?, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), \
         '9999-12-31 23:59:59')) MICROSECOND"
    };
}

/// `job_retry_at` / `job_snooze` / `job_fail` / `job_cancel`: records the end of one attempt,
/// token-guarded, with `last_error` (bounded to [`MAX_ERROR_BYTES`]). Delays are clamped to what
/// `DATETIME` holds. A write refused by the guard is told apart: [`Written::Already`] when this
/// token's own earlier write committed, [`Written::Cancelled`] when an operator cancelled the
/// job, [`Written::Lost`] when someone else moved the job. Keeps no attempt history: the worker
/// uses [`job_finish_attempt_logged`].
///
/// [`MAX_ERROR_BYTES`]: super::MAX_ERROR_BYTES
#[cfg(feature = "__internal-store")]
pub async fn job_finish_attempt(
    conn: &mut MySqlConnection,
    job: &Owned,
    outcome: &Outcome,
    error: &str,
) -> Result<Written, Error> {
    job_finish_attempt_logged(conn, job, outcome, error, None).await
}

/// [`job_finish_attempt`], and with `log` the attempt's row in `mysqlq_job_attempt` (error,
/// worker, start and end; the job's history trimmed to [`AttemptRecord::keep`]) written in the
/// same transaction, only when the outcome itself was written.
pub async fn job_finish_attempt_logged(
    conn: &mut MySqlConnection,
    job: &Owned,
    outcome: &Outcome,
    error: &str,
    log: Option<&AttemptRecord<'_>>,
) -> Result<Written, Error> {
    let full_error = error;
    let error = truncate_error(error);
    let (sql, delay): (&'static str, Option<Duration>) = match outcome {
        Outcome::Retry { delay } => (
            concat!(
                "/* mysqlq:job_retry_at */ UPDATE job_queue SET status = 'pending', available_at = ",
                at_delay!(),
                ", last_error = ?, lease_expires_at = NULL \
                 WHERE id = ? AND status = 'processing' AND claim_token = ?"
            ),
            Some(*delay),
        ),
        Outcome::Snooze { delay } | Outcome::RateLimited { delay } => (
            concat!(
                "/* mysqlq:job_snooze */ UPDATE job_queue SET status = 'pending', available_at = ",
                at_delay!(),
                ", last_error = ?, attempts = IF(attempts > 0, attempts - 1, 0), \
                 lease_expires_at = NULL WHERE id = ? AND status = 'processing' AND claim_token = ?"
            ),
            Some(*delay),
        ),
        Outcome::Fail => (
            "/* mysqlq:job_fail */ UPDATE job_queue SET status = 'failed', \
             finished_at = UTC_TIMESTAMP(6), last_error = ?, lease_expires_at = NULL \
             WHERE id = ? AND status = 'processing' AND claim_token = ?",
            None,
        ),
        Outcome::Cancel => (
            "/* mysqlq:job_cancel */ UPDATE job_queue SET status = 'cancelled', \
             finished_at = UTC_TIMESTAMP(6), last_error = ?, lease_expires_at = NULL \
             WHERE id = ? AND status = 'processing' AND claim_token = ?",
            None,
        ),
    };
    let mut q = sqlx::query(sql);
    if let Some(d) = delay {
        q = q.bind(micros(d));
    }
    let q = q.bind(error).bind(job.id.0).bind(job.token.as_str());
    // A rate-limited outcome writes its hold in the same transaction, history or not.
    let held = matches!(outcome, Outcome::RateLimited { .. });
    let done = if log.is_none() && !held {
        q.execute(&mut *conn).await?.rows_affected()
    } else {
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        let done = q.execute(&mut *tx).await?.rows_affected();
        if done == 1 {
            if let Outcome::RateLimited { delay } = outcome {
                super::rate::hold(&mut tx, job.id, *delay).await?;
            }
            if let Some(log) = log {
                job_attempt_record(&mut tx, job.id, log, full_error).await?;
            }
            tx.commit().await?;
        } else {
            tx.rollback().await?;
        }
        done
    };
    if done == 1 {
        return Ok(Written::Now);
    }
    let o = job_ownership(conn, std::slice::from_ref(job)).await?;
    Ok(if !o.settled.is_empty() {
        Written::Already
    } else if !o.cancelled.is_empty() {
        Written::Cancelled
    } else {
        Written::Lost
    })
}
