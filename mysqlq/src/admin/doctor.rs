//! `Admin::doctor`: health checks of the server and the schema, as data ([`Check`]); the CLI's
//! `doctor` prints them.

use sqlx::MySqlConnection;

use super::Admin;
use super::check::{Check, Level, check};
use crate::Error;
use crate::store::{self, admin, server};

/// The indexes the queries need.
const INDEXES: [&str; 5] = [
    "idx_job_claim",
    "idx_job_rate",
    "idx_job_recover",
    "uq_job_dedupe",
    "idx_job_finished",
];

impl Admin {
    /// Is this server and schema fit for SKIP LOCKED claims? Every check, in order: server
    /// version, on a Galera node its state and settings (`docs/clusters.md`; a node that does
    /// not take queries ends the list there), binary log format, writer (not read-only),
    /// isolation, time zone, schema version,
    /// indexes, search fields, the SQL enqueue routines, jobs stranded in queues none of `registered` (the queues this binary's jobs use;
    /// empty when unknown) serves, and the claim's plan on the busiest queue.
    pub async fn doctor(&self, registered: &[String]) -> Result<Vec<Check>, Error> {
        let mut conn = self.pool.acquire().await?;
        let mut checks = Vec::new();
        match doctor(&mut conn, registered, &mut checks).await {
            Ok(()) => Ok(checks),
            // A Galera node that does not take queries refuses statements with 1047 (which
            // ones depends on why: not Synced, outside the primary component, fenced).
            Err(e) if e.server_code() == Some(1047) => {
                if !checks
                    .iter()
                    .any(|c| c.name == "galera node" && c.level == Level::Fail)
                {
                    checks.push(check(
                        Level::Fail,
                        "galera node",
                        "this node does not take queries (not Synced, outside the primary \
                         component, or fenced with wsrep_reject_queries)",
                        Some(
                            "point the workers at a Synced node: list every node in one \
                             multi-host DATABASE_URL and mysqlq skips nodes in this state",
                        ),
                    ));
                }
                checks.push(check(
                    Level::Info,
                    "other checks",
                    format!("stopped: {}", crate::error_chain(&e)),
                    None,
                ));
                Ok(checks)
            }
            Err(e) => Err(e),
        }
    }
}

