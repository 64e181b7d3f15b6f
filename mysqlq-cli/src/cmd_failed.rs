//! `failed list | show | retry | discard`.

use mysqlq::JobId;
use mysqlq::admin::{Admin, Attempt, DedupeConflict, JobState, Selection, Timestamp};

use crate::args::{FailedBulkArgs, FailedCommand};
use crate::confirm::{self, go_ahead};
use crate::db::Target;
use crate::error::CliError;
use crate::out::{self, Table};

/// Runs a `failed` subcommand; returns the exit code.
pub(crate) async fn failed(target: &Target, c: FailedCommand) -> Result<u8, CliError> {
    let pool = target.pool(2).await?;
    let admin = Admin::new(pool.clone());
    match c {
        FailedCommand::List(a) => {
            let jobs = admin
                .failed(a.queue.as_deref(), a.limit)
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
                        j.failed_at.as_ref().map_or("-".into(), seconds),
                        one_line(j.last_error.as_deref().unwrap_or("-"), 80),
                    ]);
                }
                print!("{}", t.render());
            }
            Ok(0)
        }
        FailedCommand::Show(a) => {
            let job = admin
                .job(JobId(a.id))
                .await
                .map_err(|e| CliError::mysqlq("cannot read the job", &e))?
                .ok_or_else(|| unknown_job(a.id))?;
            let attempts = admin
                .attempts(JobId(a.id))
                .await
                .map_err(|e| CliError::mysqlq("cannot read the job's attempts", &e))?;
            let actions = crate::cmd_audit::of_job(&admin, JobId(a.id)).await?;
            if a.json {
                let mut v = serde_json::to_value(&job)
                    .map_err(|e| CliError::new(e.to_string(), "report this bug"))?;
                if let Ok(p) = serde_json::from_str::<serde_json::Value>(&job.payload) {
                    v["payload"] = p;
                }
                v["attempt_history"] = serde_json::to_value(&attempts)
                    .map_err(|e| CliError::new(e.to_string(), "report this bug"))?;
                v["operator_actions"] = serde_json::to_value(&actions)
                    .map_err(|e| CliError::new(e.to_string(), "report this bug"))?;
                println!("{}", to_json(&v)?);
                return Ok(0);
            }
            let payload = serde_json::from_str::<serde_json::Value>(&job.payload)
                .and_then(|v| serde_json::to_string_pretty(&v))
                .unwrap_or_else(|_| job.payload.clone());
            let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
            let at = |t: &Option<Timestamp>| t.as_ref().map_or_else(|| "-".into(), micros);
            let mut lines = vec![
                ("id", job.id.to_string()),
                ("status", job.state.to_string()),
                ("kind", opt(&job.kind)),
                ("queue", job.queue.clone()),
                ("priority", job.priority.to_string()),
                (
                    "attempts",
                    format!("{} of {}", job.attempts, job.max_attempts),
                ),
                ("dedupe key", opt(&job.dedupe_key)),
                ("ordering key", opt(&job.ordering_key)),
                (
                    "rate key",
                    job.rate_key.as_ref().map_or_else(
                        || "-".to_owned(),
                        |k| format!("{k} ({})", job.rate_limit.as_deref().unwrap_or("no limit")),
                    ),
                ),
                ("created at", micros(&job.created_at)),
                ("available at", micros(&job.available_at)),
                ("updated at", micros(&job.updated_at)),
                ("finished at", at(&job.finished_at)),
            ];
            if job.state == JobState::Processing {
                lines.push(("locked by", opt(&job.locked_by)));
                lines.push(("lease expires", at(&job.lease_expires_at)));
            }
            if job.cancelled_by.is_some() {
                lines.push(("cancelled by", opt(&job.cancelled_by)));
                lines.push(("cancelled at", at(&job.cancelled_at)));
                lines.push(("reason", opt(&job.cancel_reason)));
            }
            for (k, v) in lines {
                println!("{:<14}{}", format!("{k}:"), out::printable(&v, false));
            }
            println!(
                "last error:\n{}",
                out::printable(job.last_error.as_deref().unwrap_or("-"), true)
            );
            println!("payload:\n{}", out::printable(&payload, true));
            if let Some(meta) = job
                .meta
                .as_ref()
                .and_then(|m| serde_json::to_string_pretty(m).ok())
            {
                println!("meta:\n{}", out::printable(&meta, true));
            }
            print_attempts(&attempts);
            crate::cmd_audit::print_job_actions(&actions);
            if job.state != JobState::Failed {
                out::warn(&format!("job {} is {}, not failed", job.id, job.state));
            }
            Ok(0)
        }
        FailedCommand::Retry(a) => bulk(&confirm::admin(pool, &a.acting), &a, Op::Retry).await,
        FailedCommand::Discard(a) => bulk(&confirm::admin(pool, &a.acting), &a, Op::Discard).await,
    }
}

