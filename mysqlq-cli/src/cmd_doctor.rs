//! `doctor`: is this server and schema fit for SKIP LOCKED claims? The checks are the
//! library's (`mysqlq::admin::Admin::doctor`); this prints them.

use mysqlq::admin::{Admin, Check, Level};

use crate::args::ConnArgs;
use crate::db::Target;
use crate::error::{CliError, EXIT_CHECK_FAILED};

/// Runs every check, prints one line each; exit code 3 when any failed. With several hosts in
/// the URL, a line per host comes first (which take writes), then the checks of the writer.
pub(crate) async fn doctor(target: &Target, conn: &ConnArgs) -> Result<u8, CliError> {
    let cluster = target.cluster()?;
    let pool = target.pool(2).await?;
    let mut checks = Vec::new();
    if cluster.is_multi_host() {
        let writer = mysqlq::cluster::status(&pool).map(|s| s.writer);
        checks.extend(host_checks(&cluster, writer.as_deref()).await);
    }
    let registered: Vec<String> = crate::registry()
        .map(|r| r.queues().into_iter().map(str::to_owned).collect())
        .unwrap_or_default();
    checks.extend(
        Admin::new(pool)
            .doctor(&registered)
            .await
            .map_err(|e| CliError::mysqlq("doctor could not read the server", &e))?,
    );
    #[cfg(feature = "redis")]
    if let Some(url) = &conn.redis.url {
        // Reachability is a check of its own: an unreachable Redis is a FAIL line, not an error.
        match mysqlq::redis::Redis::connect_with(url, conn.redis.config()).await {
            Ok(redis) => {
                let idle = std::time::Duration::from_secs(60);
                checks.extend(redis.doctor(&registered, idle).await);
            }
            Err(e) => checks.push(Check {
                level: Level::Fail,
                name: "redis",
                detail: format!("Redis not reachable: {}", mysqlq::error_chain(&e)),
                fix: Some("start Redis, or fix --redis-url / MYSQLQ_REDIS_URL".into()),
            }),
        }
    }
    #[cfg(not(feature = "redis"))]
    let _ = conn;
    Ok(print(&checks))
}

/// One `host` check per host of a multi-host URL: the writer, the others that could take over,
/// and the ones that could not (why).
async fn host_checks(cluster: &mysqlq::ClusterUrl, writer: Option<&str>) -> Vec<Check> {
    cluster
        .check_hosts()
        .await
        .into_iter()
        .map(|h| {
            let galera = h.galera.as_ref().map_or(String::new(), |(state, size)| {
                format!(" (Galera, {state}, {size} nodes)")
            });
            let (level, detail) = match (&h.writable, writer == Some(h.host.as_str())) {
                (Ok(()), true) => (
                    Level::Ok,
                    format!(
                        "{}: takes writes{galera}; the writer, the checks below are its",
                        h.host
                    ),
                ),
                (Ok(()), false) => (
                    Level::Ok,
                    format!("{}: takes writes{galera}; a failover would use it", h.host),
                ),
                (Err(why), _) if why.contains("read_only") => (
                    Level::Info,
                    format!(
                        "{}: {why}{galera}; a replica takes over once promoted",
                        h.host
                    ),
                ),
                (Err(why), _) => (Level::Warn, format!("{}: {why}{galera}", h.host)),
            };
            Check {
                level,
                name: "host",
                detail,
                fix: None,
            }
        })
        .collect()
}

/// Prints one line per check; the exit code: 3 when any failed.
fn print(checks: &[Check]) -> u8 {
    let width = checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
    for c in checks {
        let tag = match c.level {
            Level::Ok => "ok",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Fail => "FAIL",
        };
        let fix = c.fix.as_deref().map_or(String::new(), |f| {
            crate::program::rename(&format!("; fix: {f}"))
        });
        let detail = crate::program::rename(&c.detail);
        println!("{tag:<4}  {:<width$}  {detail}{fix}", c.name);
    }
    let worst = checks.iter().map(|c| c.level).max().unwrap_or(Level::Ok);
    if worst == Level::Fail {
        EXIT_CHECK_FAILED
    } else {
        0
    }
}
