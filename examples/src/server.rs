//! Where the examples' database comes from.
//!
//! [`Server::locate`] picks, in order:
//! 1. `DATABASE_URL`, if set (a server URL, with or without a database name);
//! 2. `mysql://root@127.0.0.1:3306`, if something answers there;
//! 3. a private, throwaway `mariadbd` (or `mysqld`) found on `PATH` or in `/usr/sbin`, with its
//!    own data directory in a temp dir and a free port. It is stopped and its directory deleted
//!    when the [`Server`] is dropped. Setting `MYSQLQ_EXAMPLES_PRIVATE_SERVER=1` skips 1 and 2.
//!
//! The URL may list several hosts (`mysql://u:p@h1:3306,h2:3306`): the examples then run on
//! the first one that takes writes, and follow a failover (`mysqlq::cluster`).
//!
//! Examples never touch the database named in the URL: [`fresh_database`] drops and recreates a
//! database of the example's own name next to it, then applies mysqlq's migrations.

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use mysqlq::ClusterUrl;
use mysqlq_testkit::StartError;
use sqlx::MySqlPool;
use sqlx::mysql::MySqlPoolOptions;

/// The private server of [`Server::locate`]: `mysqlq-testkit`'s, the one the tests use too.
pub use mysqlq_testkit::PrivateServer;

/// The server the examples use when `DATABASE_URL` is not set.
pub const LOCAL_URL: &str = "mysql://root@127.0.0.1:3306";

/// `DATABASE_URL`, when it is set and not blank.
pub fn configured_url() -> Option<String> {
    std::env::var("DATABASE_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
}

/// `DATABASE_URL`, else [`LOCAL_URL`]: the server the examples' tests run their rounds on.
pub fn url_or_local() -> String {
    configured_url().unwrap_or_else(|| LOCAL_URL.to_owned())
}

/// A database server for an example: its URL, and the private server process if one was started.
#[derive(Debug)]
pub struct Server {
    url: String,
    private: Option<PrivateServer>,
}

impl Server {
    /// `DATABASE_URL`, else `127.0.0.1:3306` if it answers, else a private server started now.
    /// `MYSQLQ_EXAMPLES_PRIVATE_SERVER=1` forces the private server.
    pub async fn locate() -> Result<Self, String> {
        let forced = std::env::var("MYSQLQ_EXAMPLES_PRIVATE_SERVER").is_ok_and(|v| v == "1");
        if forced {
            return Self::start_private().await;
        }
        if let Some(url) = configured_url() {
            return Ok(Self { url, private: None });
        }
        let local: SocketAddr = ([127, 0, 0, 1], 3306).into();
        let answers = tokio::task::spawn_blocking(move || {
            TcpStream::connect_timeout(&local, Duration::from_secs(1)).is_ok()
        })
        .await
        .unwrap_or(false);
        if answers {
            return Ok(Self {
                url: LOCAL_URL.to_owned(),
                private: None,
            });
        }
        Self::start_private().await
    }

    async fn start_private() -> Result<Self, String> {
        let private = tokio::task::spawn_blocking(PrivateServer::try_start)
            .await
            .map_err(|e| format!("starting the private server panicked: {e}"))?
            .map_err(|e| match e {
                StartError::NoServerBinary => "no DATABASE_URL, nothing on 127.0.0.1:3306, and no \
                     mariadbd or mysqld on PATH or in /usr/sbin: set DATABASE_URL or install \
                     mariadb-server"
                    .to_owned(),
                e => error_chain(&e),
            })?;
        Ok(Self {
            url: private.url(),
            private: Some(private),
        })
    }

    /// A server at `url` (e.g. for tests that must not start one).
    pub fn at(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            private: None,
        }
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The private server, if this process started one.
    pub fn private(&self) -> Option<&PrivateServer> {
        self.private.as_ref()
    }

    /// A one-line description for the example's output (password hidden).
    pub fn describe(&self) -> String {
        match &self.private {
            Some(p) => format!(
                "private throwaway server {} at {} (data in {}, removed at exit)",
                p.binary().display(),
                redact(&self.url),
                p.dir().display()
            ),
            None => format!("server at {}", redact(&self.url)),
        }
    }
}

impl Drop for Server {
    /// Stops the private server (if any) and deletes its directory and the template it was
    /// copied from: an example starts one server per run.
    fn drop(&mut self) {
        if self.private.take().is_some() {
            mysqlq_testkit::remove_template();
        }
    }
}

/// `url` without its database name (and with its query string kept): the server itself.
pub fn server_part(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => (&url[..i + 3], &url[i + 3..]),
        None => ("", url),
    };
    let query = rest.find('?').map_or("", |i| &rest[i..]);
    let before_query = rest.find('?').map_or(rest, |i| &rest[..i]);
    let authority = before_query
        .find('/')
        .map_or(before_query, |i| &before_query[..i]);
    format!("{scheme}{authority}{query}")
}

/// `url` with the password (if any) replaced by `***`.
pub fn redact(url: &str) -> String {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let authority_end = url[start..]
        .find(['/', '?'])
        .map_or(url.len(), |i| start + i);
    let Some(at) = url[start..authority_end].rfind('@').map(|i| start + i) else {
        return url.to_owned();
    };
    match url[start..at].find(':').map(|i| start + i) {
        Some(colon) => format!("{}:***{}", &url[..colon], &url[at..]),
        None => url.to_owned(),
    }
}

