//! The test harness every integration test uses.
//!
//! - [`TestDb`]: a fresh database per test on the server at `DATABASE_URL` (default
//!   `mysql://root@127.0.0.1:3306`), migrated, dropped afterwards. No server means the test
//!   **fails** with a message saying how to start one; nothing is skipped.
//! - [`PrivateServer`]: a throwaway `mariadbd`/`mysqld` from PATH in a temporary data directory
//!   on a free port, for tests that kill, pause or restart the database.

pub mod browser;
pub mod docs;
pub mod host;
pub mod http;
pub mod invariants;
pub mod jobs;
mod private_server;
mod procs;
pub mod redis;
pub mod torture;

pub use procs::{FAST_TIMINGS, Proc, wait_within};

pub use private_server::{GaleraCluster, PrivateServer, ReplicaPair, Replication, client, signal};

use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::{ConnectOptions, Connection, MySqlConnection, MySqlPool};

/// `true` for a deadlock (1213) or lock wait timeout (1205): the caller redoes its whole
/// transaction (docs/guarantees.md).
pub fn is_lock_error(e: &mysqlq::Error) -> bool {
    matches!(e.server_code(), Some(1213 | 1205))
}

/// The scale factor of a long-run knob: the integer in environment variable `var`
/// (`MYSQLQ_CLUSTER_SCALE=10`), at least 1; 1 when unset.
pub fn scale(var: &str) -> usize {
    scale_or(var, 1)
}

/// [`scale`] with another default.
pub fn scale_or(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
        .max(1)
}

/// The first column of the first row of `sql` on `on` (a pool or a connection), an integer (a
/// count, a sum, a 0/1 test); panics on error. [`TestDb::scalar`] on the test's pool.
pub async fn scalar_on<'e>(on: impl sqlx::Executor<'e, Database = sqlx::MySql>, sql: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(on)
        .await
        .unwrap_or_else(|e| panic!("`{sql}`: {e}"))
}

/// Runs `sql` (one statement or several separated by `;`, as plain text: no prepared
/// statement) on `on` (a pool, or a connection whose session settings it should see); panics on
/// error. [`TestDb::exec`] on the test's pool.
pub async fn exec_on<'e>(on: impl sqlx::Executor<'e, Database = sqlx::MySql>, sql: &str) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(on)
        .await
        .unwrap_or_else(|e| panic!("`{sql}`: {e}"));
}

/// A fresh random claim token shaped like a UUID (`xxxxxxxx-0000-4000-8000-xxxxxxxxxxxx`), for
/// claims made by hand and for a stranger's token that owns nothing.
pub fn token() -> String {
    format!(
        "{:08x}-0000-4000-8000-{:012x}",
        fastrand::u32(..),
        fastrand::u64(..) & 0xffff_ffff_ffff
    )
}

/// The server URL tests use: `DATABASE_URL`, else `mysql://root@127.0.0.1:3306`.
pub fn server_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".to_owned())
}

/// A database of its own for one test, dropped when the value is dropped.
pub struct TestDb {
    /// A pool on the test's database.
    pub pool: MySqlPool,
    /// The database name.
    pub name: String,
    /// Connect options for the test's database.
    pub options: MySqlConnectOptions,
    server: MySqlConnectOptions,
    base_url: String,
}

impl TestDb {
    /// Creates and migrates a fresh database on the shared server.
    pub async fn new() -> Self {
        Self::on(&server_url()).await
    }

