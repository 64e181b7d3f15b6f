//! `migrate`, `purge`, `pause`/`resume`, `enqueue`.

use mysqlq::admin::JobState;
use mysqlq::{EnqueueOptions, Enqueued, NewJob};

use crate::args::{Acting, PurgeArgs, PurgeStatus};
use crate::args_kinds::EnqueueArgs;
use crate::confirm;
use crate::db::Target;
use crate::error::CliError;
use crate::out;

/// `migrate`: applies the migrations and says what it applied (or that there was nothing to do).
pub(crate) async fn migrate(target: &Target) -> Result<(), CliError> {
    let pool = target.pool(2).await?;
    let before = {
        let mut conn = crate::db::acquire(&pool).await?;
        mysqlq::schema_version(&mut conn)
            .await
            .map_err(|e| CliError::mysqlq("cannot read the schema version", &e))?
    };
    let version = mysqlq::migrate(&pool)
        .await
        .map_err(|e| CliError::mysqlq("migration failed", &e))?;
    println!("{}", migrate_summary(before, version));
    pool.close().await;
    Ok(())
}

/// What `migrate` did, from the schema version before and after.
fn migrate_summary(before: u32, after: u32) -> String {
    match after.saturating_sub(before) {
        0 => format!("schema version {after} (up to date, nothing applied)"),
        1 => format!("applied migration {after}: schema version {before} -> {after}"),
        n => format!(
            "applied {n} migrations ({} to {after}): schema version {before} -> {after}",
            before + 1
        ),
    }
}

/// `purge`: the job-queue article's batched cleanup, repeated until a batch comes back short.
pub(crate) async fn purge(target: &Target, a: &PurgeArgs) -> Result<(), CliError> {
    let admin = confirm::admin(target.pool(2).await?, &a.acting);
    let state = match a.status {
        PurgeStatus::Completed => JobState::Completed,
        PurgeStatus::Failed => JobState::Failed,
        PurgeStatus::Cancelled => JobState::Cancelled,
    };
    let n = admin
        .purge_count(state, a.older_than)
        .await
        .map_err(|e| CliError::mysqlq("cannot count the jobs to purge", &e))?;
    let action = format!(
        "delete {} that finished more than {} ago",
        confirm::counted(n, state.as_str()),
        humantime::format_duration(a.older_than)
    );
    if !confirm::go_ahead(&a.confirm, true, n, &action)? {
        return Ok(());
    }
    let bar = out::progress(None, &format!("deleting {state} jobs"));
    let total = admin
        .purge(state, a.older_than, a.batch, |n| bar.inc(n))
        .await
        .map_err(|e| CliError::mysqlq("purge stopped part-way", &e))?;
    bar.finish_and_clear();
    println!(
        "deleted {} that finished more than {} ago",
        confirm::counted(total, state.as_str()),
        humantime::format_duration(a.older_than)
    );
    Ok(())
}

/// `pause` / `resume`.
pub(crate) async fn set_paused(
    target: &Target,
    queue: &str,
    acting: &Acting,
    paused: bool,
) -> Result<(), CliError> {
    let admin = confirm::admin(target.pool(2).await?, acting);
    let known = crate::registry()
        .map(|r| r.queues().contains(&queue))
        .unwrap_or(false)
        || admin
            .queue_has_jobs(queue)
            .await
            .map_err(|e| CliError::mysqlq("cannot look the queue up", &e))?;
    if paused {
        admin.pause(queue).await
    } else {
        admin.resume(queue).await
    }
    .map_err(|e| CliError::mysqlq("cannot set the pause flag", &e))?;
    if !known {
        out::warn(&format!(
            "no job of queue `{queue}` exists and no registered job uses it; the flag is set anyway \
             (check the spelling; `mysqlq-cli stats` lists the queues{})",
            if paused {
                format!("; `mysqlq-cli resume {queue}` takes it back")
            } else {
                String::new()
            }
        ));
    }
    println!(
        "{} queue `{queue}`",
        if paused { "paused" } else { "resumed" }
    );
    Ok(())
}

