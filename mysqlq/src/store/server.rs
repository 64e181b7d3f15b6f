//! Server flavour and version detection, and the one place where MySQL and MariaDB differ.
//!
//! Differences handled here: the isolation variable (`transaction_isolation` on MySQL 8,
//! `tx_isolation` on MariaDB before 11.1), the version floor for `SKIP LOCKED`
//! (MySQL 8.0.1, MariaDB 10.6), the byte-for-byte collation of keys (`utf8mb4_nopad_bin` on
//! MariaDB, `utf8mb4_0900_bin` on MySQL 8.0.17+) and UTC expression defaults (MySQL 8.0.13+). Everything else mysqlq writes is the common dialect
//! (no `RETURNING`, no optimizer hints, `LOCK IN SHARE MODE` rather than `FOR SHARE`).
//!
//! Galera clusters (MariaDB Galera Cluster, Percona XtraDB Cluster) are detected here too
//! ([`is_galera`], [`node_state`]): whether a node may take writes (`wsrep_ready`, `Synced`,
//! primary component) and causal reads (`wsrep_sync_wait`) only where wsrep is on.

use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};

use sqlx::MySqlConnection;

use crate::Error;

/// Which server family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerFlavor {
    /// Oracle MySQL (and Percona Server).
    MySql,
    /// MariaDB.
    MariaDb,
}

/// What mysqlq knows about the server it talks to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    /// MySQL or MariaDB.
    pub flavor: ServerFlavor,
    /// `(major, minor, patch)`.
    pub version: (u32, u32, u32),
    /// The full `VERSION()` string.
    pub version_string: String,
}

impl ServerInfo {
    /// Parses a `VERSION()` string such as `8.0.36`, `8.4.0-log` or `10.11.6-MariaDB-0+deb12u1`.
    pub fn parse(version_string: &str) -> Result<Self, Error> {
        let flavor = if version_string.to_ascii_lowercase().contains("mariadb") {
            ServerFlavor::MariaDb
        } else {
            ServerFlavor::MySql
        };
        // MariaDB once prefixed "5.5.5-" for old clients.
        let s = version_string
            .strip_prefix("5.5.5-")
            .unwrap_or(version_string);
        let mut nums = s
            .split(|c: char| !c.is_ascii_digit())
            .take(3)
            .map(|p| p.parse::<u32>());
        let mut next = || nums.next().and_then(Result::ok);
        let (Some(major), Some(minor)) = (next(), next()) else {
            return Err(Error::UnsupportedServer {
                version: version_string.to_owned(),
                reason: "cannot read the server version".to_owned(),
            });
        };
        let patch = next().unwrap_or(0);
        Ok(Self {
            flavor,
            version: (major, minor, patch),
            version_string: version_string.to_owned(),
        })
    }

    /// Errors unless the server has `SKIP LOCKED`: MySQL ≥ 8.0.1 or MariaDB ≥ 10.6.
    pub fn check_supported(&self) -> Result<(), Error> {
        let (floor, name) = match self.flavor {
            ServerFlavor::MySql => ((8, 0, 1), "MySQL 8.0.1"),
            ServerFlavor::MariaDb => ((10, 6, 0), "MariaDB 10.6"),
        };
        if self.version < floor {
            return Err(Error::UnsupportedServer {
                version: self.version_string.clone(),
                reason: format!(
                    "mysqlq needs SELECT ... FOR UPDATE SKIP LOCKED, which arrived in {name}; \
                     upgrade the server"
                ),
            });
        }
        Ok(())
    }

    /// The session variable holding the isolation level.
    pub fn isolation_variable(&self) -> &'static str {
        match self.flavor {
            ServerFlavor::MySql => "transaction_isolation",
            ServerFlavor::MariaDb if self.version >= (11, 1, 0) => "transaction_isolation",
            ServerFlavor::MariaDb => "tx_isolation",
        }
    }
}

