//! Connections to the server of `DATABASE_URL` and to the scratch database.

use std::time::Duration;

use mysqlq::ClusterUrl;
use sqlx::mysql::{MySqlDatabaseError, MySqlPoolOptions};
use sqlx::pool::PoolConnection;
use sqlx::{MySql, MySqlPool};

use crate::error::BenchError;

/// How long to wait for a connection before giving up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A pool of up to `max` connections to `url` (one host, or several: the first that takes
/// writes, see `mysqlq::cluster`). Messages never repeat the URL (it may hold a password).
pub(crate) async fn pool(url: &str, max: u32) -> Result<MySqlPool, BenchError> {
    let cluster = ClusterUrl::parse(url).map_err(|e| {
        BenchError::usage(
            format!("invalid database URL: {}", crate::error::chain(&e)),
            "write it as mysql://user:password@host:3306/database",
        )
    })?;
    // No PING before every acquire, like the worker's pool.
    let options = MySqlPoolOptions::new()
        .test_before_acquire(false)
        .acquire_timeout(CONNECT_TIMEOUT)
        .max_connections(max.max(1));
    cluster.connect(options).await.map_err(|e| {
        BenchError::new(
            format!(
                "cannot connect to the database server: {}",
                crate::error::chain(&e)
            ),
            "check that the server is running and reachable, and DATABASE_URL / --database-url",
        )
    })
}

/// A connection from `pool`.
pub(crate) async fn acquire(pool: &MySqlPool) -> Result<PoolConnection<MySql>, BenchError> {
    pool.acquire()
        .await
        .map_err(|e| BenchError::db("cannot get a database connection", &e))
}

/// The server's error number of `e`, if it is a server error.
pub(crate) fn error_number(e: &sqlx::Error) -> Option<u16> {
    match e {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<MySqlDatabaseError>()
            .map(MySqlDatabaseError::number),
        _ => None,
    }
}

/// A deadlock (1213) or lock wait timeout (1205): the baseline redoes the statement.
pub(crate) fn is_lock_error(e: &sqlx::Error) -> bool {
    matches!(error_number(e), Some(1205 | 1213))
}

/// `url` naming database `db` instead of its own.
pub(crate) fn with_database(url: &str, db: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("mysql", url));
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let query = tail.find(['?', '#']).map_or("", |i| &tail[i..]);
    format!("{scheme}://{authority}/{db}{query}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_url_replaces_the_database() {
        assert_eq!(
            with_database("mysql://u:p@h:3306/app?ssl-mode=disabled", "mysqlq_bench_1"),
            "mysql://u:p@h:3306/mysqlq_bench_1?ssl-mode=disabled"
        );
        assert_eq!(
            with_database("mysql://root@127.0.0.1", "mysqlq_bench_1"),
            "mysql://root@127.0.0.1/mysqlq_bench_1"
        );
    }
}
