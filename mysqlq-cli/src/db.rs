//! Connecting, and keeping passwords out of every message.

use std::time::Duration;

use mysqlq::ClusterUrl;
use sqlx::mysql::MySqlPoolOptions;
use sqlx::pool::PoolConnection;
use sqlx::{Connection, MySql, MySqlConnection, MySqlPool};

use crate::error::{CliError, chain};

/// How long to wait for a connection before giving up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The database URL, with a way to print it safely.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    url: String,
    password: Option<String>,
}

impl Target {
    /// Reads `--database-url` / `DATABASE_URL`.
    pub(crate) fn new(url: Option<&str>) -> Result<Self, CliError> {
        let Some(url) = url.map(str::trim).filter(|u| !u.is_empty()) else {
            return Err(CliError::usage(
                "no database URL",
                "set DATABASE_URL or pass --database-url mysql://user:password@host:3306/database",
            ));
        };
        Ok(Self {
            url: url.to_owned(),
            password: password_of(url),
        })
    }

    /// The URL with its password replaced by `***`.
    pub(crate) fn redacted(&self) -> String {
        redact_url(&self.url)
    }

    /// `text` with the URL and password replaced by their redacted forms.
    pub(crate) fn scrub(&self, text: &str) -> String {
        scrub(text, &self.url, self.password.as_deref())
    }

    /// The URL's hosts: one, or several (`mysql://u:p@host1:3306,host2:3306/db`, see
    /// `mysqlq::cluster`).
    pub(crate) fn cluster(&self) -> Result<ClusterUrl, CliError> {
        let scheme = self
            .url
            .split_once("://")
            .map(|(s, _)| s.to_ascii_lowercase());
        if !matches!(scheme.as_deref(), Some("mysql" | "mariadb")) {
            return Err(CliError::usage(
                format!(
                    "invalid database URL `{}`: not a mysql:// URL",
                    self.redacted()
                ),
                "write it as mysql://user:password@host:3306/database",
            ));
        }
        let cluster = ClusterUrl::parse(&self.url).map_err(|e| {
            let why = match &e {
                mysqlq::Error::Invalid { reason, .. } => reason.clone(),
                other => chain(other),
            };
            CliError::usage(
                format!("invalid database URL `{}`: {why}", self.redacted()),
                "write it as mysql://user:password@host:3306/database (several hosts: \
                 mysql://user:password@host1:3306,host2:3306/database)",
            )
        })?;
        if cluster.database().is_none() {
            return Err(CliError::usage(
                format!("the database URL `{}` names no database", self.redacted()),
                "append the database, e.g. mysql://user:password@host:3306/app",
            ));
        }
        Ok(cluster)
    }

    /// A pool of up to `max` connections; one is opened now so a bad URL or a server that is
    /// down is reported at once. With several hosts, the pool uses the first one that is up and
    /// takes writes and moves on when it stops being so.
    pub(crate) async fn pool(&self, max: u32) -> Result<MySqlPool, CliError> {
        let cluster = self.cluster()?;
        let options = MySqlPoolOptions::new()
            .max_connections(max.max(1))
            .min_connections(0)
            // No PING before every acquire: a dead connection fails its statement, which the
            // worker retries on a fresh one; the ping would cost a round trip per claim.
            .test_before_acquire(false)
            .acquire_timeout(CONNECT_TIMEOUT);
        if cluster.is_multi_host() {
            return match tokio::time::timeout(CONNECT_TIMEOUT * 2, cluster.connect(options)).await {
                Ok(Ok(pool)) => Ok(pool),
                Ok(Err(mysqlq::Error::Database(e))) => Err(self.connect_error(&e)),
                Ok(Err(e)) => Err(CliError::new(
                    format!(
                        "cannot connect to {}: {}",
                        self.redacted(),
                        self.scrub(&chain(&e))
                    ),
                    "check that a host of DATABASE_URL is up and writable (read_only=OFF; on \
                     Galera Synced, in the primary component)",
                )),
                Err(_) => Err(self.no_answer()),
            };
        }
        let opts = cluster.connect_options().remove(0);
        // One direct connection first: the pool retries I/O errors until its timeout and then
        // reports only "timed out", while this names the real cause (refused, unknown host, …).
        let first =
            tokio::time::timeout(CONNECT_TIMEOUT, MySqlConnection::connect_with(&opts)).await;
        match first {
            Ok(Ok(conn)) => {
                let _ = conn.close().await;
            }
            Ok(Err(e)) => return Err(self.connect_error(&e)),
            Err(_) => return Err(self.no_answer()),
        }
        options
            .connect_with(opts)
            .await
            .map_err(|e| self.connect_error(&e))
    }

    fn no_answer(&self) -> CliError {
        CliError::new(
            format!(
                "cannot connect to {}: no answer within {}s",
                self.redacted(),
                CONNECT_TIMEOUT.as_secs()
            ),
            "check that the server is running and reachable, and DATABASE_URL / --database-url",
        )
    }

