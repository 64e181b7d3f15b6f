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
pub async fn migration_apply(
    conn: &mut MySqlConnection,
    version: u32,
    name: &str,
    statements: Vec<String>,
) -> Result<(), Error> {
    for statement in statements {
        match sqlx::raw_sql(AssertSqlSafe(statement))
            .execute(&mut *conn)
            .await
        {
            Ok(_) => {}
            Err(e) if matches!(super::sqlx_error_number(&e), Some(1060 | 1061)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    sqlx::query("/* mysqlq:migrate */ INSERT INTO mysqlq_migrations (version, name) VALUES (?, ?)")
        .bind(version)
        .bind(name)
        .execute(&mut *conn)
        .await?;
    Ok(())
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
