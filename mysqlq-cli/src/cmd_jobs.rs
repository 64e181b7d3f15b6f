//! `jobs search | count | run-now | retry | cancel | delete`: the dashboard's search and its
//! bulk actions from a shell (`mysqlq::filter`, `Admin::search`, `Admin::count_matching`,
//! `Admin::act`). An action on a search counts first, says how many jobs match and up to which
//! id, refuses past `--max`, asks (or takes `--yes`), then acts on at most that many with a
//! progress bar; SIGINT or SIGTERM stops it between chunks, recorded as stopped.

use std::sync::atomic::{AtomicBool, Ordering};

use mysqlq::JobId;
use mysqlq::admin::{ActReport, Action, Admin, Counted, Cursor, SearchPage, Target, Walk};
use mysqlq::filter::Filter;

use crate::args_jobs::{JobsActArgs, JobsArgs, JobsCommand, JobsCountArgs, JobsSearchArgs};
use crate::confirm::{self, go_ahead};
use crate::db::Target as Db;
use crate::error::CliError;
use crate::out::{self, Table};
use crate::signals::Stop;

/// Jobs a dry run lists as a sample.
const SAMPLE: u32 = 20;

/// Runs a `jobs` subcommand; returns the exit code.
pub(crate) async fn jobs(db: &Db, a: JobsArgs) -> Result<u8, CliError> {
    match a.command {
        JobsCommand::Search(s) => search(db, &s).await.map(|()| 0),
        JobsCommand::Count(c) => count(db, &c).await.map(|()| 0),
        JobsCommand::RunNow(x) => act(db, Action::RunNow, &x).await,
        JobsCommand::Retry(x) => act(db, Action::Retry, &x).await,
        JobsCommand::Cancel(x) => act(db, Action::Cancel, &x).await,
        JobsCommand::Delete(x) => act(db, Action::Delete, &x).await,
    }
}

/// Parses a search; the parser's message names the token at fault.
fn parse(text: Option<&str>) -> Result<Filter, CliError> {
    let text = text.unwrap_or("");
    Filter::parse(text).map_err(|e| {
        CliError::usage(
            format!("bad search `{text}`: {e}"),
            "fix that term (`mysqlq-cli jobs search --help` lists the qualifiers)",
        )
    })
}

/// `` `kind:k` `` or "every job" for the empty search.
fn named(f: &Filter) -> String {
    if f.is_empty() {
        "the empty search (every job)".to_owned()
    } else {
        format!("`{f}`")
    }
}