async fn doctor(
    conn: &mut MySqlConnection,
    registered: &[String],
    checks: &mut Vec<Check>,
) -> Result<(), Error> {
    let version = server::version(conn).await?;
    let info = match server::detect(conn).await {
        Ok(info) => {
            checks.push(check(
                Level::Ok,
                "server",
                format!("{info} supports SKIP LOCKED"),
                None,
            ));
            Some(info)
        }
        Err(e @ Error::UnsupportedServer { .. }) => {
            checks.push(check(
                Level::Fail,
                "server",
                format!("{version}: no SKIP LOCKED"),
                Some(&e.to_string()),
            ));
            server::ServerInfo::parse(&version).ok()
        }
        Err(e) => return Err(e),
    };

    let node = server::node_state(conn).await?;
    if let Some(g) = &node.galera {
        checks.extend(super::doctor_galera::checks(&node, g));
        if g.cluster_status != "Primary"
            || !g.ready
            || !g.reject_queries.eq_ignore_ascii_case("NONE")
        {
            checks.push(check(
                Level::Info,
                "other checks",
                "skipped: this node answers no query on a table",
                None,
            ));
            return Ok(());
        }
    }

    if let Some(info) = &info {
        let s = admin::server_settings(conn, info).await?;
        let fmt = s.binlog_format.to_ascii_uppercase();
        if node.galera.is_some() {
            // Checked above: on Galera binlog_format=ROW matters whether or not log_bin is on.
        } else if !s.log_bin {
            checks.push(check(
                Level::Ok,
                "binlog",
                "binary log off (binlog_format does not matter)",
                None,
            ));
        } else if fmt == "ROW" {
            checks.push(check(
                Level::Ok,
                "binlog",
                "log_bin=ON, binlog_format=ROW",
                None,
            ));
        } else {
            checks.push(check(
                Level::Fail,
                "binlog",
                format!(
                    "log_bin=ON with binlog_format={fmt}: SKIP LOCKED is unsafe for statement-based \
                     replication (MariaDB refuses it under READ COMMITTED with error 1665; under \
                     REPEATABLE READ a replica may claim different rows)"
                ),
                Some("SET GLOBAL binlog_format=ROW, and binlog_format=ROW in my.cnf; then restart the workers"),
            ));
        }
        let mut ro = Vec::new();
        if s.read_only {
            ro.push("read_only");
        }
        if s.super_read_only == Some(true) {
            ro.push("super_read_only");
        }
        if s.innodb_read_only {
            ro.push("innodb_read_only");
        }
        if ro.is_empty() {
            checks.push(check(
                Level::Ok,
                "writer",
                "read_only, super_read_only, innodb_read_only are off",
                None,
            ));
        } else {
            checks.push(check(
                Level::Fail,
                "writer",
                format!("{} ON: this is a read-only server or a replica", ro.join(", ")),
                Some("point DATABASE_URL at the writer (primary); claims and state changes must go there"),
            ));
        }
        checks.push(check(
            Level::Info,
            "isolation",
            format!(
                "session {} = {} (mysqlq runs each claim at READ COMMITTED regardless)",
                info.isolation_variable(),
                s.isolation
            ),
            None,
        ));
        let tz = format!(
            "global time_zone={} (system {})",
            s.time_zone, s.system_time_zone
        );
        let tz_fix = "set default_time_zone='+00:00' in my.cnf, or use UTC_TIMESTAMP(6) instead of NOW(6) in hand-written SQL";
        match s.utc_offset_seconds {
            Some(0) => checks.push(check(Level::Ok, "time zone", format!("{tz} is UTC"), None)),
            Some(off) => checks.push(check(
                Level::Warn,
                "time zone",
                format!(
                    "{tz} is {off:+}s from UTC: mysqlq stores UTC times, so NOW(6) queries run by \
                     hand (the job-queue article's) disagree with them"
                ),
                Some(tz_fix),
            )),
            None => checks.push(check(
                Level::Warn,
                "time zone",
                format!("{tz}: offset unknown (time zone tables not loaded)"),
                Some(tz_fix),
            )),
        }
    }

    let version = crate::schema_version(conn).await?;
    if version == crate::SCHEMA_VERSION {
        checks.push(check(
            Level::Ok,
            "schema",
            format!("version {version}"),
            None,
        ));
    } else {
        checks.push(check(
            Level::Fail,
            "schema",
            format!(
                "version {version}, this build needs {}",
                crate::SCHEMA_VERSION
            ),
            Some(if version < crate::SCHEMA_VERSION {
                "run `mysqlq-cli migrate`"
            } else {
                "upgrade this binary to the mysqlq version that migrated the database"
            }),
        ));
    }
    if version > 0 {
        let have = admin::table_indexes(conn, "job_queue").await?;
        let missing: Vec<&str> = INDEXES
            .iter()
            .copied()
            .filter(|i| !have.iter().any(|h| h == i))
            .collect();
        if missing.is_empty() {
            checks.push(check(Level::Ok, "indexes", INDEXES.join(", "), None));
        } else {
            checks.push(check(
                Level::Fail,
                "indexes",
                format!("job_queue lacks {}", missing.join(", ")),
                Some("restore them from mysqlq/migrations/0001_job_queue.sql (claims and stats would scan the table)"),
            ));
        }
        if let Some(c) = search_fields_check(conn).await? {
            checks.push(c);
        }
        checks.push(sql_enqueue_check(conn).await?);
        let queues = match admin::stats_queues(conn).await {
            Ok(queues) => {
                checks.push(stranded_check(registered, &queues));
                queues
            }
            Err(e) => {
                checks.push(check(
                    Level::Fail,
                    "queues",
                    format!("cannot read the queues: {}", crate::error_chain(&e)),
                    Some("run `mysqlq-cli migrate`"),
                ));
                Vec::new()
            }
        };
        let (queue, pending) = plan_queue(registered, &queues);
        match store::job_claim_explain(conn, &queue).await {
            Ok(plan) => {
                let main: Vec<_> = plan
                    .iter()
                    .filter(|r| r.table.as_deref() == Some("j"))
                    .collect();
                let uses = main
                    .iter()
                    .any(|r| r.key.as_deref() == Some("idx_job_rate"));
                let filesort = plan
                    .iter()
                    .any(|r| r.extra.as_deref().is_some_and(|e| e.contains("filesort")));
                if uses && !filesort {
                    checks.push(check(
                        Level::Ok,
                        "claim plan",
                        format!("queue `{queue}`: idx_job_rate, no filesort"),
                        None,
                    ));
                } else {
                    let key = main
                        .first()
                        .and_then(|r| r.key.clone())
                        .unwrap_or_else(|| "none".into());
                    if pending < PLAN_MIN_PENDING {
                        // On a drained or nearly empty queue every plan is cheap, and the
                        // optimizer may pick another index: nothing to judge yet.
                        checks.push(check(
                            Level::Info,
                            "claim plan",
                            format!(
                                "queue `{queue}`: {pending} pending jobs, too few for the plan to \
                                 matter (the optimizer chose key {key}{}); run doctor again while \
                                 the queue has a backlog",
                                if filesort { " with a sort" } else { "" }
                            ),
                            None,
                        ));
                    } else {
                        checks.push(check(
                            Level::Fail,
                            "claim plan",
                            format!(
                                "queue `{queue}`: {pending} pending jobs, key {key}{}",
                                if filesort { ", Using filesort" } else { "" }
                            ),
                            Some("check idx_job_rate (queue_name, status, rate_key, priority, available_at, id): migration 9 adds it"),
                        ));
                    }
                }
            }
            Err(e) => checks.push(check(
                Level::Fail,
                "claim plan",
                format!("EXPLAIN failed: {}", crate::error_chain(&e)),
                Some("run `mysqlq-cli migrate`"),
            )),
        }
    }

    Ok(())
}

