//! `cancel` and `delete`.

use mysqlq::JobId;
use mysqlq::admin::{Admin, JobSelection};

use crate::args::{CancelArgs, DeleteArgs};
use crate::db::Target;
use crate::error::CliError;
use crate::out;

/// `cancelled_by` when `--by` is not given: `cli:<login name>` (`USER`, `LOGNAME` or
/// `USERNAME`), or `cli` when none is set.
fn default_by() -> String {
    ["USER", "LOGNAME", "USERNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|u| !u.trim().is_empty()))
        .map_or_else(|| "cli".to_owned(), |user| format!("cli:{user}"))
}

fn to_json<T: serde::Serialize>(v: &T) -> Result<String, CliError> {
    serde_json::to_string_pretty(v)
        .map_err(|e| CliError::new(format!("cannot encode JSON: {e}"), "report this bug"))
}

/// `cancel ID…` / `cancel --queue Q --kind K` / `cancel --all`.
pub(crate) async fn cancel(target: &Target, a: &CancelArgs) -> Result<u8, CliError> {
    let admin = Admin::new(target.pool(2).await?);
    let by = a.by.clone().unwrap_or_else(default_by);
    let ids: Vec<JobId> = a.ids.iter().copied().map(JobId).collect();
    let which = if ids.is_empty() {
        JobSelection::Filter {
            queue: a.queue.as_deref(),
            kind: a.kind.as_deref(),
        }
    } else {
        JobSelection::Ids(&ids)
    };
    let bar = out::progress(None, "cancelling jobs");
    let r = admin
        .cancel(which, &by, a.reason.as_deref(), |n| bar.inc(n as u64))
        .await
        .map_err(|e| CliError::mysqlq("cancelling stopped part-way", &e))?;
    bar.finish_and_clear();
    if a.json {
        println!("{}", to_json(&r)?);
        return Ok(0);
    }
    for id in &r.not_cancellable {
        match admin.job(*id).await {
            Ok(Some(j)) => out::warn(&format!(
                "job {id} is {}, not waiting or running: left as it is",
                j.state
            )),
            Ok(None) => out::warn(&format!("no job with id {id}")),
            Err(e) => return Err(CliError::mysqlq("cannot read the job", &e)),
        }
    }
    if !ids.is_empty() && r.cancelled == 0 {
        return Err(CliError::new(
            "no job was cancelled",
            "only pending (ready, scheduled, retrying) and processing jobs can be cancelled; \
             `mysqlq-cli failed show ID` shows a job's state",
        ));
    }
    let running = if r.running.is_empty() {
        String::new()
    } else {
        format!(
            " ({} running: their workers stop them at their next heartbeat)",
            r.running.len()
        )
    };
    println!("cancelled {} jobs{running}", r.cancelled);
    Ok(0)
}

/// `delete ID…`.
pub(crate) async fn delete(target: &Target, a: &DeleteArgs) -> Result<u8, CliError> {
    let admin = Admin::new(target.pool(2).await?);
    let ids: Vec<JobId> = a.ids.iter().copied().map(JobId).collect();
    let r = admin
        .delete(&ids)
        .await
        .map_err(|e| CliError::mysqlq("cannot delete", &e))?;
    if a.json {
        println!("{}", to_json(&r)?);
        return Ok(0);
    }
    for id in &r.unknown {
        out::warn(&format!("no job with id {id}"));
    }
    for id in &r.running {
        out::warn(&format!(
            "job {id} is running: not deleted (`mysqlq-cli cancel {id}` first)"
        ));
    }
    if r.deleted == 0 {
        return Err(CliError::new(
            "no job was deleted",
            "running jobs must be cancelled first (`mysqlq-cli cancel ID`); check the ids",
        ));
    }
    println!("deleted {} jobs", r.deleted);
    Ok(0)
}
