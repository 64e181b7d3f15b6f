//! Statements of the migration runner (`crate::migrate`).

use sqlx::{AssertSqlSafe, MySqlConnection};

use crate::Error;

/// `migration_lock`: takes the per-database migration lock, waiting up to 60 s. `true` when
/// taken.
pub async fn migration_lock(conn: &mut MySqlConnection) -> Result<bool, Error> {
    let got: Option<i64> = sqlx::query_scalar(
        "/* mysqlq:migrate */ SELECT GET_LOCK(CONCAT('mysqlq_migrate:', IFNULL(DATABASE(), '')), 60)",
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(got == Some(1))
}

/// `migration_unlock`: releases the migration lock.
pub async fn migration_unlock(conn: &mut MySqlConnection) -> Result<(), Error> {
    sqlx::query(
        "/* mysqlq:migrate */ SELECT RELEASE_LOCK(CONCAT('mysqlq_migrate:', IFNULL(DATABASE(), '')))",
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// `migrations_applied`: creates the ledger table if needed and lists the applied versions.
pub async fn migrations_applied(conn: &mut MySqlConnection) -> Result<Vec<u32>, Error> {
    sqlx::query(
        "/* mysqlq:migrate */ CREATE TABLE IF NOT EXISTS mysqlq_migrations ( \
           version INT UNSIGNED NOT NULL, \
           name VARCHAR(128) NOT NULL, \
           applied_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), \
           PRIMARY KEY (version) \
         ) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4",
    )
    .execute(&mut *conn)
    .await?;
    Ok(
        sqlx::query_scalar("/* mysqlq:migrate */ SELECT version FROM mysqlq_migrations")
            .fetch_all(&mut *conn)
            .await?,
    )
}

/// `migration_apply`: runs one statement of a migration file (DDL; the files are ours and
/// contain no values) and, after the last, records the migration. A statement refused with
/// "duplicate column name" (1060) or "duplicate key name" (1061) was applied by an earlier run
/// that stopped before recording the migration: MySQL has no `ADD COLUMN IF NOT EXISTS`, so this
/// is what makes a file of `ALTER TABLE … ADD` statements (one change each) idempotent.
pub(crate) async fn migration_apply(
    conn: &mut MySqlConnection,
    version: u32,
    name: &str,
    statements: Vec<Statement>,
) -> Result<(), Error> {
    for statement in statements {
        if !run_statement(conn, statement, &[1060, 1061]).await? {
            tracing::warn!(
                version,
                "an optional routine was not created (see `doctor`)"
            );
        }
    }
    sqlx::query("/* mysqlq:migrate */ INSERT INTO mysqlq_migrations (version, name) VALUES (?, ?)")
        .bind(version)
        .bind(name)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// `migration_retry_optional`: runs the optional statements of an applied migration again
/// (each creates a routine): "exists already" (1304) and the refusals of
/// [`is_routine_refused`] leave things as they are.
pub(crate) async fn migration_retry_optional(
    conn: &mut MySqlConnection,
    statements: Vec<Statement>,
) -> Result<(), Error> {
    for statement in statements {
        run_statement(conn, statement, &[1304]).await?;
    }
    Ok(())
}

/// Runs one statement of a migration; the server errors in `applied` mean "done before". An
/// optional statement the server refused ([`is_routine_refused`]) is `Ok(false)`.
async fn run_statement(
    conn: &mut MySqlConnection,
    statement: Statement,
    applied: &[u16],
) -> Result<bool, Error> {
    match sqlx::raw_sql(AssertSqlSafe(statement.sql))
        .execute(&mut *conn)
        .await
    {
        Ok(_) => Ok(true),
        Err(e) if super::sqlx_error_number(&e).is_some_and(|n| applied.contains(&n)) => Ok(true),
        Err(e) if statement.optional && is_routine_refused(&e) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// The server refused to create a routine for want of a privilege: a function that writes
/// with binary logging on needs `log_bin_trust_function_creators` (1418, 1419) or SUPER (1227).
fn is_routine_refused(e: &sqlx::Error) -> bool {
    matches!(super::sqlx_error_number(e), Some(1418 | 1419 | 1227))
}

/// `schema_version`: the newest applied migration, 0 when mysqlq's tables are missing.
pub async fn schema_version(conn: &mut MySqlConnection) -> Result<u32, Error> {
    let exists: i64 = sqlx::query_scalar(
        "/* mysqlq:schema_version */ SELECT COUNT(*) FROM information_schema.tables \
         WHERE table_schema = DATABASE() AND table_name = 'mysqlq_migrations'",
    )
    .fetch_one(&mut *conn)
    .await?;
    if exists == 0 {
        return Ok(0);
    }
    let v: Option<u32> = sqlx::query_scalar(
        "/* mysqlq:schema_version */ SELECT MAX(version) FROM mysqlq_migrations",
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(v.unwrap_or(0))
}

/// Which SQL entry points of migration 11 exist, and the settings that decide whether the
/// server lets a function that writes be created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqlRoutines {
    /// `mysqlq_enqueue` (procedure).
    pub procedure: bool,
    /// `mysqlq_enqueue_id` (function).
    pub function: bool,
    /// `log_bin` is on.
    pub log_bin: bool,
    /// `log_bin_trust_function_creators` is on.
    pub trust_function_creators: bool,
}

/// `sql_routines`: [`SqlRoutines`] of the current database.
pub async fn sql_routines(conn: &mut MySqlConnection) -> Result<SqlRoutines, Error> {
    let (procedure, function, log_bin, trust): (i64, i64, i64, i64) = sqlx::query_as(
        "/* mysqlq:sql_routines */ SELECT \
           CAST(IFNULL(SUM(ROUTINE_TYPE = 'PROCEDURE' AND ROUTINE_NAME = 'mysqlq_enqueue'), 0) AS SIGNED), \
           CAST(IFNULL(SUM(ROUTINE_TYPE = 'FUNCTION' AND ROUTINE_NAME = 'mysqlq_enqueue_id'), 0) AS SIGNED), \
           CAST(@@global.log_bin AS SIGNED), CAST(@@global.log_bin_trust_function_creators AS SIGNED) \
         FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE() \
           AND ROUTINE_NAME IN ('mysqlq_enqueue', 'mysqlq_enqueue_id')",
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(SqlRoutines {
        procedure: procedure > 0,
        function: function > 0,
        log_bin: log_bin != 0,
        trust_function_creators: trust != 0,
    })
}

/// One statement of a migration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Statement {
    /// The SQL, tagged `/* mysqlq:migrate */`.
    pub(crate) sql: String,
    /// Marked `-- mysqlq:optional`: a routine the server may refuse to create (a function
    /// that writes, with binary logging on and `log_bin_trust_function_creators` off). Its
    /// refusal does not fail the migration; every later `migrate` tries it again.
    pub(crate) optional: bool,
}