impl ServerInfo {
    /// The collation of keys, queue names and kinds: binary (case and accent sensitive) and,
    /// where the server has one, without trailing-space padding. MySQL before 8.0.17 has only
    /// `utf8mb4_bin`, which ignores trailing spaces in comparisons.
    pub fn key_collation(&self) -> &'static str {
        match self.flavor {
            ServerFlavor::MariaDb => "utf8mb4_nopad_bin",
            ServerFlavor::MySql if self.version >= (8, 0, 17) => "utf8mb4_0900_bin",
            ServerFlavor::MySql => "utf8mb4_bin",
        }
    }

    /// `true` when the server takes expression defaults such as `DEFAULT (UTC_TIMESTAMP(6))`
    /// (MySQL 8.0.13+, MariaDB 10.2+).
    pub fn has_expression_defaults(&self) -> bool {
        match self.flavor {
            ServerFlavor::MariaDb => true,
            ServerFlavor::MySql => self.version >= (8, 0, 13),
        }
    }

    /// `select_rest` (a statement's text after its first `SELECT`) as a `SELECT` the server
    /// stops after `seconds`: MariaDB's `SET STATEMENT max_statement_time = N FOR SELECT …`
    /// (error 1969 when exceeded), MySQL's `SELECT /*+ MAX_EXECUTION_TIME(ms) */ …` (3024).
    pub fn time_limited_select(&self, select_rest: &str, seconds: u32) -> String {
        match self.flavor {
            ServerFlavor::MariaDb => {
                format!("SET STATEMENT max_statement_time = {seconds} FOR SELECT {select_rest}")
            }
            ServerFlavor::MySql => format!(
                "SELECT /*+ MAX_EXECUTION_TIME({}) */ {select_rest}",
                u64::from(seconds) * 1000
            ),
        }
    }

    /// Fills the server-dependent placeholders of a migration file: `{key_collation}`,
    /// `{utc_default}` (a UTC default, or none: the column is then required) and
    /// `{updated_default}` (a UTC default, or the session clock where no expression default
    /// exists). The values are fixed identifiers chosen here, never input.
    pub fn render_migration(&self, sql: &str) -> String {
        let (utc, updated) = if self.has_expression_defaults() {
            ("DEFAULT (UTC_TIMESTAMP(6))", "DEFAULT (UTC_TIMESTAMP(6))")
        } else {
            ("", "DEFAULT CURRENT_TIMESTAMP(6)")
        };
        // MariaDB keeps JSON as the text given: compacted, a payload stored by SQL is the
        // bytes serde_json writes. MySQL stores its own binary form.
        let compact = match self.flavor {
            ServerFlavor::MariaDb => "JSON_COMPACT",
            ServerFlavor::MySql => "",
        };
        sql.replace("{key_collation}", self.key_collation())
            .replace("{utc_default}", utc)
            .replace("{updated_default}", updated)
            .replace("{isolation_variable}", self.isolation_variable())
            .replace("{compact_json}", compact)
    }
}

impl fmt::Display for ServerInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (a, b, c) = self.version;
        let name = match self.flavor {
            ServerFlavor::MySql => "MySQL",
            ServerFlavor::MariaDb => "MariaDB",
        };
        write!(f, "{name} {a}.{b}.{c}")
    }
}

/// `server_version`: the server's `VERSION()` string, unchecked.
pub async fn version(conn: &mut MySqlConnection) -> Result<String, Error> {
    Ok(
        sqlx::query_scalar("/* mysqlq:server_version */ SELECT VERSION()")
            .fetch_one(&mut *conn)
            .await?,
    )
}

/// Which isolation variable answered last (0: not known yet, 1: `transaction_isolation`,
/// 2: `tx_isolation`), so the usual case costs one statement.
static ISOLATION_VARIABLE: AtomicU8 = AtomicU8::new(0);

/// `session_isolation`: the session's isolation level (`READ-COMMITTED`, `REPEATABLE-READ`,
/// …). MySQL 8 and MariaDB 11.1+ name the variable `transaction_isolation`, older MariaDB
/// `tx_isolation`: the other name is tried when the server does not know the first (error 1193,
/// which does not end a transaction).
pub async fn session_isolation(conn: &mut MySqlConnection) -> Result<Option<String>, Error> {
    let first = ISOLATION_VARIABLE.load(Ordering::Relaxed).max(1);
    for which in [first, 3 - first] {
        let sql = if which == 1 {
            "/* mysqlq:session_isolation */ SELECT CAST(@@session.transaction_isolation AS CHAR)"
        } else {
            "/* mysqlq:session_isolation */ SELECT CAST(@@session.tx_isolation AS CHAR)"
        };
        match sqlx::query_scalar::<_, Option<String>>(sql)
            .fetch_one(&mut *conn)
            .await
        {
            Ok(level) => {
                ISOLATION_VARIABLE.store(which, Ordering::Relaxed);
                return Ok(level);
            }
            Err(e) if super::sqlx_error_number(&e) == Some(1193) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(None)
}

/// Reads and checks the server version.
pub async fn detect(conn: &mut MySqlConnection) -> Result<ServerInfo, Error> {
    let version = version(conn).await?;
    let info = ServerInfo::parse(&version)?;
    info.check_supported()?;
    Ok(info)
}

/// What a node says about itself: may it take writes, and, on a Galera cluster (MariaDB
/// Galera, Percona XtraDB Cluster), its place in the cluster. Read with `SHOW GLOBAL VARIABLES`
/// and `SHOW GLOBAL STATUS`, which MySQL and MariaDB both answer, with or without wsrep, and
/// which a Galera node answers even outside the primary component (where reading a table fails
/// with 1047).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeState {
    /// Which of `read_only`, `super_read_only`, `innodb_read_only` are on.
    pub read_only: Vec<&'static str>,
    /// `@@global.binlog_format`.
    pub binlog_format: String,
    /// `@@global.innodb_autoinc_lock_mode`.
    pub autoinc_lock_mode: Option<u32>,
    /// `@@global.auto_increment_increment` and `@@global.auto_increment_offset`.
    pub auto_increment: (u64, u64),
    /// The Galera state, when `wsrep_on` is `ON`.
    pub galera: Option<GaleraState>,
}

/// A Galera node's state (the `wsrep_*` variables and status counters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GaleraState {
    /// `wsrep_ready`: the node accepts queries.
    pub ready: bool,
    /// `wsrep_local_state_comment`: `Synced`, `Donor/Desynced`, `Joining`, `Joined`, …
    pub local_state: String,
    /// `wsrep_cluster_status`: `Primary` (part of the quorum), `non-Primary`, `Disconnected`.
    pub cluster_status: String,
    /// `wsrep_cluster_size`: nodes in this node's component.
    pub cluster_size: u32,
    /// `wsrep_local_index`: this node's index in the component.
    pub local_index: Option<u32>,
    /// `wsrep_reject_queries` (`NONE` unless an operator fences the node).
    pub reject_queries: String,
    /// `wsrep_desync`.
    pub desync: bool,
    /// `wsrep_auto_increment_control`: the cluster sets `auto_increment_increment` to its size
    /// and `auto_increment_offset` to the node's index, so ids are not contiguous and the step
    /// changes when nodes join or leave.
    pub auto_increment_control: bool,
    /// `wsrep_local_cert_failures`: local transactions that failed certification (another node
    /// wrote the same rows first) since the node started.
    pub cert_failures: u64,
    /// `wsrep_local_bf_aborts`: local transactions aborted by a replicated one since the node
    /// started.
    pub bf_aborts: u64,
}