/// The declared search fields (`mysqlq-cli search-index`): listed, or a warning naming those
/// whose column or index is missing. `None` before migration 10 made their table.
async fn search_fields_check(conn: &mut MySqlConnection) -> Result<Option<Check>, Error> {
    let fields = match store::search_fields::search_field_list(conn).await {
        Ok(f) => f,
        Err(e) if e.server_code() == Some(1146) => return Ok(None),
        Err(e) => return Err(e),
    };
    if fields.is_empty() {
        return Ok(Some(check(
            Level::Info,
            "search fields",
            "none declared (`mysqlq-cli search-index add args.PATH` indexes a field searched often)",
            None,
        )));
    }
    let broken: Vec<String> = fields
        .iter()
        .filter(|f| !f.column_exists || !f.index_exists)
        .map(|f| {
            let what = match (f.column_exists, f.index_exists) {
                (false, _) => "column",
                _ => "index",
            };
            format!(
                "{} (its {what} `{}` is missing)",
                f.path,
                if f.column_exists { &f.index } else { &f.column }
            )
        })
        .collect();
    if broken.is_empty() {
        let listed: Vec<String> = fields
            .iter()
            .map(|f| format!("{} ({})", f.path, f.index))
            .collect();
        return Ok(Some(check(
            Level::Ok,
            "search fields",
            listed.join(", "),
            None,
        )));
    }
    Ok(Some(check(
        Level::Warn,
        "search fields",
        format!("{}: searches on them fail", broken.join(", ")),
        Some(
            "run `mysqlq-cli search-index add PATH` again to make them, or `mysqlq-cli search-index drop PATH`",
        ),
    )))
}

/// The SQL entry points of migration 11 (`docs/other-languages.md`): the procedure must be
/// there; the function is optional, and when the server refused it the check says why and how
/// to get it.
async fn sql_enqueue_check(conn: &mut MySqlConnection) -> Result<Check, Error> {
    let r = store::migrations::sql_routines(conn).await?;
    if !r.procedure {
        return Ok(check(
            Level::Fail,
            "sql enqueue",
            "the procedure mysqlq_enqueue is missing: other languages and triggers cannot enqueue",
            Some("run `mysqlq-cli migrate` as a user with CREATE ROUTINE on this database"),
        ));
    }
    if r.function {
        return Ok(check(
            Level::Ok,
            "sql enqueue",
            "CALL mysqlq_enqueue(kind, payload, options) and mysqlq_enqueue_id(…) are installed",
            None,
        ));
    }
    let why = if r.log_bin && !r.trust_function_creators {
        "binary logging is on and log_bin_trust_function_creators is off, so the server refused          to create it"
    } else {
        "the server refused to create it (CREATE ROUTINE or SUPER missing when `migrate` ran)"
    };
    Ok(check(
        Level::Warn,
        "sql enqueue",
        format!(
            "CALL mysqlq_enqueue(…) is installed; the function mysqlq_enqueue_id(…) is not: {why}              (the procedure does everything the function does)"
        ),
        Some(
            "SET GLOBAL log_bin_trust_function_creators = 1 (and in my.cnf), then run `mysqlq-cli              migrate` again; or use CALL mysqlq_enqueue(…) and SELECT @mysqlq_job_id",
        ),
    ))
}

/// Below this many pending jobs in the queue, the claim's plan is not judged.
const PLAN_MIN_PENDING: u64 = 1000;

/// The queue whose claim plan is checked: of this binary's queues (else of all queues), the one
/// with the most pending jobs; and that count.
fn plan_queue(registered: &[String], queues: &[admin::QueueStats]) -> (String, u64) {
    let pending = |q: &admin::QueueStats| q.ready + q.scheduled;
    let busiest = queues
        .iter()
        .filter(|q| registered.is_empty() || registered.contains(&q.queue))
        .max_by_key(|q| pending(q));
    match busiest {
        Some(q) => (q.queue.clone(), pending(q)),
        None => (
            registered
                .first()
                .cloned()
                .unwrap_or_else(|| "default".to_owned()),
            0,
        ),
    }
}

/// Pending jobs in queues that no job linked into this binary uses: nothing here claims them.
fn stranded_check(registered: &[String], queues: &[admin::QueueStats]) -> Check {
    if registered.is_empty() {
        return check(
            Level::Info,
            "queues",
            "this binary links no jobs, so it cannot tell which queues its workers serve",
            None,
        );
    }
    let stranded: Vec<String> = queues
        .iter()
        .filter(|q| !registered.contains(&q.queue) && q.ready + q.scheduled > 0)
        .map(|q| format!("`{}` ({} pending)", q.queue, q.ready + q.scheduled))
        .collect();
    if stranded.is_empty() {
        check(
            Level::Ok,
            "queues",
            format!(
                "every queue with pending jobs is one of this binary's: {}",
                registered.join(", ")
            ),
            None,
        )
    } else {
        check(
            Level::Warn,
            "queues",
            format!(
                "jobs stranded in queues no job of this binary uses: {}",
                stranded.join(", ")
            ),
            Some(
                "run a worker binary that links their jobs, or `mysqlq-cli work --queues NAME` if this \
                 binary should serve them; delete them if nothing will",
            ),
        )
    }
}