    /// Creates and migrates a fresh database on the server at `url`.
    pub async fn on(url: &str) -> Self {
        let server: MySqlConnectOptions = url
            .parse()
            .unwrap_or_else(|e| panic!("bad DATABASE_URL `{url}`: {e}"));

        let mut admin = connect_or_explain(&server).await;
        let prefix = db_prefix();
        static SWEPT: std::sync::Once = std::sync::Once::new();
        if !SWEPT.is_completed() {
            sweep_stale_databases(&mut admin, &prefix, STALE_AFTER_SECONDS).await;
            SWEPT.call_once(|| {});
        }
        let name = format!("{prefix}_{}_{:08x}", std::process::id(), fastrand::u32(..));
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE `{name}`")))
            .execute(&mut admin)
            .await
            .expect("create the test database");
        let _ = admin.close().await;
        let options = server.clone().database(&name);
        let pool = MySqlPoolOptions::new()
            .max_connections(40)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options.clone())
            .await
            .expect("connect to the test database");
        mysqlq::migrate(&pool)
            .await
            .expect("migrate the test database");
        sqlx::query(
            "CREATE TABLE test_runs (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, \
             job_id BIGINT UNSIGNED NOT NULL, attempt INT UNSIGNED NOT NULL, pid INT UNSIGNED NOT NULL, \
             tag VARCHAR(64) NOT NULL, event VARCHAR(16) NOT NULL, claim_token CHAR(36) NOT NULL, \
             at DATETIME(6) NOT NULL, KEY (job_id))",
        )
        .execute(&pool)
        .await
        .expect("create test_runs");
        Self {
            pool,
            name,
            options,
            server,
            base_url: url.to_owned(),
        }
    }

    /// The URL of this test's database (for child processes).
    pub fn url(&self) -> String {
        let base = self.base_url.as_str();
        let base = base.split('?').next().unwrap_or(base).trim_end_matches('/');
        // Strip any database already in the URL: mysql://user@host:port[/db]
        let after_scheme = base.find("//").map(|i| i + 2).unwrap_or(0);
        let root = match base[after_scheme..].find('/') {
            Some(i) => &base[..after_scheme + i],
            None => base,
        };
        format!("{root}/{}", self.name)
    }

    /// A new single connection to the test's database.
    pub async fn connect(&self) -> MySqlConnection {
        self.options
            .connect()
            .await
            .expect("connect to the test database")
    }

    /// A worker builder for this database with test-friendly timings (short polls, lease
    /// 5 s, maintenance every 200 ms).
    pub fn worker(&self) -> mysqlq::WorkerBuilder {
        mysqlq::Worker::builder(self.pool.clone())
            .queues(["test"])
            .poll_interval(Duration::from_millis(5), Duration::from_millis(100))
            .lease(Duration::from_secs(5))
            .maintenance(Duration::from_millis(200), Duration::from_secs(2))
            .stats_interval(Duration::from_millis(200))
    }

    /// Creates `completion_log` and a trigger that adds a row to it for every transition of a
    /// job to `completed` (with the claim token that completed it): a job completed twice shows
    /// two rows.
    pub async fn log_completions(&self) {
        for sql in [
            "CREATE TABLE completion_log (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, job_id BIGINT UNSIGNED NOT NULL, \
             claim_token CHAR(36) NULL, at DATETIME(6) NOT NULL, KEY (job_id))",
            "CREATE TRIGGER job_completed AFTER UPDATE ON job_queue FOR EACH ROW \
             INSERT INTO completion_log (job_id, claim_token, at) \
             SELECT NEW.id, OLD.claim_token, UTC_TIMESTAMP(6) FROM DUAL \
             WHERE OLD.status <> 'completed' AND NEW.status = 'completed'",
        ] {
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(&self.pool)
                .await
                .expect("create the completion log");
        }
    }

    /// The first column of the first row of `sql`, an integer (a count, a sum, a 0/1 test).
    pub async fn scalar(&self, sql: &str) -> i64 {
        scalar_on(&self.pool, sql).await
    }

    /// Runs `sql` (one statement or several separated by `;`) for its effect; panics on error.
    pub async fn exec(&self, sql: &str) {
        exec_on(&self.pool, sql).await;
    }

    /// The status of job `id`, `None` when there is no such row.
    pub async fn status(&self, id: u64) -> Option<String> {
        sqlx::query_scalar("SELECT CAST(status AS CHAR) FROM job_queue WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .unwrap_or_else(|e| panic!("the status of job {id}: {e}"))
    }

    /// Waits (polling the database every 20 ms, at most `limit`) until `sql` returns a
    /// non-zero count; panics with `what` on time-out.
    pub async fn wait_for(&self, what: &str, sql: &str, limit: Duration) {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
                .fetch_one(&self.pool)
                .await
                .unwrap_or_else(|e| panic!("{what}: `{sql}` failed: {e}"));
            if n > 0 {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {what} (`{sql}`)"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Counts jobs in `status`.
    pub async fn count(&self, status: &str) -> i64 {
        sqlx::query_scalar("SELECT COUNT(*) FROM job_queue WHERE status = ?")
            .bind(status)
            .fetch_one(&self.pool)
            .await
            .expect("count jobs")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let server = self.server.clone();
        let name = self.name.clone();
        // The pool's connections belong to the test's runtime, which is blocked while we wait
        // here: never touch them. A fresh connection on a runtime of our own drops the database.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            if let Ok(rt) = rt {
                rt.block_on(async move {
                    if let Ok(mut c) = server.connect().await {
                        // A test that panicked may leave a worker holding locks: do not hang.
                        let _ = sqlx::query("SET SESSION lock_wait_timeout = 10")
                            .execute(&mut c)
                            .await;
                        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                            "DROP DATABASE IF EXISTS `{name}`"
                        )))
                        .execute(&mut c)
                        .await;
                    }
                });
            }
        })
        .join();
    }
}

