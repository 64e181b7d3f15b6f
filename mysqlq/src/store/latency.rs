//! `mysqlq_run_minute`: run and pickup latency per minute, queue, kind, series and log-scale
//! bucket ([`crate::latency`]). Workers add their counts with their statistics flush
//! ([`super::stats_flush`]); the queues page reads the sums of a window.

use std::time::Duration;

use sqlx::{AssertSqlSafe, MySqlConnection, Row};

use super::sql::padded_len;
use crate::Error;
use crate::latency::{LatencyCell, LatencyDeltas, Series};

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

/// One row of [`run_minute_read`]: the count of one bucket over the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunMinuteRow {
    /// The queue.
    pub queue: String,
    /// The job kind (the workers' metric label: `(unregistered)` for kinds they do not know).
    pub kind: String,
    /// What was measured.
    pub series: Series,
    /// The bucket ([`crate::latency::bucket_of`]).
    pub bucket: u8,
    /// How many, summed over the window's minutes and the workers.
    pub n: u64,
}

/// `run_minute_read`: the counts of the minutes that started within `window` of now, summed per
/// queue, kind, series and bucket (a range of the primary key on `minute`). Rows of a series
/// this build does not know are left out.
pub async fn run_minute_read(
    conn: &mut MySqlConnection,
    window: Duration,
) -> Result<Vec<RunMinuteRow>, Error> {
    let rows = sqlx::query(
        "/* mysqlq:run_minute_read */ SELECT CAST(queue_name AS CHAR) AS queue_name, \
           CAST(kind AS CHAR) AS kind, CAST(series AS CHAR) AS series, bucket, \
           CAST(SUM(n) AS SIGNED) AS n \
         FROM mysqlq_run_minute WHERE minute > UTC_TIMESTAMP() - INTERVAL ? SECOND \
         GROUP BY queue_name, kind, series, bucket",
    )
    .bind(i64::try_from(window.as_secs().max(1)).unwrap_or(i64::MAX))
    .fetch_all(&mut *conn)
    .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let Some(series) = Series::parse(&r.try_get::<String, _>("series")?) else {
            continue;
        };
        out.push(RunMinuteRow {
            queue: r.try_get("queue_name")?,
            kind: r.try_get("kind")?,
            series,
            bucket: r.try_get("bucket")?,
            n: u64::try_from(r.try_get::<i64, _>("n")?).unwrap_or(0),
        });
    }
    Ok(out)
}