/// `enqueue`: one job by kind and JSON payload.
pub(crate) async fn enqueue(target: &Target, a: EnqueueArgs) -> Result<(), CliError> {
    if a.kind.is_empty() || a.kind.len() > 128 || a.kind.chars().any(char::is_whitespace) {
        return Err(CliError::usage(
            format!("invalid kind `{}`", a.kind),
            "a kind is 1 to 128 characters without spaces, as in #[job(name = \"...\")]",
        ));
    }
    let registry = crate::registry()?;
    let registered = registry.get(&a.kind);
    match registered {
        Some(r) => r.check_payload(&a.json.to_string()).map_err(|e| {
            let fix = match r.fields_text() {
                Some(f) if f.is_empty() => {
                    "this job takes no arguments: pass --json '{}'".to_owned()
                }
                Some(f) => format!(
                    "pass --json with an object of the job's arguments: {f} (`mysqlq-cli kinds \
                     --json` gives each job's JSON Schema)"
                ),
                None => "pass --json with an object of the job's arguments".to_owned(),
            };
            CliError::usage(
                format!("the payload does not fit job `{}`: {e}", a.kind),
                fix,
            )
        })?,
        None if !a.json.is_object() => {
            return Err(CliError::usage(
                "the payload must be a JSON object of the job's arguments",
                "pass --json with an object, e.g. --json '{\"order_id\": 42}'",
            ));
        }
        None => {}
    }
    let mut opts = EnqueueOptions::new();
    let queue = match (&a.queue, registered) {
        (Some(q), _) => q.clone(),
        (None, Some(r)) => r.queue().to_owned(),
        (None, None) => {
            return Err(CliError::usage(
                format!("kind `{}` is not registered in this binary", a.kind),
                "check the spelling, or pass --queue QUEUE to enqueue it for a worker that links the job",
            ));
        }
    };
    if let Some(p) = a
        .priority
        .or(registered.map(mysqlq::JobRegistration::priority))
    {
        opts = opts.priority(p);
    }
    if let Some(m) = a
        .max_attempts
        .or(registered.map(|r| r.retry_policy().max_attempts))
    {
        opts = opts.max_attempts(m);
    }
    if let Some(d) = a.delay {
        opts = opts.delay(d);
    }
    if let Some(k) = &a.dedupe_key {
        opts = opts.dedupe_key(k.clone());
    }
    let job = NewJob::new(&a.kind, &queue, &a.json, &opts)
        .map_err(|e| CliError::mysqlq("cannot enqueue", &e))?;
    if registered.is_none() {
        out::warn(&format!(
            "kind `{}` is not registered in this binary: its payload is not checked; enqueued on queue `{queue}` for a worker that links it",
            a.kind
        ));
    }
    let pool = target.pool(2).await?;
    let result = mysqlq::enqueue_many(&pool, [job])
        .await
        .map_err(|e| CliError::mysqlq("cannot enqueue", &e))?;
    // A job no live worker will take waits for ever, silently: say so (it is enqueued).
    if let Ok(live) = mysqlq::admin::Admin::new(pool.clone()).live_queues().await
        && !live.contains(&queue)
    {
        let serving = if live.is_empty() {
            "no worker has reported in the last minute".to_owned()
        } else {
            format!("live workers serve: {}", live.join(", "))
        };
        out::warn(&format!(
            "no live worker serves queue `{queue}` ({serving}); the job waits until one does"
        ));
    }
    match result.first() {
        Some(Enqueued::Inserted(id)) => println!("{id}"),
        Some(Enqueued::Duplicate(id)) => println!("duplicate of id {id}"),
        Some(Enqueued::Replaced(id)) => println!("replaced pending job {id}"),
        None => return Err(CliError::new("the enqueue returned no id", "try again")),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::migrate_summary;

    #[test]
    fn migrate_says_what_it_applied() {
        assert_eq!(
            migrate_summary(0, 2),
            "applied 2 migrations (1 to 2): schema version 0 -> 2"
        );
        assert_eq!(
            migrate_summary(1, 2),
            "applied migration 2: schema version 1 -> 2"
        );
        assert_eq!(
            migrate_summary(2, 2),
            "schema version 2 (up to date, nothing applied)"
        );
    }
}
