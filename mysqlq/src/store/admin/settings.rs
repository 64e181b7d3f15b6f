//! Server settings and indexes the doctor checks.

use serde::Serialize;
use sqlx::{AssertSqlSafe, MySqlConnection, Row};

use crate::Error;
use crate::store::server::{ServerFlavor, ServerInfo};

/// Server settings that decide whether SKIP LOCKED claims are safe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerSettings {
    /// `@@global.log_bin`.
    pub log_bin: bool,
    /// `@@session.binlog_format` of a fresh connection (what mysqlq's sessions get).
    pub binlog_format: String,
    /// `@@global.read_only`.
    pub read_only: bool,
    /// `@@global.super_read_only` (MySQL only).
    pub super_read_only: Option<bool>,
    /// `@@global.innodb_read_only`.
    pub innodb_read_only: bool,
    /// The session's isolation level (`transaction_isolation` or `tx_isolation`).
    pub isolation: String,
    /// `@@global.time_zone`: what a new session (a DBA's client) gets. sqlx sessions, mysqlq's
    /// included, set `+00:00` themselves.
    pub time_zone: String,
    /// `@@global.system_time_zone`.
    pub system_time_zone: String,
    /// Offset of the global time zone from UTC now, in seconds: 0 when `NOW()` in a new session
    /// equals `UTC_TIMESTAMP()`. `None` when the zone is named and the time zone tables are not
    /// loaded.
    pub utc_offset_seconds: Option<i64>,
}

/// `server_settings`: binlog, read-only and time settings of the server (doctor).
pub async fn server_settings(
    conn: &mut MySqlConnection,
    info: &ServerInfo,
) -> Result<ServerSettings, Error> {
    let super_ro = match info.flavor {
        ServerFlavor::MySql => "CAST(@@global.super_read_only AS SIGNED)",
        ServerFlavor::MariaDb => "NULL",
    };
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:server_settings */ SELECT CAST(@@global.log_bin AS SIGNED) AS log_bin, \
           CAST(@@session.binlog_format AS CHAR) AS binlog_format, \
           CAST(@@global.read_only AS SIGNED) AS read_only, {super_ro} AS super_read_only, \
           CAST(@@global.innodb_read_only AS SIGNED) AS innodb_read_only, \
           CAST(@@session.{} AS CHAR) AS isolation, CAST(@@global.time_zone AS CHAR) AS time_zone, \
           CAST(@@global.system_time_zone AS CHAR) AS system_time_zone, \
           TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), \
             CONVERT_TZ(UTC_TIMESTAMP(), '+00:00', @@global.time_zone)) AS utc_offset",
        info.isolation_variable()
    ));
    let r = sqlx::query(sql).fetch_one(&mut *conn).await?;
    Ok(ServerSettings {
        log_bin: r.try_get::<i64, _>("log_bin")? != 0,
        binlog_format: r.try_get("binlog_format")?,
        read_only: r.try_get::<i64, _>("read_only")? != 0,
        super_read_only: r
            .try_get::<Option<i64>, _>("super_read_only")?
            .map(|v| v != 0),
        innodb_read_only: r.try_get::<i64, _>("innodb_read_only")? != 0,
        isolation: r.try_get("isolation")?,
        time_zone: r.try_get("time_zone")?,
        system_time_zone: r.try_get("system_time_zone")?,
        utc_offset_seconds: r.try_get("utc_offset")?,
    })
}

/// `table_indexes`: the index names of `table` in the current database.
pub async fn table_indexes(conn: &mut MySqlConnection, table: &str) -> Result<Vec<String>, Error> {
    let names: Vec<String> = sqlx::query_scalar(
        "/* mysqlq:table_indexes */ SELECT DISTINCT CAST(index_name AS CHAR) FROM information_schema.statistics \
         WHERE table_schema = DATABASE() AND table_name = ? ORDER BY 1",
    )
    .bind(table)
    .fetch_all(&mut *conn)
    .await?;
    Ok(names)
}
