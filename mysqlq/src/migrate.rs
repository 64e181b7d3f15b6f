//! Schema migrations from `mysqlq/migrations/`, applied in order, each once, under a named lock.
//! The files live inside the crate so that its published package has them.

use sqlx::{MySqlConnection, MySqlPool};

use crate::store::migrations;
use crate::store::server::ServerInfo;

use crate::Error;

/// One migration file.
struct Migration {
    version: u32,
    name: &'static str,
    sql: &'static str,
}

const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "0001_job_queue",
        sql: include_str!("../migrations/0001_job_queue.sql"),
    },
    Migration {
        version: 2,
        name: "0002_workers_and_stats",
        sql: include_str!("../migrations/0002_workers_and_stats.sql"),
    },
    Migration {
        version: 3,
        name: "0003_binary_keys_utc_defaults",
        sql: include_str!("../migrations/0003_binary_keys_utc_defaults.sql"),
    },
    Migration {
        version: 4,
        name: "0004_cancel_and_attempts",
        sql: include_str!("../migrations/0004_cancel_and_attempts.sql"),
    },
    Migration {
        version: 5,
        name: "0005_meta_hooks_dedupe",
        sql: include_str!("../migrations/0005_meta_hooks_dedupe.sql"),
    },
    Migration {
        version: 6,
        name: "0006_ordering_locks",
        sql: include_str!("../migrations/0006_ordering_locks.sql"),
    },
    Migration {
        version: 7,
        name: "0007_audit",
        sql: include_str!("../migrations/0007_audit.sql"),
    },
    Migration {
        version: 8,
        name: "0008_workflows",
        sql: include_str!("../migrations/0008_workflows.sql"),
    },
    Migration {
        version: 9,
        name: "0009_rate_limits",
        sql: include_str!("../migrations/0009_rate_limits.sql"),
    },
    Migration {
        version: 10,
        name: "0010_dashboard",
        sql: include_str!("../migrations/0010_dashboard.sql"),
    },
];

/// The schema version this build of mysqlq needs (the newest migration).
pub const SCHEMA_VERSION: u32 = 10;

/// Applies the migrations the database does not have yet. Idempotent and safe to run from
/// many processes at once (they serialise on `GET_LOCK`); never drops data.
pub async fn migrate(pool: &MySqlPool) -> Result<u32, Error> {
    migrate_to(pool, SCHEMA_VERSION).await
}

/// Applies the migrations up to `version` only: for tests that build a database of an older
/// schema and upgrade it. Not for applications, which need [`SCHEMA_VERSION`].
#[doc(hidden)]
pub async fn migrate_to(pool: &MySqlPool, version: u32) -> Result<u32, Error> {
    let mut conn = pool.acquire().await?;
    let server = crate::store::server::detect(&mut conn).await?;
    if !migrations::migration_lock(&mut conn).await? {
        return Err(Error::invalid(
            "migration lock",
            "another process held it for 60 s; is a migration stuck? look at SHOW PROCESSLIST",
        ));
    }
    let result = apply(&mut conn, &server, version.min(SCHEMA_VERSION)).await;
    let _ = migrations::migration_unlock(&mut conn).await;
    result
}

async fn apply(conn: &mut MySqlConnection, server: &ServerInfo, target: u32) -> Result<u32, Error> {
    let done = migrations::migrations_applied(conn).await?;
    if let Some(&newest) = done.iter().max()
        && newest > SCHEMA_VERSION
    {
        return Err(Error::SchemaVersion {
            found: newest,
            expected: SCHEMA_VERSION,
        });
    }
    let todo = MIGRATIONS
        .iter()
        .filter(|m| m.version <= target && !done.contains(&m.version));
    for m in todo {
        let sql = server.render_migration(m.sql);
        migrations::migration_apply(conn, m.version, m.name, statements(&sql)).await?;
        tracing::info!(version = m.version, name = m.name, "applied migration");
    }
    Ok(target)
}

/// The schema version of the database: the newest applied migration, 0 when there is none.
pub async fn schema_version(conn: &mut MySqlConnection) -> Result<u32, Error> {
    migrations::schema_version(conn).await
}

/// Errors unless the database's schema is exactly this build's.
pub async fn check_schema(conn: &mut MySqlConnection) -> Result<(), Error> {
    let found = schema_version(conn).await?;
    if found != SCHEMA_VERSION {
        return Err(Error::SchemaVersion {
            found,
            expected: SCHEMA_VERSION,
        });
    }
    Ok(())
}

/// Splits a migration file into statements: `--` comment lines dropped, `;` at a line's end
/// ends a statement.
fn statements(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in sql.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with("--") {
            continue;
        }
        current.push_str(line);
        current.push('\n');
        if trimmed.ends_with(';') {
            let stmt = current.trim().trim_end_matches(';').to_owned();
            out.push(format!("/* mysqlq:migrate */ {stmt}"));
            current.clear();
        }
    }
    if !current.trim().is_empty() {
        out.push(format!("/* mysqlq:migrate */ {}", current.trim()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_split_into_statements() {
        let all = statements(MIGRATIONS[0].sql);
        assert!(all.len() >= 4, "{all:?}");
        assert!(all[0].contains("CREATE TABLE IF NOT EXISTS job_queue"));
        assert!(all.iter().all(|s| !s.trim_end().ends_with(';')));
        assert_eq!(MIGRATIONS.last().map(|m| m.version), Some(SCHEMA_VERSION));
    }
}
