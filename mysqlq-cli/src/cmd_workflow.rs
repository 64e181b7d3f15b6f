//! `workflow list|show|cancel|retry`: workflows and batches for operators.

use mysqlq::admin::{Admin, WorkflowDetail, WorkflowQuery, WorkflowSummary};

use crate::args::{
    WorkflowCancelArgs, WorkflowCommand, WorkflowIdArgs, WorkflowListArgs, WorkflowRetryArgs,
};
use crate::confirm::{self, go_ahead};
use crate::db::Target;
use crate::error::CliError;
use crate::out::{self, Table};

pub(crate) async fn workflow(target: &Target, c: WorkflowCommand) -> Result<u8, CliError> {
    match c {
        WorkflowCommand::List(a) => list(target, &a).await,
        WorkflowCommand::Show(a) => show(target, &a).await,
        WorkflowCommand::Cancel(a) => cancel(target, &a).await,
        WorkflowCommand::Retry(a) => retry(target, &a).await,
    }
}

fn to_json<T: serde::Serialize>(v: &T) -> Result<String, CliError> {
    serde_json::to_string_pretty(v)
        .map_err(|e| CliError::new(format!("cannot encode JSON: {e}"), "report this bug"))
}

fn counts(w: &WorkflowSummary) -> String {
    w.steps.summary()
}

async fn list(target: &Target, a: &WorkflowListArgs) -> Result<u8, CliError> {
    let admin = Admin::new(target.pool(2).await?);
    let rows = admin
        .workflows(&WorkflowQuery {
            state: a.state.as_deref(),
            kind: a.kind.as_deref(),
            name: a.name.as_deref(),
            before: None,
            limit: a.limit,
        })
        .await
        .map_err(|e| CliError::mysqlq("cannot list the workflows", &e))?;
    if a.json {
        println!("{}", to_json(&rows)?);
        return Ok(0);
    }
    if rows.is_empty() {
        println!("no workflows");
        return Ok(0);
    }
    let mut t = Table::new(&[
        ">ID",
        "KIND",
        "NAME",
        "STATE",
        "CREATED (UTC)",
        ">STEPS",
        "BY STATE",
    ]);
    for w in &rows {
        t.row(vec![
            w.id.to_string(),
            w.kind.clone(),
            w.name.clone(),
            w.state.clone(),
            w.created_at.format("%Y-%m-%d %H:%M:%S").to_string(),
            w.steps.total().to_string(),
            counts(w),
        ]);
    }
    print!("{}", t.render());
    Ok(0)
}

async fn get(admin: &Admin, id: u64) -> Result<WorkflowDetail, CliError> {
    admin
        .workflow(id)
        .await
        .map_err(|e| CliError::mysqlq("cannot read the workflow", &e))?
        .ok_or_else(|| {
            CliError::new(
                format!("no workflow with id {id}"),
                "list them with `mysqlq-cli workflow list` (finished ones are pruned with the jobs' retention)",
            )
        })
}

async fn show(target: &Target, a: &WorkflowIdArgs) -> Result<u8, CliError> {
    let admin = Admin::new(target.pool(2).await?);
    let d = get(&admin, a.id).await?;
    if a.json {
        println!("{}", to_json(&d)?);
        return Ok(0);
    }
    let w = &d.workflow;
    println!(
        "{} {} `{}`: {}, {} ({})",
        w.kind,
        w.id,
        out::printable(&w.name, false),
        w.state,
        plural(w.steps.total(), "step"),
        counts(w)
    );
    let mut t = Table::new(&[
        "STEP",
        ">JOB",
        "KIND",
        "STATE",
        ">ATTEMPTS",
        "AFTER",
        "NOTE",
    ]);
    let names: std::collections::HashMap<u64, String> = d
        .steps
        .iter()
        .map(|s| (s.job.0, step_name(&d, s)))
        .collect();
    for s in &d.steps {
        let after: Vec<String> = s
            .deps
            .iter()
            .map(|(id, state)| {
                let n = names.get(&id.0).cloned().unwrap_or_else(|| id.to_string());
                if state == "broken" {
                    format!("{n} (broken)")
                } else {
                    n
                }
            })
            .collect();
        let mut note: Vec<String> = Vec::new();
        if s.ignore_failed {
            note.push("ignores failed".to_owned());
        }
        if s.ignore_cancelled {
            note.push("ignores cancelled".to_owned());
        }
        if let Some(r) = &s.cancel_reason {
            note.push(r.clone());
        }
        t.row(vec![
            names[&s.job.0].clone(),
            s.job.to_string(),
            s.kind.clone().unwrap_or_else(|| "-".to_owned()),
            s.state.clone(),
            format!("{}/{}", s.attempts, s.max_attempts),
            if after.is_empty() {
                "-".to_owned()
            } else {
                after.join(", ")
            },
            note.join("; "),
        ]);
    }
    print!("{}", t.render());
    Ok(0)
}

/// `name`, or `name#ordinal` for a step of a fan-out.
fn step_name(d: &WorkflowDetail, s: &mysqlq::admin::WorkflowStep) -> String {
    let shared = d.steps.iter().filter(|o| o.name == s.name).count() > 1;
    if shared {
        format!("{}#{}", s.name, s.ordinal)
    } else {
        s.name.clone()
    }
}

async fn cancel(target: &Target, a: &WorkflowCancelArgs) -> Result<u8, CliError> {
    let by = a.by.clone().unwrap_or_else(confirm::default_by);
    let admin = Admin::new(target.pool(2).await?).by(by.clone());
    let d = get(&admin, a.id).await?;
    let c = &d.workflow.steps;
    let open = c.waiting + c.pending + c.processing;
    let action = format!(
        "cancel {} of {} {}",
        plural(open, "open step"),
        d.workflow.kind,
        a.id
    );
    if !go_ahead(&a.confirm, true, open, &action)? {
        return Ok(0);
    }
    let r = admin
        .cancel_workflow(a.id, &by, a.reason.as_deref())
        .await
        .map_err(|e| CliError::mysqlq("cancelling the workflow stopped part-way", &e))?;
    let running = if r.running.is_empty() {
        String::new()
    } else {
        format!(
            " ({} running: stopped at their next heartbeat)",
            r.running.len()
        )
    };
    println!("cancelled {}{running}", confirm::jobs(r.cancelled));
    Ok(0)
}

async fn retry(target: &Target, a: &WorkflowRetryArgs) -> Result<u8, CliError> {
    let admin = confirm::admin(target.pool(2).await?, &a.acting);
    get(&admin, a.id).await?;
    let r = admin
        .retry_workflow(a.id)
        .await
        .map_err(|e| CliError::mysqlq("cannot retry the workflow's failed steps", &e))?;
    crate::cmd_failed::warn_not_revived(&r.not_revived);
    println!(
        "retried {}; {} waiting again",
        confirm::jobs(r.retried),
        plural(r.revived, "cancelled step")
    );
    Ok(0)
}

/// `1 step`, `2 steps`.
fn plural(n: u64, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}
