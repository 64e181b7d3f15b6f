//! Enqueueing: one job inside the caller's transaction, or many with chunked multi-row INSERTs.
//! Both run the process-wide enqueue hooks over each job first and wake this process's idle
//! workers after.

use std::time::Duration;

use futures_util::future::BoxFuture;
use sqlx::{Acquire, Connection, MySql};

use crate::hooks::global_hooks;
use crate::new_job::NewJob;
use crate::store::{self, InsertRow};
use crate::{Enqueued, Error};

pub(crate) async fn enqueue_one<'c, A>(target: A, mut job: NewJob) -> Result<Enqueued, Error>
where
    A: Acquire<'c, Database = MySql> + Send + 'c,
{
    global_hooks().enqueue(&mut job).await?;
    let mut conn = target.acquire().await?;
    let out = store::job_insert_one(&mut conn, &job.row).await?;
    crate::wake::wake_local();
    Ok(out)
}

/// Enqueues many jobs through `target` in one transaction: all of them are written or none.
///
/// Rows go in multi-row INSERTs of up to 500 rows and at most half the
/// server's `max_allowed_packet` bytes. Inside the caller's transaction the rows commit or roll
/// back with it (a savepoint undoes this call's rows if it fails); on a pool or a bare
/// connection the call runs its own transaction, retried from the top on a deadlock or lock
/// wait timeout. Returns one result per job, in order. Jobs with a dedupe key are inserted one
/// statement each (to report each duplicate). The ids are right on Galera too, where the id
/// step changes when a node joins or leaves: a call that sees the step change undoes its rows
/// and inserts them again.
pub fn enqueue_many<'c, A, I>(target: A, jobs: I) -> BoxFuture<'c, Result<Vec<Enqueued>, Error>>
where
    A: Acquire<'c, Database = MySql> + Send + 'c,
    I: IntoIterator<Item = NewJob>,
{
    let jobs: Vec<NewJob> = jobs.into_iter().collect();
    Box::pin(async move {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let hooks = global_hooks();
        let mut rows: Vec<InsertRow> = Vec::with_capacity(jobs.len());
        for mut job in jobs {
            hooks.enqueue(&mut job).await?;
            rows.push(job.row);
        }
        let mut conn = target.acquire().await?;
        let owned = !conn.is_in_transaction();
        let mut tries = 0;
        let out = loop {
            tries += 1;
            // `begin` on a connection already in a transaction makes a savepoint.
            let mut tx = Connection::begin(&mut *conn).await?;
            match store::job_insert_many(&mut tx, &rows).await {
                Ok(Some(out)) => {
                    tx.commit().await?;
                    break out;
                }
                // A Galera node joined or left mid-call, changing the id step: the ids of the
                // last INSERT are unknown. Undo this call's rows (to the savepoint, inside the
                // caller's transaction) and insert them again.
                Ok(None) if tries < MANY_ATTEMPTS => drop(tx),
                Ok(None) => {
                    return Err(Error::invalid(
                        "bulk enqueue",
                        "the cluster's auto_increment_increment kept changing during the call; try again",
                    ));
                }
                Err(e) if owned && tries < MANY_ATTEMPTS && store::is_lock_error(&e) => {
                    drop(tx);
                    tokio::time::sleep(Duration::from_millis(fastrand::u64(1..20))).await;
                }
                Err(e) => return Err(e),
            }
        };
        crate::wake::wake_local();
        Ok(out)
    })
}

/// Attempts of an [`enqueue_many`] that owns its transaction, when deadlocks or lock wait
/// timeouts roll it back.
const MANY_ATTEMPTS: u32 = 5;
