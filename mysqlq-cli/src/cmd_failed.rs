//! `failed list | show | retry | discard`.

use mysqlq::JobId;
use mysqlq::store::admin::{self, BULK_CHUNK, FailedCursor, FailedListParams, FailedPageParams};
use sqlx::MySqlConnection;

use crate::args::{FailedBulkArgs, FailedCommand};
use crate::db::Target;
use crate::error::CliError;
use crate::out::{self, Table};

/// Runs a `failed` subcommand; returns the exit code.
pub(crate) async fn failed(target: &Target, c: FailedCommand) -> Result<u8, CliError> {
    let pool = target.pool(2).await?;
    let mut conn = crate::db::acquire(&pool).await?;
    match c {
        FailedCommand::List(a) => {
            let p = FailedListParams {
                queue: a.queue.as_deref(),
                limit: a.limit,
            };
            let jobs = admin::job_failed_list(&mut conn, &p)
                .await
                .map_err(|e| CliError::mysqlq("cannot list failed jobs", &e))?;
            if a.json {
                println!("{}", to_json(&jobs)?);
            } else if jobs.is_empty() {
                println!(
                    "no failed jobs{}",
                    a.queue
                        .map_or(String::new(), |q| format!(" in queue `{q}`"))
                );
            } else {
                let mut t = Table::new(&[
                    "ID",
                    "QUEUE",
                    "KIND",
                    ">ATTEMPTS",
                    "FAILED AT (UTC)",
                    "LAST ERROR",
                ]);
                for j in &jobs {
                    t.row(vec![
                        j.id.to_string(),
                        j.queue.clone(),
                        j.kind.clone().unwrap_or_else(|| "-".into()),
                        format!("{}/{}", j.attempts, j.max_attempts),
                        j.finished_at.as_deref().map_or("-".into(), seconds),
                        one_line(j.last_error.as_deref().unwrap_or("-"), 80),
                    ]);
                }
                print!("{}", t.render());
            }
            Ok(0)
        }
        FailedCommand::Show(a) => {
            let job = admin::job_get(&mut conn, JobId(a.id))
                .await
                .map_err(|e| CliError::mysqlq("cannot read the job", &e))?
                .ok_or_else(|| unknown_job(a.id))?;
            if a.json {
                let mut v = serde_json::to_value(&job)
                    .map_err(|e| CliError::new(e.to_string(), "report this bug"))?;
                if let Ok(p) = serde_json::from_str::<serde_json::Value>(&job.payload) {
                    v["payload"] = p;
                }
                println!("{}", to_json(&v)?);
                return Ok(0);
            }
            let payload = serde_json::from_str::<serde_json::Value>(&job.payload)
                .and_then(|v| serde_json::to_string_pretty(&v))
                .unwrap_or_else(|_| job.payload.clone());
            let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
            let mut lines = vec![
                ("id", job.id.to_string()),
                ("status", job.status.clone()),
                ("kind", opt(&job.kind)),
                ("queue", job.queue.clone()),
                ("priority", job.priority.to_string()),
                (
                    "attempts",
                    format!("{} of {}", job.attempts, job.max_attempts),
                ),
                ("dedupe key", opt(&job.dedupe_key)),
                ("ordering key", opt(&job.ordering_key)),
                ("created at", job.created_at.clone()),
                ("available at", job.available_at.clone()),
                ("updated at", job.updated_at.clone()),
                ("finished at", opt(&job.finished_at)),
            ];
            if job.status == "processing" {
                lines.push(("locked by", opt(&job.locked_by)));
                lines.push(("lease expires", opt(&job.lease_expires_at)));
            }
            for (k, v) in lines {
                println!("{:<14}{}", format!("{k}:"), out::printable(&v, false));
            }
            println!(
                "last error:\n{}",
                out::printable(job.last_error.as_deref().unwrap_or("-"), true)
            );
            println!("payload:\n{}", out::printable(&payload, true));
            if job.status != "failed" {
                out::warn(&format!("job {} is {}, not failed", job.id, job.status));
            }
            Ok(0)
        }
        FailedCommand::Retry(a) => bulk(&mut conn, &a, Op::Retry).await,
        FailedCommand::Discard(a) => bulk(&mut conn, &a, Op::Discard).await,
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Retry,
    Discard,
}

fn unknown_job(id: u64) -> CliError {
    CliError::new(
        format!("no job with id {id}"),
        "check the id; `mysqlq-cli failed list` shows the failed jobs",
    )
}

fn to_json<T: serde::Serialize>(v: &T) -> Result<String, CliError> {
    serde_json::to_string_pretty(v)
        .map_err(|e| CliError::new(format!("cannot encode JSON: {e}"), "report this bug"))
}

/// `2024-05-01 10:00:00.123456` → `2024-05-01 10:00:00`.
fn seconds(ts: &str) -> String {
    ts.split('.').next().unwrap_or(ts).to_owned()
}

fn one_line(s: &str, max: usize) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() <= max {
        flat
    } else {
        flat.chars().take(max.saturating_sub(1)).collect::<String>() + "…"
    }
}