/// The prefix of test database names: `MYSQLQ_TEST_DB_PREFIX`, else `mysqlq_t`. Names are
/// `<prefix>_<pid>_<random>`: unique per test, and per run, on a shared server.
pub fn db_prefix() -> String {
    std::env::var("MYSQLQ_TEST_DB_PREFIX")
        .ok()
        .filter(|p| {
            !p.is_empty()
                && p.len() <= 32
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        })
        .unwrap_or_else(|| "mysqlq_t".to_owned())
}

/// Databases of this prefix older than this, whose creating process is gone, were left behind
/// by a crashed run.
const STALE_AFTER_SECONDS: i64 = 3600;

/// Drops test databases left behind by crashed runs: named `<prefix>_<pid>_…`, the process `pid`
/// no longer exists on this machine, and their oldest table is at least `stale_after_seconds`
/// old (an hour for the harness, so that a live run on another machine sharing the server,
/// whose pid means nothing here, is never touched). A database without tables is kept.
pub async fn sweep_stale_databases(
    admin: &mut MySqlConnection,
    prefix: &str,
    stale_after_seconds: i64,
) {
    if !std::path::Path::new("/proc/self").exists() {
        return;
    }
    let pattern = format!("{prefix}\\_%");
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(schema_name AS CHAR) FROM information_schema.schemata WHERE schema_name LIKE ?",
    )
    .bind(pattern)
    .fetch_all(&mut *admin)
    .await
    .unwrap_or_default();
    for name in names {
        let Some(pid) = name
            .strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix('_'))
            .and_then(|rest| rest.split('_').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() || std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let age: Option<i64> = sqlx::query_scalar(
            "SELECT TIMESTAMPDIFF(SECOND, MIN(create_time), NOW()) FROM information_schema.tables \
             WHERE table_schema = ?",
        )
        .bind(&name)
        .fetch_one(&mut *admin)
        .await
        .ok()
        .flatten();
        if age.is_some_and(|a| a >= stale_after_seconds) {
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS `{name}`"
            )))
            .execute(&mut *admin)
            .await;
        }
    }
}

async fn connect_or_explain(options: &MySqlConnectOptions) -> MySqlConnection {
    match options.connect().await {
        Ok(c) => c,
        Err(e) => panic!(
            "cannot reach the MySQL/MariaDB server at {} ({e}). Integration tests need a real server: \
             start one (e.g. `start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd`) \
             or set DATABASE_URL. Tests never skip.",
            server_url()
        ),
    }
}

/// Waits for the first worker event `pick` accepts; panics with `what` after `limit`.
pub async fn wait_event(
    rx: &mut tokio::sync::broadcast::Receiver<mysqlq::WorkerEvent>,
    what: &str,
    limit: Duration,
    pick: impl Fn(&mysqlq::WorkerEvent) -> bool,
) -> mysqlq::WorkerEvent {
    use tokio::sync::broadcast::error::RecvError;
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Ok(e)) if pick(&e) => return e,
            Ok(Ok(_) | Err(RecvError::Lagged(_))) => {}
            Ok(Err(e)) => panic!("{what}: event channel closed: {e}"),
            Err(_) => panic!("timed out waiting for {what}"),
        }
    }
}
