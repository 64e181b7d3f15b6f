//! Statements of the periodic-job scheduler.

use sqlx::{Connection, MySqlConnection};

use super::{InsertRow, sqlx_error_number};
use crate::{Error, JobId};

/// `db_now`: the database clock, UTC, as `YYYY-MM-DD HH:MM:SS.ffffff`.
pub async fn db_now(conn: &mut MySqlConnection) -> Result<String, Error> {
    Ok(sqlx::query_scalar(
        "/* mysqlq:db_now */ SELECT DATE_FORMAT(UTC_TIMESTAMP(6), '%Y-%m-%d %H:%i:%s.%f')",
    )
    .fetch_one(&mut *conn)
    .await?)
}

/// `cron_latest`: the latest tick recorded for a schedule.
pub async fn cron_latest(conn: &mut MySqlConnection, name: &str) -> Result<Option<String>, Error> {
    Ok(sqlx::query_scalar(
        "/* mysqlq:cron_latest */ SELECT DATE_FORMAT(MAX(tick), '%Y-%m-%d %H:%i:%s') FROM mysqlq_cron WHERE name = ?",
    )
    .bind(name)
    .fetch_one(&mut *conn)
    .await?)
}

/// `cron_baseline`: records `tick` without a job (the first tick a new schedule sees).
pub async fn cron_baseline(
    conn: &mut MySqlConnection,
    name: &str,
    tick: &str,
) -> Result<(), Error> {
    match sqlx::query("/* mysqlq:cron_baseline */ INSERT INTO mysqlq_cron (name, tick, job_id) VALUES (?, ?, NULL)")
        .bind(name)
        .bind(tick)
        .execute(&mut *conn)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if sqlx_error_number(&e) == Some(1062) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// `cron_enqueue_tick`: in one transaction, records `(name, tick)` and enqueues the tick's job.
/// Returns `None` (and enqueues nothing) when the tick was already recorded.
///
/// The ledger row comes first: when several workers wake at the same tick, the ones that lose
/// wait at its key for the winner's commit, then get a duplicate key and roll back having
/// written nothing (a job row inserted first would be inserted and undone by every loser).
pub async fn cron_enqueue_tick(
    conn: &mut MySqlConnection,
    name: &str,
    tick: &str,
    job: &InsertRow,
) -> Result<Option<JobId>, Error> {
    let mut tx = conn.begin().await?;
    let ledger = sqlx::query(
        "/* mysqlq:cron_enqueue_tick */ INSERT INTO mysqlq_cron (name, tick, job_id) VALUES (?, ?, NULL)",
    )
    .bind(name)
    .bind(tick)
    .execute(&mut *tx)
    .await;
    match ledger {
        Ok(_) => {}
        Err(e) if sqlx_error_number(&e) == Some(1062) => {
            tx.rollback().await?;
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    }
    let id = match super::job_insert_one(&mut tx, job).await? {
        crate::Enqueued::Inserted(id)
        | crate::Enqueued::Duplicate(id)
        | crate::Enqueued::Replaced(id) => id,
    };
    sqlx::query(
        "/* mysqlq:cron_enqueue_tick */ UPDATE mysqlq_cron SET job_id = ? WHERE name = ? AND tick = ?",
    )
    .bind(id.0)
    .bind(name)
    .bind(tick)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Some(id))
}