    fn connect_error(&self, e: &sqlx::Error) -> CliError {
        let number = match e {
            sqlx::Error::Database(db) => db
                .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                .map(sqlx::mysql::MySqlDatabaseError::number),
            _ => None,
        };
        let fix = match number {
            Some(1045) => "check the user and password in DATABASE_URL",
            Some(1698) => {
                "the server has no password login for this user (MariaDB's root often logs in \
                 by unix_socket only): use a user with a password (CREATE USER ... IDENTIFIED BY \
                 ...) in DATABASE_URL"
            }
            Some(1044) => "the user may not use this database: grant it, or fix DATABASE_URL",
            Some(1049) => {
                "the database does not exist: create it (CREATE DATABASE ...) or fix DATABASE_URL"
            }
            _ => {
                "check that the server is running and reachable, and DATABASE_URL / --database-url"
            }
        };
        CliError::new(
            format!("cannot connect to {}: {}", self.redacted(), chain(e)),
            fix,
        )
    }
}

/// A connection from `pool`.
pub(crate) async fn acquire(pool: &MySqlPool) -> Result<PoolConnection<MySql>, CliError> {
    pool.acquire().await.map_err(|e| {
        CliError::mysqlq(
            "cannot get a database connection",
            &mysqlq::Error::Database(e),
        )
    })
}

/// The password in `mysql://user:password@host/…`, raw and as written. The user information
/// runs to the **last** `@`: a password may contain `/`, `?`, `#` and `@` unescaped.
fn password_of(url: &str) -> Option<String> {
    let (_, rest) = url.split_once("://")?;
    let (userinfo, _) = rest.rsplit_once('@')?;
    let (_, password) = userinfo.split_once(':')?;
    (!password.is_empty()).then(|| password.to_owned())
}

/// `text` with the password of every URL in it (`scheme://user:password@host…`) redacted by
/// [`redact_url`]; the rest of the text, `@`s included, is kept.
pub(crate) fn redact_urls_in(text: &str) -> String {
    let bounds = |c: char| c.is_whitespace() || matches!(c, '\'' | '"' | '`' | '<' | '>');
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let start = rest[..at].rfind(bounds).map_or(0, |i| i + 1);
        let end = rest[at..].find(bounds).map_or(rest.len(), |i| at + i);
        out.push_str(&rest[..start]);
        out.push_str(&redact_url(&rest[start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// `mysql://user:***@host/db`: everything between the user's `:` and the last `@` replaced, so
/// a password containing `/`, `?`, `#` or `@` never shows.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return if url.contains('@') {
            "<redacted>".to_owned()
        } else {
            url.to_owned()
        };
    };
    let Some((userinfo, host)) = rest.rsplit_once('@') else {
        return url.to_owned();
    };
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_owned(),
    }
}

/// Replaces `url` and `password` (raw and percent-decoded) in `text`.
fn scrub(text: &str, url: &str, password: Option<&str>) -> String {
    let mut out = text.replace(url, &redact_url(url));
    if let Some(p) = password {
        // Very short passwords would match ordinary words; the URL replacement covers them.
        if p.len() >= 3 {
            out = out.replace(p, "***");
            let decoded = percent_decode(p);
            if decoded != p && decoded.len() >= 3 {
                out = out.replace(&decoded, "***");
            }
        }
    }
    out
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = (bytes[i] == b'%' && i + 2 < bytes.len())
            .then(|| std::str::from_utf8(&bytes[i + 1..i + 3]).ok())
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        if let Some(b) = hex {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("mysql://app:s3cret@db:3306/app"),
            "mysql://app:***@db:3306/app"
        );
        assert_eq!(
            redact_url("mysql://app:p@ss@db/app?ssl-mode=required"),
            "mysql://app:***@db/app?ssl-mode=required"
        );
        assert_eq!(
            redact_url("mysql://root@127.0.0.1:3306/x"),
            "mysql://root@127.0.0.1:3306/x"
        );
        for (url, secret) in [
            ("mysql://app:pa/ss9Word@db:3306/app", "pa/ss9Word"),
            ("mysql://app:pa?ss9Word@db/app", "pa?ss9Word"),
            (
                "mysql://app:pa#ss9Word@db/app?ssl-mode=required",
                "pa#ss9Word",
            ),
            ("mysql://app:a@b/c?d#e@db/app", "a@b/c?d#e"),
        ] {
            let r = redact_url(url);
            assert!(!r.contains(secret) && !r.contains("ss9"), "{url} -> {r}");
            assert!(r.starts_with("mysql://app:***@db"), "{url} -> {r}");
            let t = Target::new(Some(url)).unwrap();
            let s = t.scrub(&format!(
                "failed for {url}; the password {secret} was rejected"
            ));
            assert!(!s.contains(secret), "{s}");
        }
        let t = Target::new(Some("mysql://app:hunter%402@db/app")).unwrap();
        let s = t.scrub("failed for mysql://app:hunter%402@db/app with hunter@2 and hunter%402");
        assert!(!s.contains("hunter"), "{s}");
    }
}
