//! The read behind `mysqlq::testing`.

use sqlx::MySqlConnection;

use crate::{Error, JobId};

/// `job_list_pending_of_kind`: pending jobs of one kind, oldest first (for [`crate::testing`]).
pub async fn job_list_pending_of_kind(
    conn: &mut MySqlConnection,
    kind: &str,
) -> Result<Vec<(JobId, String)>, Error> {
    let rows: Vec<(u64, String)> = sqlx::query_as(
        "/* mysqlq:job_list_pending_of_kind */ SELECT id, CAST(payload AS CHAR) FROM job_queue \
         WHERE status = 'pending' AND kind = ? ORDER BY id LIMIT 10000",
    )
    .bind(kind)
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(|(id, p)| (JobId(id), p)).collect())
}
