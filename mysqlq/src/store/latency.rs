//! `mysqlq_run_minute`: run and pickup latency per minute, queue, kind, series and log-scale
//! bucket ([`crate::latency`]). Workers add their counts with their statistics flush
//! ([`super::stats_flush`]).

use sqlx::{AssertSqlSafe, MySqlConnection};

use super::sql::padded_len;
use crate::Error;
use crate::latency::{LatencyCell, LatencyDeltas};

/// Rows per statement of [`run_minute_add`].
pub const RUN_MINUTE_CHUNK: usize = 500;

/// `run_minute_add`: adds latency counts to the current minute's rows, in statements of at most
/// [`RUN_MINUTE_CHUNK`] rows, in the order of the primary key (two workers' flushes lock their
/// rows in the same order). Each statement's rows are padded to a power of two by repeating its
/// last row with `n = 0`, which adds nothing, so that the server sees a handful of statement
/// shapes. Run inside the flush's transaction: a failed flush adds nothing.
pub(super) async fn run_minute_add(
    conn: &mut MySqlConnection,
    deltas: &LatencyDeltas,
) -> Result<(), Error> {
    let rows: Vec<LatencyCell<'_>> = deltas.rows().collect();
    for chunk in rows.chunks(RUN_MINUTE_CHUNK) {
        let Some(last) = chunk.last() else {
            continue;
        };
        let n = padded_len(chunk.len());
        let mut sql = String::from(
            "/* mysqlq:run_minute_add */ INSERT INTO mysqlq_run_minute \
             (minute, queue_name, kind, series, bucket, n) VALUES ",
        );
        for i in 0..n {
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str("(DATE_FORMAT(UTC_TIMESTAMP(), '%Y-%m-%d %H:%i:00'), ?, ?, ?, ?, ?)");
        }
        sql.push_str(" ON DUPLICATE KEY UPDATE n = n + VALUES(n)");
        let mut q = sqlx::query(AssertSqlSafe(sql));
        let padding = std::iter::repeat_n(LatencyCell { n: 0, ..*last }, n - chunk.len());
        for c in chunk.iter().copied().chain(padding) {
            q = q
                .bind(c.queue)
                .bind(c.kind)
                .bind(c.series.as_str())
                .bind(c.bucket)
                .bind(c.n);
        }
        q.execute(&mut *conn).await?;
    }
    Ok(())
}
