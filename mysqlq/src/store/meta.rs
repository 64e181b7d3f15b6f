//! A running job's `meta` (progress, checkpoints): written token-guarded, so a handler whose
//! claim was lost cannot overwrite what the job's new owner writes.

use sqlx::MySqlConnection;

use super::guarded::Owned;
use crate::Error;

/// `job_set_meta`: replaces the job's `meta` (serialised JSON object, `None` for NULL) while
/// this claim owns the job (`status = 'processing'` under its token). `false` when the guard
/// failed: the claim was lost (lease expired, reaped, cancelled) or the job already ended.
pub async fn job_set_meta(
    conn: &mut MySqlConnection,
    job: &Owned,
    meta: Option<&str>,
) -> Result<bool, Error> {
    let done = sqlx::query(
        "/* mysqlq:job_set_meta */ UPDATE job_queue SET meta = ? \
         WHERE id = ? AND status = 'processing' AND claim_token = ?",
    )
    .bind(meta)
    .bind(job.id.0)
    .bind(&job.token)
    .execute(&mut *conn)
    .await?;
    // The connection reports rows matched (CLIENT_FOUND_ROWS), so an unchanged value counts.
    Ok(done.rows_affected() == 1)
}
