//! The statements behind `mysqlq::testing`: the pending jobs a test looks at, the newest id, and
//! the claim of one job at a time for `drain` and `work_one`, which then go through the
//! worker's own executor and outcome writes.

use std::time::Duration;

use sqlx::{AssertSqlSafe, Connection, MySqlConnection, Row};

use super::admin::{Job, job_from_row};
use super::admission::{CLAIM_COLUMNS, KEY_GATES};
use super::claim::{ClaimFailed, ClaimParams, ClaimedJob};
use super::claim::{admit_and_mark, commit};
use super::guarded::GuardedReport;
use super::sql::placeholders;
use crate::{Error, JobId};

/// Most rows [`job_list_pending`] reads: a test that enqueued more asks about too much at once.
const PENDING_LIST_LIMIT: u32 = 10_000;

const LIST_PENDING_SQL: &str = concat!(
    "/* mysqlq:job_list_pending */ ",
    job_select!(),
    " WHERE j.status = 'pending' AND (? IS NULL OR j.kind = ?) ORDER BY j.id LIMIT ?"
);

/// `job_list_pending`: the pending jobs (of one kind, or all), oldest first, at most
/// [`PENDING_LIST_LIMIT`], every column (for `mysqlq::testing`'s assertions, which run inside
/// the test's own transaction).
pub async fn job_list_pending(
    conn: &mut MySqlConnection,
    kind: Option<&str>,
) -> Result<Vec<Job>, Error> {
    let rows = sqlx::query(LIST_PENDING_SQL)
        .bind(kind)
        .bind(kind)
        .bind(PENDING_LIST_LIMIT)
        .fetch_all(&mut *conn)
        .await?;
    rows.iter().map(job_from_row).collect()
}

/// `job_max_id`: the newest job's id (0 when there is none): where a drain without recursion
/// stops.
pub async fn job_max_id(conn: &mut MySqlConnection) -> Result<JobId, Error> {
    let id: Option<u64> =
        sqlx::query_scalar("/* mysqlq:job_max_id */ SELECT MAX(id) FROM job_queue")
            .fetch_one(&mut *conn)
            .await?;
    Ok(JobId(id.unwrap_or(0)))
}

/// Which job [`job_claim_next`] claims.
#[derive(Debug, Clone, Copy)]
pub enum Next<'a> {
    /// The pending job of these queues with the lowest id above `after` and at most `up_to`.
    InQueues {
        /// The queues (validated names).
        queues: &'a [String],
        /// Only ids above this one.
        after: JobId,
        /// Only ids up to this one.
        up_to: JobId,
    },
    /// This job.
    Id(JobId),
}

/// Parameters of [`job_claim_next`].
#[derive(Debug, Clone, Copy)]
pub struct ClaimNext<'a> {
    /// Which job.
    pub next: Next<'a>,
    /// Jobs whose `available_at` is still to come are claimed too (run now).
    pub scheduled: bool,
    /// `locked_by`.
    pub worker_id: &'a str,
    /// The new claim token (made by the client).
    pub token: &'a str,
    /// Lease length.
    pub lease: Duration,
}

/// `job_claim_next`: claims one job (`mysqlq::testing`'s `drain` and `work_one`) in a claim
/// transaction like [`super::job_claim_completing`]'s: READ COMMITTED, the claim's columns read
/// `FOR UPDATE SKIP LOCKED`, the same gates (a paused queue, an earlier unfinished job of the
/// ordering key, a concurrency key at its limit; decided again by the admission), the same
/// UPDATE (token, `locked_by`, lease, `attempts + 1`). It picks by id instead of claim order,
/// and with `scheduled` ignores `available_at`. Returns the job and its queue, `None` when no
/// job qualifies.
pub async fn job_claim_next(
    conn: &mut MySqlConnection,
    p: &ClaimNext<'_>,
) -> Result<Option<(ClaimedJob, String)>, ClaimFailed> {
    let which = match p.next {
        Next::InQueues { queues, .. } => {
            if queues.is_empty() {
                return Ok(None);
            }
            for q in queues {
                crate::queue::validate_queue_name(q)?;
            }
            format!(
                "j.queue_name IN ({}) AND j.id > ? AND j.id <= ?",
                placeholders(queues.len())
            )
        }
        Next::Id(_) => "j.id = ?".to_owned(),
    };
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:job_claim_next */ SELECT {CLAIM_COLUMNS}, CAST(j.queue_name AS CHAR) AS queue \
         FROM job_queue j \
         WHERE {which} AND j.status = 'pending' AND (? OR j.available_at <= UTC_TIMESTAMP(6)) \
           AND NOT EXISTS (SELECT 1 FROM mysqlq_queue pq WHERE pq.queue_name = j.queue_name AND pq.paused = 1) \
           AND {KEY_GATES} \
         ORDER BY j.id LIMIT 1 \
         FOR UPDATE SKIP LOCKED"
    ));
    let mut q = sqlx::query(sql);
    match p.next {
        Next::InQueues {
            queues,
            after,
            up_to,
        } => {
            for name in queues {
                q = q.bind(name);
            }
            q = q.bind(after.0).bind(up_to.0);
        }
        Next::Id(id) => q = q.bind(id.0),
    }
    let mut tx = conn
        .begin_with("/* mysqlq:job_claim_next */ SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION")
        .await?;
    let rows = q.bind(p.scheduled).fetch_all(&mut *tx).await?;
    let Some(queue) = rows
        .first()
        .map(|r| r.try_get::<String, _>("queue"))
        .transpose()?
    else {
        return Ok(None);
    };
    let params = ClaimParams {
        queue: &queue,
        limit: 1,
        skip: 0,
        worker_id: p.worker_id,
        token: p.token,
        lease: p.lease,
    };
    let jobs = admit_and_mark(&mut tx, &rows, &params, "job_claim_next", true).await?;
    let (mut jobs, _) = commit(tx, jobs, GuardedReport::default()).await?;
    Ok(jobs.pop().map(|job| (job, queue)))
}