/// `text` quoted for a POSIX shell.
fn sh(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

fn to_json<T: serde::Serialize>(v: &T) -> Result<String, CliError> {
    serde_json::to_string_pretty(v)
        .map_err(|e| CliError::new(format!("cannot encode JSON: {e}"), "report this bug"))
}

/// `N jobs match` / `1 job matches`.
fn match_line(n: u64) -> String {
    if n == 1 {
        "1 job matches".to_owned()
    } else {
        format!("{n} jobs match")
    }
}

/// `jobs search`.
async fn search(db: &Db, a: &JobsSearchArgs) -> Result<(), CliError> {
    let filter = parse(a.filter.as_deref())?;
    let cursor = a
        .cursor
        .as_deref()
        .map(|c| {
            c.parse::<Cursor>().map_err(|_| {
                CliError::usage(
                    format!("`{c}` is not a page cursor"),
                    "pass the cursor a page of the same search printed, or leave --cursor out",
                )
            })
        })
        .transpose()?;
    let admin = Admin::new(db.pool(2).await?);
    let page = admin
        .search(&filter, cursor, a.limit)
        .await
        .map_err(|e| CliError::mysqlq("cannot search the jobs", &e))?;
    if a.json {
        println!("{}", to_json(&page)?);
        return Ok(());
    }
    if page.rows.is_empty() {
        let part = if page.window.is_some() {
            " in the part searched"
        } else {
            ""
        };
        println!("no job matches {}{part}", named(&filter));
    } else {
        print!("{}", table(&page).render());
    }
    if let Some(w) = page.window {
        let what = if w.rows {
            "rows (payload, meta, worker, error, time and priority filters read each row)"
        } else {
            "index entries"
        };
        println!(
            "searched a window of {} {what}: more may match beyond it",
            w.read
        );
    }
    if let Some(next) = page.next {
        println!(
            "{}",
            crate::program::rename(&format!(
                "next page: `mysqlq-cli jobs search {} --cursor {next}`",
                sh(&filter.to_string())
            ))
        );
    }
    Ok(())
}

/// The page as a table: the walk's time column, one line of the args.
fn table(page: &SearchPage) -> Table {
    let time = match page.walk {
        Walk::Due => "DUE (UTC)",
        Walk::Finished => "FINISHED (UTC)",
        _ => "CREATED (UTC)",
    };
    let mut t = Table::new(&["ID", "STATE", "QUEUE", "KIND", ">ATTEMPTS", time, "ARGS"]);
    for r in &page.rows {
        let at = match page.walk {
            Walk::Due => Some(r.available_at),
            Walk::Finished => r.finished_at,
            _ => Some(r.created_at),
        };
        let args: String = r
            .payload_head
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let args = if args.chars().count() > 60 {
            args.chars().take(59).collect::<String>() + "…"
        } else {
            args
        };
        t.row(vec![
            r.id.to_string(),
            r.state.as_str().to_owned(),
            r.queue.clone(),
            r.kind.clone().unwrap_or_else(|| "-".into()),
            format!("{}/{}", r.attempts, r.max_attempts),
            at.map_or_else(|| "-".into(), |t| t.format("%Y-%m-%d %H:%M:%S").to_string()),
            args,
        ]);
    }
    t
}

/// `jobs count`.
async fn count(db: &Db, a: &JobsCountArgs) -> Result<(), CliError> {
    let filter = parse(a.filter.as_deref())?;
    let admin = Admin::new(db.pool(2).await?);
    let c = counted(&admin, &filter).await?;
    if a.json {
        let v = serde_json::json!({
            "filter": filter.to_string(),
            "count": c.count,
            "horizon": c.horizon,
        });
        println!("{}", to_json(&v)?);
    } else {
        println!(
            "{} {} (ids up to {})",
            match_line(c.count),
            named(&filter),
            c.horizon
        );
    }
    Ok(())
}

async fn counted(admin: &Admin, filter: &Filter) -> Result<Counted, CliError> {
    admin.count_matching(filter).await.map_err(|e| match &e {
        // "counting took over 10 s; narrow the search (…)".
        mysqlq::Error::Invalid { reason, .. } => match reason.split_once("; ") {
            Some((problem, fix)) => CliError::new(problem, fix),
            None => CliError::new(reason.clone(), "narrow the search"),
        },
        _ => CliError::mysqlq("cannot count the jobs", &e),
    })
}

/// The words of an action: imperative, participle, progressive.
fn words(action: Action) -> (&'static str, &'static str, &'static str) {
    match action {
        Action::RunNow => ("run now", "run now", "running now"),
        Action::Retry => ("retry", "retried", "retrying"),
        Action::Cancel => ("cancel", "cancelled", "cancelling"),
        _ => ("delete", "deleted", "deleting"),
    }
}

/// `jobs run-now | retry | cancel | delete`, by ids or `--filter`.
async fn act(db: &Db, action: Action, a: &JobsActArgs) -> Result<u8, CliError> {
    let (verb, past, ing) = words(action);
    let admin = confirm::admin(db.pool(2).await?, &a.acting);
    let ids: Vec<JobId> = a.ids.iter().copied().map(JobId).collect();
    // What the action can reach: the search in the states it applies to, or the ids' jobs in
    // those states.
    let (filter, bulk, what) = if let Some(text) = a.filter.as_deref() {
        let asked = parse(Some(text))?;
        let Some(f) = action.narrow(&asked) else {
            let states: Vec<&str> = action.states().iter().map(|s| s.as_str()).collect();
            return Err(CliError::usage(
                format!("{verb} applies to none of the states of `{asked}`"),
                format!("search for {} jobs", states.join(", ")),
            ));
        };
        let what = format!("matching {}", named(&f));
        (f, true, what)
    } else {
        let f = Filter {
            ids: ids.clone(),
            ..Filter::default()
        };
        let f = action.narrow(&f).expect("an action applies to some states");
        let what = format!("of the {} given", ids.len());
        (f, ids.len() > 1, what)
    };
    let c = counted(&admin, &filter).await?;
    if a.filter.is_some() {
        println!(
            "{} {} (ids up to {})",
            match_line(c.count),
            named(&filter),
            c.horizon
        );
    } else {
        println!("{} {what} can be {past}", confirm::jobs(c.count));
    }
    if let Some(max) = a.max
        && c.count > max
    {
        return Err(CliError::new(
            format!("{} now, more than --max {max}", match_line(c.count)),
            "run again to see them, or raise --max",
        ));
    }
    if a.confirm.dry_run && c.count > 0 {
        let sample = admin
            .search(&filter, None, SAMPLE)
            .await
            .map_err(|e| CliError::mysqlq("cannot list a sample", &e))?;
        let shown = sample.rows.len() as u64;
        if shown < c.count {
            println!("the first {shown}:");
        } else {
            println!("they are:");
        }
        print!("{}", table(&sample).render());
    }
    let action_text = format!("{verb} {} {what}", confirm::jobs(c.count));
    if !go_ahead(&a.confirm, bulk, c.count, &action_text)? {
        return Ok(0);
    }
    if c.count == 0 {
        if a.filter.is_none() {
            return Err(not_applicable(action));
        }
        println!("nothing to {verb}");
        return Ok(0);
    }
    let target = if a.filter.is_some() {
        Target::Matching {
            filter: &filter,
            confirmed: c,
        }
    } else {
        Target::Ids(&ids)
    };
    let report = run(&admin, action, target, c.count, ing).await?;
    let mut line = format!("done: {} {past}", confirm::jobs(report.changed));
    if report.left > 0 {
        line.push_str(&format!(
            "; {} left (no longer matching, or not a job it applies to)",
            report.left
        ));
    }
    if report.stopped {
        line.push_str("; stopped before the end");
    }
    if let Some(now) = report.match_now {
        line.push_str(&format!(
            "; {} now{}",
            match_line(now),
            if now > 0 && !report.stopped {
                ": run again to act on them"
            } else {
                ""
            }
        ));
    }
    println!("{line} (audit #{})", report.audit);
    if a.filter.is_none() && report.changed == 0 {
        return Err(not_applicable(action));
    }
    Ok(0)
}

/// None of the ids given could be changed.
fn not_applicable(action: Action) -> CliError {
    let (verb, past, _) = words(action);
    let states: Vec<&str> = action.states().iter().map(|s| s.as_str()).collect();
    CliError::new(
        format!("no job was {past}"),
        format!(
            "{verb} applies to {} jobs; `mysqlq-cli jobs search id:ID` shows a job's state",
            states.join(", ")
        ),
    )
}

/// `Admin::act` with a progress bar; the first SIGINT or SIGTERM stops it after its chunk.
async fn run(
    admin: &Admin,
    action: Action,
    target: Target<'_>,
    expected: u64,
    ing: &str,
) -> Result<ActReport, CliError> {
    let stop = AtomicBool::new(false);
    let mut signals = Stop::new();
    let bar = out::progress(Some(expected), &format!("{ing} jobs"));
    let acting = admin.act(action, target, Some(&stop), |r| bar.set_position(r.changed));
    tokio::pin!(acting);
    let result = loop {
        tokio::select! {
            r = &mut acting => break r,
            () = signals.recv(), if !stop.load(Ordering::SeqCst) => {
                stop.store(true, Ordering::SeqCst);
                bar.suspend(|| out::warn("stopping after the current chunk (the trail records it as stopped)"));
            }
        }
    };
    bar.finish_and_clear();
    result.map_err(|e| {
        CliError::mysqlq(
            &format!("{ing} stopped part-way (the audit trail says how many changed)"),
            &e,
        )
    })
}
