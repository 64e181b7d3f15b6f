//! `audit`: the operator actions on record, and the part of `failed show` that lists the actions
//! that changed one job.

use mysqlq::JobId;
use mysqlq::admin::{Admin, AuditQuery, AuditRecord};

use crate::args::AuditArgs;
use crate::db::Target;
use crate::error::CliError;
use crate::out::{self, Table};

/// Most actions `failed show` lists for one job.
const JOB_ACTIONS: u32 = 100;

/// `audit [--queue Q | --job ID] [--limit N] [--json]`.
pub(crate) async fn audit(target: &Target, a: &AuditArgs) -> Result<(), CliError> {
    let admin = Admin::new(target.pool(2).await?);
    let rows = admin
        .audit(&AuditQuery {
            queue: a.queue.as_deref(),
            job: a.job.map(JobId),
            before: None,
            limit: a.limit,
        })
        .await
        .map_err(|e| CliError::mysqlq("cannot read the audit trail", &e))?;
    if a.json {
        let text = serde_json::to_string_pretty(&rows)
            .map_err(|e| CliError::new(format!("cannot encode JSON: {e}"), "report this bug"))?;
        println!("{text}");
        return Ok(());
    }
    if rows.is_empty() {
        println!("no operator actions on record");
        return Ok(());
    }
    let mut t = Table::new(&[
        ">ID", "AT (UTC)", "BY", "ACTION", "QUEUE", "KIND", ">JOBS", "REASON", "DETAIL",
    ]);
    let cell = |v: &Option<String>| {
        v.as_deref()
            .map_or_else(|| "-".to_owned(), |s| out::printable(s, false).into_owned())
    };
    for r in &rows {
        t.row(vec![
            r.id.to_string(),
            r.at.format("%Y-%m-%d %H:%M:%S").to_string(),
            out::printable(&r.actor, false).into_owned(),
            r.action.clone(),
            cell(&r.queue),
            cell(&r.kind),
            r.jobs.to_string(),
            cell(&r.reason),
            cell(&r.detail),
        ]);
    }
    print!("{}", t.render());
    Ok(())
}

/// The actions that changed job `id`, newest first.
pub(crate) async fn of_job(admin: &Admin, id: JobId) -> Result<Vec<AuditRecord>, CliError> {
    admin
        .audit(&AuditQuery {
            job: Some(id),
            limit: JOB_ACTIONS,
            ..AuditQuery::default()
        })
        .await
        .map_err(|e| CliError::mysqlq("cannot read the job's operator actions", &e))
}

/// `operator actions (newest first):` and a line per action.
pub(crate) fn print_job_actions(actions: &[AuditRecord]) {
    if actions.is_empty() {
        println!("operator actions: none recorded");
        return;
    }
    println!("operator actions (newest first):");
    for a in actions {
        let reason = a
            .reason
            .as_deref()
            .map_or_else(String::new, |r| format!(": {}", out::printable(r, false)));
        println!(
            "  {} {} by {}{reason}",
            a.at.format("%Y-%m-%d %H:%M:%S%.6f"),
            a.action,
            out::printable(&a.actor, false)
        );
    }
}
