//! The claim's plain-lane SELECT for `EXPLAIN` (doctor, tests): the same text as the claim's,
//! so the plan shown is the plan used; and `PlanRow`, one row of the plans the test suite
//! checks.

use sqlx::{AssertSqlSafe, MySqlConnection, Row};

use super::claim::claim_select_sql;
use crate::Error;

/// The claim SELECT of `job_claim` for `EXPLAIN` (doctor, tests): same text, so the plan shown
/// is the plan used.
pub async fn job_claim_explain(
    conn: &mut MySqlConnection,
    queue: &str,
) -> Result<Vec<ExplainRow>, Error> {
    crate::queue::validate_queue_name(queue)?;
    let sql = AssertSqlSafe(format!(
        "EXPLAIN {}",
        claim_select_sql(queue, "job_claim_explain")
    ));
    let rows = sqlx::query(sql)
        .bind(queue)
        .bind(queue)
        .bind(queue)
        .bind(queue)
        .bind(queue)
        .bind(queue)
        .bind(100u32)
        .bind(0u32)
        .fetch_all(&mut *conn)
        .await?;
    let mut out = Vec::new();
    for r in rows {
        out.push(ExplainRow {
            table: r.try_get::<Option<String>, _>("table").unwrap_or_default(),
            key: r.try_get::<Option<String>, _>("key").unwrap_or_default(),
            extra: r.try_get::<Option<String>, _>("Extra").unwrap_or_default(),
            select_type: r
                .try_get::<Option<String>, _>("select_type")
                .unwrap_or_default(),
        });
    }
    Ok(out)
}

/// One row of `EXPLAIN`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExplainRow {
    /// `select_type`.
    pub select_type: Option<String>,
    /// `table`.
    pub table: Option<String>,
    /// `key`: the index used.
    pub key: Option<String>,
    /// `Extra` (look for `Using filesort`).
    pub extra: Option<String>,
}

/// One row of an `EXPLAIN`, with the access type (the test suite's plan checks).
#[cfg(feature = "__internal-store")]
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PlanRow {
    /// `table` (an alias, `<derivedN>`, or none).
    pub table: Option<String>,
    /// `type`: `ALL` is a full scan.
    pub access: Option<String>,
    /// `key`: the index used.
    pub key: Option<String>,
    /// `rows`: the rows the server expects to examine.
    pub rows: Option<u64>,
    /// `Extra`.
    pub extra: Option<String>,
}

#[cfg(feature = "__internal-store")]
impl PlanRow {
    /// Reads one row of an `EXPLAIN`'s result.
    pub(crate) fn read(r: &sqlx::mysql::MySqlRow) -> Self {
        // An integer on MySQL; MariaDB sends the column as text.
        let rows = r
            .try_get::<Option<u64>, _>("rows")
            .ok()
            .flatten()
            .or_else(|| {
                r.try_get::<Option<i64>, _>("rows")
                    .ok()
                    .flatten()
                    .and_then(|v| u64::try_from(v).ok())
            })
            .or_else(|| {
                r.try_get::<Option<String>, _>("rows")
                    .ok()
                    .flatten()
                    .and_then(|v| v.parse().ok())
            });
        Self {
            table: r.try_get::<Option<String>, _>("table").unwrap_or_default(),
            access: r.try_get::<Option<String>, _>("type").unwrap_or_default(),
            key: r.try_get::<Option<String>, _>("key").unwrap_or_default(),
            rows,
            extra: r.try_get::<Option<String>, _>("Extra").unwrap_or_default(),
        }
    }
}