impl NodeState {
    /// `Ok` when the node takes writes: not read-only and, on Galera, ready, `Synced` and in the
    /// primary component, with queries not rejected. Otherwise why not, in a few words.
    pub fn writable(&self) -> Result<(), String> {
        if !self.read_only.is_empty() {
            return Err(format!("{} ON", self.read_only.join(", ")));
        }
        let Some(g) = &self.galera else {
            return Ok(());
        };
        if g.cluster_status != "Primary" {
            return Err(format!(
                "wsrep_cluster_status={} (not in the primary component)",
                g.cluster_status
            ));
        }
        if !g.ready {
            return Err("wsrep_ready=OFF".to_owned());
        }
        if g.local_state != "Synced" {
            return Err(format!("wsrep_local_state_comment={}", g.local_state));
        }
        if !g.reject_queries.eq_ignore_ascii_case("NONE") {
            return Err(format!("wsrep_reject_queries={}", g.reject_queries));
        }
        Ok(())
    }
}

/// `node_state`: see [`NodeState`]. Two `SHOW` statements (one without wsrep).
pub async fn node_state(conn: &mut MySqlConnection) -> Result<NodeState, Error> {
    let vars: Vec<(String, String)> = sqlx::query_as(
        "/* mysqlq:node_state */ SHOW GLOBAL VARIABLES WHERE Variable_name IN ('read_only', \
         'super_read_only', 'innodb_read_only', 'binlog_format', 'innodb_autoinc_lock_mode', \
         'auto_increment_increment', 'auto_increment_offset', 'wsrep_on', 'wsrep_reject_queries', \
         'wsrep_desync', 'wsrep_auto_increment_control')",
    )
    .fetch_all(&mut *conn)
    .await?;
    let var = |name: &str| {
        vars.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    let on = |name: &str| var(name).is_some_and(is_on);
    let number = |name: &str| var(name).and_then(|v| v.parse::<u64>().ok());
    let read_only = ["read_only", "super_read_only", "innodb_read_only"]
        .into_iter()
        .filter(|n| on(n))
        .collect();
    let galera = if on("wsrep_on") {
        let status: Vec<(String, String)> = sqlx::query_as(
            "/* mysqlq:node_state */ SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_ready', \
             'wsrep_local_state_comment', 'wsrep_cluster_status', 'wsrep_cluster_size', \
             'wsrep_local_index', 'wsrep_local_cert_failures', 'wsrep_local_bf_aborts')",
        )
        .fetch_all(&mut *conn)
        .await?;
        let st = |name: &str| {
            status
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map_or("", |(_, v)| v.as_str())
        };
        Some(GaleraState {
            ready: is_on(st("wsrep_ready")),
            local_state: st("wsrep_local_state_comment").to_owned(),
            cluster_status: st("wsrep_cluster_status").to_owned(),
            cluster_size: st("wsrep_cluster_size").parse().unwrap_or(0),
            local_index: st("wsrep_local_index").parse().ok(),
            reject_queries: var("wsrep_reject_queries").unwrap_or("NONE").to_owned(),
            desync: on("wsrep_desync"),
            auto_increment_control: on("wsrep_auto_increment_control"),
            cert_failures: st("wsrep_local_cert_failures").parse().unwrap_or(0),
            bf_aborts: st("wsrep_local_bf_aborts").parse().unwrap_or(0),
        })
    } else {
        None
    };
    Ok(NodeState {
        read_only,
        binlog_format: var("binlog_format").unwrap_or_default().to_owned(),
        autoinc_lock_mode: number("innodb_autoinc_lock_mode").and_then(|n| u32::try_from(n).ok()),
        auto_increment: (
            number("auto_increment_increment").unwrap_or(1),
            number("auto_increment_offset").unwrap_or(1),
        ),
        galera,
    })
}

fn is_on(value: &str) -> bool {
    matches!(
        value.to_ascii_uppercase().as_str(),
        "ON" | "1" | "YES" | "TRUE"
    )
}

/// `true` when the session's server is a Galera node (`wsrep_on = ON`): MariaDB Galera Cluster
/// or Percona XtraDB Cluster. One `SHOW`, answered by servers without wsrep too (no rows).
pub async fn is_galera(conn: &mut MySqlConnection) -> Result<bool, Error> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "/* mysqlq:server_is_galera */ SHOW GLOBAL VARIABLES WHERE Variable_name = 'wsrep_on'",
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.iter().any(|(_, v)| is_on(v)))
}

