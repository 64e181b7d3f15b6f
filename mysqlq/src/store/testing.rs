//! The statements behind `mysqlq::testing`: the pending jobs a test looks at.

use sqlx::MySqlConnection;

use super::admin::{Job, job_from_row};
use crate::Error;

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