/// The attempt history, newest first: one header line per attempt, then its error.
fn print_attempts(attempts: &[Attempt]) {
    if attempts.is_empty() {
        println!("attempts: none recorded");
        return;
    }
    println!("attempts (newest first):");
    for a in attempts {
        let when = match a.started_at {
            Some(start) => {
                let took = (a.finished_at - start)
                    .to_std()
                    .map(|d| {
                        humantime::format_duration(std::time::Duration::from_millis(
                            u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
                        ))
                    })
                    .map_or_else(|_| "?".to_owned(), |d| d.to_string());
                format!("at {} (ran {took})", micros(&start))
            }
            None => format!("ended {} (lease expired)", micros(&a.finished_at)),
        };
        println!(
            "  #{} {} {when} on {}",
            a.attempt,
            a.outcome,
            out::printable(a.worker.as_deref().unwrap_or("-"), false)
        );
        for line in out::printable(&a.error, true).lines() {
            println!("    {line}");
        }
        if a.truncated {
            println!("    (error cut to 8 KiB of {} bytes)", a.error_bytes);
        }
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

/// `2024-05-01 10:00:00` (UTC).
fn seconds(t: &Timestamp) -> String {
    t.format("%Y-%m-%d %H:%M:%S").to_string()
}

/// `2024-05-01 10:00:00.123456` (UTC).
fn micros(t: &Timestamp) -> String {
    t.format("%Y-%m-%d %H:%M:%S%.6f").to_string()
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

async fn bulk(admin: &Admin, a: &FailedBulkArgs, op: Op) -> Result<u8, CliError> {
    let verb = if op == Op::Retry { "retry" } else { "discard" };
    if let Some(id) = a.id {
        if a.confirm.dry_run {
            let failed = admin
                .job(JobId(id))
                .await
                .map_err(|e| CliError::mysqlq("cannot read the job", &e))?
                .is_some_and(|j| j.state == JobState::Failed);
            let action = if failed {
                format!("{verb} failed job {id}")
            } else {
                format!("{verb} nothing (job {id} is not a failed job)")
            };
            go_ahead(&a.confirm, false, u64::from(failed), &action)?;
            return Ok(0);
        }
        let ids = [JobId(id)];
        return match op {
            Op::Retry => {
                let r = admin
                    .retry_failed(Selection::Ids(&ids), |_| {})
                    .await
                    .map_err(|e| CliError::mysqlq("cannot retry the job", &e))?;
                if let Some(c) = r.conflicts.first() {
                    return Err(CliError::new(
                        conflict_text(c),
                        "retry it once that job has finished, or discard it",
                    ));
                }
                if r.retried == 0 {
                    return Err(not_failed(admin, id).await);
                }
                warn_not_revived(&r.not_revived);
                println!("retried job {id}: pending, runnable now");
                Ok(0)
            }
            Op::Discard => {
                let r = admin
                    .discard_failed(Selection::Ids(&ids), |_| {})
                    .await
                    .map_err(|e| CliError::mysqlq("cannot discard the job", &e))?;
                if r.discarded == 0 {
                    return Err(not_failed(admin, id).await);
                }
                println!("discarded job {id}");
                Ok(0)
            }
        };
    }
    // --all: the library walks keyset pages of failed ids, one bulk statement per page.
    let queue = a.queue.as_deref();
    let total = admin
        .failed_count(queue)
        .await
        .map_err(|e| CliError::mysqlq("cannot count the failed jobs", &e))?;
    let scope = queue.map_or(String::new(), |q| format!(" of queue `{q}`"));
    // Discarding every failed job asks first; retrying them does not (nothing is lost).
    let action = format!("{verb} {}{scope}", confirm::counted(total, "failed"));
    if !go_ahead(&a.confirm, op == Op::Discard, total, &action)? {
        return Ok(0);
    }
    let bar = out::progress(Some(total), &format!("{verb}ing failed jobs"));
    let which = Selection::All { queue };
    let step = |n: usize| bar.inc(n as u64);
    match op {
        Op::Retry => {
            let r = admin
                .retry_failed(which, step)
                .await
                .map_err(|e| CliError::mysqlq("retrying stopped part-way", &e))?;
            bar.finish_and_clear();
            for c in &r.conflicts {
                out::warn(&format!("{}; left in failed", conflict_text(c)));
            }
            warn_not_revived(&r.not_revived);
            if r.conflicts.is_empty() {
                println!("retried {}{scope}", confirm::counted(r.retried, "failed"));
            } else {
                println!(
                    "retried {}{scope}; {} left failed (dedupe key taken)",
                    confirm::counted(r.retried, "failed"),
                    r.conflicts.len()
                );
            }
        }
        Op::Discard => {
            let r = admin
                .discard_failed(which, step)
                .await
                .map_err(|e| CliError::mysqlq("discarding stopped part-way", &e))?;
            bar.finish_and_clear();
            println!(
                "discarded {}{scope}",
                confirm::counted(r.discarded, "failed")
            );
        }
    }
    Ok(0)
}

fn conflict_text(c: &DedupeConflict) -> String {
    conflict_as(c, "retried")
}

/// "job N not `done`: its dedupe key … is held by …".
pub(crate) fn conflict_as(c: &DedupeConflict, done: &str) -> String {
    let key = out::printable(c.dedupe_key.as_deref().unwrap_or("?"), false);
    match c.holder {
        Some(h) => format!(
            "job {} not {done}: its dedupe key `{key}` is held by job {h}",
            c.id
        ),
        None => format!(
            "job {} not {done}: its dedupe key `{key}` is held by another job",
            c.id
        ),
    }
}

/// Warns of the workflow steps a retry left cancelled (their dedupe key is taken).
pub(crate) fn warn_not_revived(not_revived: &[DedupeConflict]) {
    for c in not_revived {
        out::warn(&format!(
            "{}; the workflow step stays cancelled",
            conflict_as(c, "brought back")
        ));
    }
}

async fn not_failed(admin: &Admin, id: u64) -> CliError {
    match admin.job(JobId(id)).await {
        Ok(Some(j)) => CliError::new(
            format!("job {id} is {}, not failed", j.state),
            "only failed jobs can be retried or discarded; `mysqlq-cli failed list` shows them",
        ),
        Ok(None) => unknown_job(id),
        Err(e) => CliError::mysqlq("cannot read the job", &e),
    }
}