/// A database name of its own for one run of `example`: `mysqlq_example_<example>_<pid>_<random>`,
/// so that two runs on one server (a developer and CI, two checkouts) never share one. The run
/// drops it when it ends ([`drop_database`]).
pub fn unique_database(example: &str) -> String {
    format!(
        "mysqlq_example_{example}_{}_{:08x}",
        std::process::id(),
        fastrand::u32(..)
    )
}

/// The server of `url` (one host, or several: `mysql://u:p@h1:3306,h2:3306`, see
/// `mysqlq::cluster`), without its database.
///
/// # Errors
///
/// When the URL does not parse.
pub fn server_url(url: &str) -> Result<ClusterUrl, String> {
    ClusterUrl::parse(&server_part(url))
        .map_err(|e| format!("bad database URL `{}`: {e}", redact(url)))
}

/// Drops database `name` on the server of `url` (the end of a run).
///
/// # Errors
///
/// When the server cannot be reached or refuses the `DROP DATABASE`.
pub async fn drop_database(url: &str, name: &str) -> Result<(), String> {
    let admin_url = server_part(url);
    let server = server_url(url)?;
    let admin = connect_with_retry(&server, Duration::from_secs(10)).await?;
    let sql = format!("DROP DATABASE IF EXISTS `{name}`");
    let result = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
        .execute(&admin)
        .await
        .map(|_| ())
        .map_err(|e| format!("`{sql}` failed on {}: {e}", redact(&admin_url)));
    admin.close().await;
    result
}

/// Drops and recreates database `name` on the server of `url`, applies mysqlq's migrations, and
/// returns a pool of at most `max_connections` on it. `name` must be `[a-z0-9_]+`.
pub async fn fresh_database(
    url: &str,
    name: &str,
    max_connections: u32,
) -> Result<MySqlPool, String> {
    let pool = recreate_database(url, name, max_connections).await?;
    mysqlq::migrate(&pool)
        .await
        .map_err(|e| format!("mysqlq::migrate on `{name}` failed: {}", error_chain(&e)))?;
    Ok(pool)
}

/// Creates the empty database `name` (dropping one of that name first) on the server of `url`
/// and returns a pool of up to 10 connections on it; applying migrations is left to the caller.
/// `name` must be `[a-z0-9_]+`.
pub async fn create_database(url: &str, name: &str) -> Result<MySqlPool, String> {
    recreate_database(url, name, 10).await
}

async fn recreate_database(
    url: &str,
    name: &str,
    max_connections: u32,
) -> Result<MySqlPool, String> {
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(format!(
            "database name `{name}` must be made of a-z, 0-9 and _"
        ));
    }
    let admin_url = server_part(url);
    let server = server_url(url)?;
    let admin = connect_with_retry(&server, Duration::from_secs(30)).await?;
    for sql in [
        format!("DROP DATABASE IF EXISTS `{name}`"),
        format!("CREATE DATABASE `{name}` CHARACTER SET utf8mb4"),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
            .execute(&admin)
            .await
            .map_err(|e| format!("`{sql}` failed on {}: {e}", redact(&admin_url)))?;
    }
    admin.close().await;
    let pool = server
        .with_database(name)
        .connect(
            MySqlPoolOptions::new()
                .max_connections(max_connections)
                .acquire_timeout(Duration::from_secs(30)),
        )
        .await
        .map_err(|e| format!("cannot connect to database `{name}`: {e}"))?;
    Ok(pool)
}

/// Connects a one-connection pool, retrying for up to `patience` (a server that was just started
/// may accept TCP before it accepts logins). The error says how to get a server.
async fn connect_with_retry(server: &ClusterUrl, patience: Duration) -> Result<MySqlPool, String> {
    let deadline = Instant::now() + patience;
    loop {
        match server
            .connect(
                MySqlPoolOptions::new()
                    .max_connections(1)
                    .acquire_timeout(Duration::from_secs(5)),
            )
            .await
        {
            Ok(pool) => return Ok(pool),
            Err(e) if Instant::now() >= deadline => {
                return Err(format!(
                    "cannot reach the MySQL/MariaDB server ({e}). Set DATABASE_URL, start a server on \
                     127.0.0.1:3306, or install mariadb-server so that a private one can be started"
                ));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

pub use mysqlq::error_chain;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_part_strips_the_database() {
        assert_eq!(server_part("mysql://root@h:3306"), "mysql://root@h:3306");
        assert_eq!(server_part("mysql://root@h:3306/"), "mysql://root@h:3306");
        assert_eq!(server_part("mysql://u:p@h:3306/app"), "mysql://u:p@h:3306");
        assert_eq!(
            server_part("mysql://u@h/app?ssl-mode=disabled"),
            "mysql://u@h?ssl-mode=disabled"
        );
    }

    #[test]
    fn redact_hides_the_password() {
        assert_eq!(
            redact("mysql://u:secret@h:3306/db"),
            "mysql://u:***@h:3306/db"
        );
        assert_eq!(redact("mysql://root@h:3306"), "mysql://root@h:3306");
        assert_eq!(redact("mysql://h:3306/db"), "mysql://h:3306/db");
    }
}