/// `session_causal_reads`: on a Galera node, makes the session's reads wait until the node has
/// applied every write the cluster committed before them (`wsrep_sync_wait = 1`). Returns
/// `false`, doing nothing, on a server without wsrep, where every read already sees every
/// committed write of its server.
pub async fn session_causal_reads(conn: &mut MySqlConnection) -> Result<bool, Error> {
    if !is_galera(conn).await? {
        return Ok(false);
    }
    sqlx::query("/* mysqlq:session_causal_reads */ SET SESSION wsrep_sync_wait = 1")
        .execute(&mut *conn)
        .await?;
    Ok(true)
}

/// `session_causal_reads_off`: `wsrep_sync_wait` back to the server's default, after
/// [`session_causal_reads`] returned `true`.
pub async fn session_causal_reads_off(conn: &mut MySqlConnection) -> Result<(), Error> {
    sqlx::query("/* mysqlq:session_causal_reads */ SET SESSION wsrep_sync_wait = DEFAULT")
        .execute(&mut *conn)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_checks_versions() {
        let maria = ServerInfo::parse("10.11.19-MariaDB-0+deb12u1").unwrap();
        assert_eq!(maria.flavor, ServerFlavor::MariaDb);
        assert_eq!(maria.version, (10, 11, 19));
        maria.check_supported().unwrap();
        assert_eq!(maria.isolation_variable(), "tx_isolation");

        let mysql = ServerInfo::parse("8.0.36-log").unwrap();
        assert_eq!(mysql.flavor, ServerFlavor::MySql);
        mysql.check_supported().unwrap();
        assert_eq!(mysql.isolation_variable(), "transaction_isolation");

        let old = ServerInfo::parse("5.7.44").unwrap();
        let err = old.check_supported().unwrap_err().to_string();
        assert!(
            err.contains("SKIP LOCKED") && err.contains("MySQL 8.0.1"),
            "{err}"
        );
        let old_maria = ServerInfo::parse("5.5.5-10.5.2-MariaDB").unwrap();
        assert_eq!(old_maria.version, (10, 5, 2));
        assert!(old_maria.check_supported().is_err());
        assert!(ServerInfo::parse("garbage").is_err());
    }

    #[test]
    fn keys_collate_byte_for_byte_and_defaults_are_utc() {
        let maria = ServerInfo::parse("10.6.0-MariaDB").unwrap();
        assert_eq!(maria.key_collation(), "utf8mb4_nopad_bin");
        let sql = maria.render_migration("a {key_collation} {utc_default} {updated_default}");
        assert_eq!(
            sql,
            "a utf8mb4_nopad_bin DEFAULT (UTC_TIMESTAMP(6)) DEFAULT (UTC_TIMESTAMP(6))"
        );
        let mysql = ServerInfo::parse("8.0.36").unwrap();
        assert_eq!(mysql.key_collation(), "utf8mb4_0900_bin");
        assert!(mysql.has_expression_defaults());
        let old = ServerInfo::parse("8.0.12").unwrap();
        assert_eq!(old.key_collation(), "utf8mb4_bin");
        assert_eq!(
            old.render_migration("{utc_default}|{updated_default}"),
            "|DEFAULT CURRENT_TIMESTAMP(6)"
        );
    }
}
