//! Statements of the web dashboard (`mysqlq-cli dashboard`, `mysqlq_cli::dashboard::router`).
//!
//! The dashboard also reuses [`super::admin`]: `stats_queues` (overview, queues page),
//! `job_get` (a job's page), `job_failed_list`, `job_retry_failed`, `job_discard_failed` (failed
//! page) and [`super::queue_set_paused`] (pause / resume); its job list is the search
//! ([`super::search`]).
//!
//! | statement | index |
//! |---|---|
//! | [`job_get`](super::admin::job_get) | `PRIMARY` |
//! | [`dashboard_chart`] | `mysqlq_stats_minute` primary key range on `minute` |
//!
//! [`dashboard_explain`] EXPLAINs them with the text they run with.

use serde::Serialize;
#[cfg(feature = "__internal-store")]
use sqlx::AssertSqlSafe;
use sqlx::{MySqlConnection, Row};

#[cfg(feature = "__internal-store")]
use super::admin::PlanRow;
use crate::Error;

const CHART_SQL: &str = "/* mysqlq:dashboard_chart */ \
    SELECT CAST(TIMESTAMPDIFF(MINUTE, minute, UTC_TIMESTAMP()) AS SIGNED) AS ago, \
      CAST(SUM(completions) AS SIGNED) AS completions, CAST(SUM(failures) AS SIGNED) AS failures \
    FROM mysqlq_stats_minute WHERE minute > UTC_TIMESTAMP() - INTERVAL 60 MINUTE \
    GROUP BY minute ORDER BY minute";

/// Completions and failures of one minute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MinutePoint {
    /// Whole minutes before now (0 = the current minute).
    pub minutes_ago: u32,
    /// Jobs completed in that minute (all workers).
    pub completions: u64,
    /// Jobs failed for good in that minute.
    pub failures: u64,
}

/// `dashboard_chart`: completions and failures per minute over the last hour, oldest first
/// (minutes without a row are absent), from `mysqlq_stats_minute`.
pub async fn dashboard_chart(conn: &mut MySqlConnection) -> Result<Vec<MinutePoint>, Error> {
    let rows = sqlx::query(CHART_SQL).fetch_all(&mut *conn).await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let ago: i64 = r.try_get("ago")?;
        let completions: Option<i64> = r.try_get("completions")?;
        let failures: Option<i64> = r.try_get("failures")?;
        out.push(MinutePoint {
            minutes_ago: u32::try_from(ago.clamp(0, 59)).unwrap_or(0),
            completions: u64::try_from(completions.unwrap_or(0)).unwrap_or(0),
            failures: u64::try_from(failures.unwrap_or(0)).unwrap_or(0),
        });
    }
    Ok(out)
}

/// `EXPLAIN`s every statement of this module (each `job_page` variant) with the text and binds
/// it runs with. Returns `(name, plan)` pairs.
#[cfg(feature = "__internal-store")]
pub async fn dashboard_explain(
    conn: &mut MySqlConnection,
) -> Result<Vec<(String, Vec<PlanRow>)>, Error> {
    let mut out = Vec::new();
    let q = sqlx::query(AssertSqlSafe(format!(
        "EXPLAIN {}",
        super::admin::JOB_GET_SQL
    )))
    .bind(1u64);
    out.push(("job_get".to_owned(), plan(conn, q).await?));
    let q = sqlx::query(AssertSqlSafe(format!("EXPLAIN {CHART_SQL}")));
    out.push(("dashboard_chart".to_owned(), plan(conn, q).await?));
    Ok(out)
}

#[cfg(feature = "__internal-store")]
async fn plan(
    conn: &mut MySqlConnection,
    q: sqlx::query::Query<'_, sqlx::MySql, sqlx::mysql::MySqlArguments>,
) -> Result<Vec<PlanRow>, Error> {
    let rows = q.fetch_all(&mut *conn).await?;
    Ok(rows.iter().map(PlanRow::read).collect())
}
