//! Schema migrations from `mysqlq/migrations/`, applied in order, each once, under a named lock.
//! The files live inside the crate so that its published package has them.

use sqlx::{MySqlConnection, MySqlPool};

use crate::store::migrations::{self, Statement};
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
    Migration {
        version: 11,
        name: "0011_sql_enqueue",
        sql: include_str!("../migrations/0011_sql_enqueue.sql"),
    },
    Migration {
        version: 12,
        name: "0012_completion_receipts",
        sql: include_str!("../migrations/0012_completion_receipts.sql"),
    },
    Migration {
        version: 13,
        name: "0013_key_index_states",
        sql: include_str!("../migrations/0013_key_index_states.sql"),
    },
];

/// The schema version this build of mysqlq needs (the newest migration).
pub const SCHEMA_VERSION: u32 = 13;

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
    for m in MIGRATIONS.iter().filter(|m| m.version <= target) {
        let all = statements(&server.render_migration(m.sql));
        if done.contains(&m.version) {
            // Routines the server refused before (`-- mysqlq:optional`): tried again, so that
            // setting `log_bin_trust_function_creators` and migrating once more installs them.
            let optional = all.into_iter().filter(|s| s.optional).collect();
            migrations::migration_retry_optional(conn, optional).await?;
            continue;
        }
        migrations::migration_apply(conn, m.version, m.name, all).await?;
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

/// Splits a migration file into statements: `--` comment lines dropped, the delimiter (`;`,
/// or what a `DELIMITER x` line sets, as in the `mysql` client, for routine bodies) at a
/// line's end ends a statement; `-- mysqlq:optional` marks the next statement optional.
fn statements(sql: &str) -> Vec<Statement> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut delimiter = ";".to_owned();
    let mut optional = false;
    let mut push = |text: &str, optional: &mut bool| {
        out.push(Statement {
            sql: format!("/* mysqlq:migrate */ {text}"),
            optional: std::mem::take(optional),
        });
    };
    for line in sql.lines() {
        let trimmed = line.trim();
        if trimmed == "-- mysqlq:optional" {
            optional = true;
            continue;
        }
        if trimmed.is_empty() || trimmed.starts_with("--") {
            continue;
        }
        if current.is_empty()
            && let Some(d) = trimmed.strip_prefix("DELIMITER ")
        {
            d.trim().clone_into(&mut delimiter);
            continue;
        }
        current.push_str(line);
        current.push('\n');
        if trimmed.ends_with(delimiter.as_str()) {
            let stmt = current
                .trim()
                .trim_end_matches(delimiter.as_str())
                .trim_end();
            push(stmt, &mut optional);
            current.clear();
        }
    }
    if !current.trim().is_empty() {
        push(current.trim(), &mut optional);
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
        assert!(all[0].sql.contains("CREATE TABLE IF NOT EXISTS job_queue"));
        assert!(
            all.iter()
                .all(|s| !s.sql.trim_end().ends_with(';') && !s.optional)
        );
        assert_eq!(MIGRATIONS.last().map(|m| m.version), Some(SCHEMA_VERSION));
    }

    #[test]
    fn routines_split_on_their_delimiter_and_optional_marks_one_statement() {
        let sql = "DROP PROCEDURE IF EXISTS p;\n\nDELIMITER //\nCREATE PROCEDURE p()\nBEGIN\n  SET @a = 1;\n  SET @b = 2;\nEND//\nDELIMITER ;\n\n-- mysqlq:optional\nDELIMITER //\nCREATE FUNCTION f() RETURNS INT\nBEGIN\n  RETURN 1;\nEND//\nDELIMITER ;\nSELECT 1;\n";
        let all = statements(sql);
        let got: Vec<(&str, bool)> = all
            .iter()
            .map(|s| {
                (
                    s.sql.trim_start_matches("/* mysqlq:migrate */ "),
                    s.optional,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("DROP PROCEDURE IF EXISTS p", false),
                (
                    "CREATE PROCEDURE p()\nBEGIN\n  SET @a = 1;\n  SET @b = 2;\nEND",
                    false
                ),
                (
                    "CREATE FUNCTION f() RETURNS INT\nBEGIN\n  RETURN 1;\nEND",
                    true
                ),
                ("SELECT 1", false),
            ]
        );
        let eleven = statements(MIGRATIONS[10].sql);
        assert_eq!(
            eleven.iter().filter(|s| s.optional).count(),
            1,
            "only the function is optional"
        );
        assert!(
            eleven
                .iter()
                .any(|s| s.sql.contains("CREATE PROCEDURE mysqlq_enqueue("))
        );
    }
}