async fn bulk(conn: &mut MySqlConnection, a: &FailedBulkArgs, op: Op) -> Result<u8, CliError> {
    let verb = if op == Op::Retry { "retry" } else { "discard" };
    if let Some(id) = a.id {
        let ids = [JobId(id)];
        return match op {
            Op::Retry => {
                let r = admin::job_retry_failed(conn, &ids)
                    .await
                    .map_err(|e| CliError::mysqlq("cannot retry the job", &e))?;
                if let Some(c) = r.conflicts.first() {
                    return Err(CliError::new(
                        conflict_text(c),
                        "retry it once that job has finished, or discard it",
                    ));
                }
                if r.retried.is_empty() {
                    return Err(not_failed(conn, id).await);
                }
                println!("retried job {id}: pending, runnable now");
                Ok(0)
            }
            Op::Discard => {
                let r = admin::job_discard_failed(conn, &ids)
                    .await
                    .map_err(|e| CliError::mysqlq("cannot discard the job", &e))?;
                if r.discarded.is_empty() {
                    return Err(not_failed(conn, id).await);
                }
                println!("discarded job {id}");
                Ok(0)
            }
        };
    }
    // --all: keyset pages of failed ids, one bulk statement per page.
    let queue = a.queue.as_deref();
    let total = admin::job_failed_count(conn, queue)
        .await
        .map_err(|e| CliError::mysqlq("cannot count the failed jobs", &e))?;
    let bar = out::progress(Some(total), &format!("{verb}ing failed jobs"));
    let mut cursor = FailedCursor::default();
    let page = FailedPageParams {
        queue,
        limit: u32::try_from(BULK_CHUNK).unwrap_or(500),
    };
    let (mut done, mut conflicts) = (0u64, 0u64);
    while !cursor.is_done() {
        let ids = admin::job_failed_page(conn, &page, &mut cursor)
            .await
            .map_err(|e| CliError::mysqlq(&format!("stopped after {done} jobs"), &e))?;
        if ids.is_empty() {
            continue;
        }
        match op {
            Op::Retry => {
                let r = admin::job_retry_failed(conn, &ids).await.map_err(|e| {
                    CliError::mysqlq(&format!("stopped after retrying {done} jobs"), &e)
                })?;
                done += r.retried.len() as u64;
                for c in &r.conflicts {
                    conflicts += 1;
                    bar.suspend(|| out::warn(&format!("{}; left in failed", conflict_text(c))));
                }
            }
            Op::Discard => {
                let r = admin::job_discard_failed(conn, &ids).await.map_err(|e| {
                    CliError::mysqlq(&format!("stopped after discarding {done} jobs"), &e)
                })?;
                done += r.discarded.len() as u64;
            }
        }
        bar.inc(ids.len() as u64);
    }
    bar.finish_and_clear();
    let scope = queue.map_or(String::new(), |q| format!(" of queue `{q}`"));
    match op {
        Op::Retry if conflicts > 0 => {
            println!(
                "retried {done} failed jobs{scope}; {conflicts} left failed (dedupe key taken)"
            );
        }
        Op::Retry => println!("retried {done} failed jobs{scope}"),
        Op::Discard => println!("discarded {done} failed jobs{scope}"),
    }
    Ok(0)
}

fn conflict_text(c: &admin::DedupeConflict) -> String {
    let key = out::printable(c.dedupe_key.as_deref().unwrap_or("?"), false);
    match c.holder {
        Some(h) => format!(
            "job {} not retried: its dedupe key `{key}` is held by job {h}",
            c.id
        ),
        None => format!(
            "job {} not retried: its dedupe key `{key}` is held by another job",
            c.id
        ),
    }
}

async fn not_failed(conn: &mut MySqlConnection, id: u64) -> CliError {
    match admin::job_get(conn, JobId(id)).await {
        Ok(Some(j)) => CliError::new(
            format!("job {id} is {}, not failed", j.status),
            "only failed jobs can be retried or discarded; `mysqlq-cli failed list` shows them",
        ),
        Ok(None) => unknown_job(id),
        Err(e) => CliError::mysqlq("cannot read the job", &e),
    }
}
