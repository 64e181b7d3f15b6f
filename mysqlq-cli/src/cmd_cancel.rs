//! `cancel` and `delete`.

use mysqlq::JobId;
use mysqlq::admin::{Admin, JobSelection};

use crate::args::{CancelArgs, DeleteArgs};
use crate::confirm::{self, go_ahead};
use crate::db::Target;
use crate::error::CliError;
use crate::out;

fn to_json<T: serde::Serialize>(v: &T) -> Result<String, CliError> {
    serde_json::to_string_pretty(v)
        .map_err(|e| CliError::new(format!("cannot encode JSON: {e}"), "report this bug"))
}

/// `cancel ID…` / `cancel --queue Q --kind K` / `cancel --all`.
pub(crate) async fn cancel(target: &Target, a: &CancelArgs) -> Result<u8, CliError> {
    let by = a.by.clone().unwrap_or_else(confirm::default_by);
    let admin = Admin::new(target.pool(2).await?).by(by.clone());
    let ids: Vec<JobId> = a.ids.iter().copied().map(JobId).collect();
    let which = if ids.is_empty() {
        JobSelection::Filter {
            queue: a.queue.as_deref(),
            kind: a.kind.as_deref(),
        }
    } else {
        JobSelection::Ids(&ids)
    };
    // A cancel by queue, kind or --all asks first; one by ids does not.
    let bulk = ids.is_empty();
    if bulk || a.confirm.dry_run {
        let n = admin
            .cancel_count(which)
            .await
            .map_err(|e| CliError::mysqlq("cannot count the jobs to cancel", &e))?;
        let of = match (a.queue.as_deref(), a.kind.as_deref()) {
            _ if !bulk => String::new(),
            (Some(q), Some(k)) => format!(" of queue `{q}` and kind `{k}`"),
            (Some(q), None) => format!(" of queue `{q}`"),
            (None, Some(k)) => format!(" of kind `{k}`"),
            (None, None) => " of every queue".to_owned(),
        };
        let action = format!("cancel {} (waiting and running){of}", confirm::jobs(n));
        if !go_ahead(&a.confirm, bulk, n, &action)? {
            return Ok(0);
        }
    }
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
    println!("cancelled {}{running}", confirm::jobs(r.cancelled));
    Ok(0)
}

/// `delete ID…`.
pub(crate) async fn delete(target: &Target, a: &DeleteArgs) -> Result<u8, CliError> {
    let admin = confirm::admin(target.pool(2).await?, &a.acting);
    let ids: Vec<JobId> = a.ids.iter().copied().map(JobId).collect();
    let bulk = ids.len() > 1;
    if bulk || a.confirm.dry_run {
        let mut n = 0;
        for id in &ids {
            let job = admin
                .job(*id)
                .await
                .map_err(|e| CliError::mysqlq("cannot read the job", &e))?;
            if job.is_some_and(|j| j.state != mysqlq::admin::JobState::Processing) {
                n += 1;
            }
        }
        let action = format!("delete {} with their attempt history", confirm::jobs(n));
        if !go_ahead(&a.confirm, bulk, n, &action)? {
            return Ok(0);
        }
    }
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
    for id in &r.in_workflow {
        out::warn(&format!(
            "job {id} is a workflow step: not deleted (it goes with its workflow: `mysqlq-cli \
             workflow cancel`, then the pruner)"
        ));
    }
    if r.deleted == 0 {
        return Err(CliError::new(
            "no job was deleted",
            "running jobs must be cancelled first (`mysqlq-cli cancel ID`), workflow steps go \
             with their workflow; check the ids",
        ));
    }
    println!("deleted {}", confirm::jobs(r.deleted));
    Ok(0)
}
