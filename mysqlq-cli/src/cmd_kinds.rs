//! `kinds`: the job catalogue of this binary, for people (a table) and for services that
//! enqueue by kind name (`--json`, each payload's JSON Schema). Reads no database.

use std::time::Duration;

use mysqlq::{Backoff, JobRegistration};
use serde_json::{Value, json};

use crate::args_kinds::KindsArgs;
use crate::error::CliError;
use crate::out;
use crate::program::{self, Caller};

/// `kinds`: every kind linked into this binary, sorted by kind. A binary without jobs is an
/// error (the linker dropped them), with the line to add, in both forms.
pub(crate) fn kinds(a: &KindsArgs, caller: Option<Caller>) -> Result<(), CliError> {
    let registry = crate::registry()?;
    if registry.is_empty() {
        return Err(CliError::new(
            format!(
                "no jobs are linked into this binary (`{}`), so it has no kinds to list",
                program::name()
            ),
            program::no_jobs_fix(caller),
        ));
    }
    if a.json {
        #[derive(serde::Serialize)]
        struct Catalogue {
            kinds: Vec<Entry>,
        }
        let doc = Catalogue {
            kinds: registry.iter().map(entry).collect(),
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).expect("JSON values serialize")
        );
        return Ok(());
    }
    let mut table = out::Table::new(&[
        "KIND",
        "QUEUE",
        ">PRIORITY",
        ">ATTEMPTS",
        "BACKOFF",
        "TIMEOUT",
        "RATE",
        "ARGUMENTS",
    ]);
    for r in registry.iter() {
        let policy = r.retry_policy();
        let dash = || "-".to_owned();
        let rate = match (r.rate_limit(), r.rate_key_argument()) {
            (Some(rate), Some(key)) => format!("{rate} per {key}"),
            (Some(rate), None) => rate.to_string(),
            (None, _) => dash(),
        };
        let mut arguments = match r.fields_text() {
            Some(f) if f.is_empty() => dash(),
            Some(f) => f,
            None => "?".to_owned(),
        };
        if let Some(key) = r.ordering_key_argument() {
            arguments.push_str(&format!(" (ordered by {key})"));
        }
        if let Some(cron) = r.cron() {
            arguments = format!("(cron {cron})");
        }
        table.row(vec![
            r.kind().to_owned(),
            r.queue().to_owned(),
            r.priority().to_string(),
            policy.max_attempts.to_string(),
            backoff_text(&policy.backoff),
            r.timeout().map_or_else(dash, duration),
            rate,
            arguments,
        ]);
    }
    print!("{}", table.render());
    Ok(())
}

/// One kind of `kinds --json`: what a service needs to enqueue it (and what the worker does
/// with it), durations in milliseconds, absent settings `null`. Its keys come in this order.
#[derive(serde::Serialize)]
struct Entry {
    kind: &'static str,
    queue: &'static str,
    priority: i16,
    max_attempts: u32,
    backoff: Value,
    timeout_ms: Option<u64>,
    rate_limit: Option<Value>,
    rate_key_argument: Option<&'static str>,
    ordering_key_argument: Option<&'static str>,
    cron: Option<&'static str>,
    arguments: Option<Vec<Value>>,
    payload_schema: Option<Value>,
    source: String,
}

fn entry(r: &JobRegistration) -> Entry {
    let policy = r.retry_policy();
    Entry {
        kind: r.kind(),
        queue: r.queue(),
        priority: r.priority(),
        max_attempts: policy.max_attempts,
        backoff: backoff_json(&policy.backoff),
        timeout_ms: r.timeout().map(millis),
        rate_limit: r.rate_limit().map(|rate| {
            json!({
                "count": rate.count(),
                "period_ms": millis(rate.period()),
                "text": rate.to_string(),
            })
        }),
        rate_key_argument: r.rate_key_argument(),
        ordering_key_argument: r.ordering_key_argument(),
        cron: r.cron(),
        arguments: r.fields().map(|f| {
            f.iter()
                .map(|(name, ty)| json!({ "name": name, "type": ty }))
                .collect()
        }),
        payload_schema: r.payload_schema(),
        source: r.location(),
    }
}

/// Whole milliseconds (durations of `#[job]` are whole milliseconds).
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `1h30m`, as the durations of `#[job]` are written.
fn duration(d: Duration) -> String {
    humantime::format_duration(d).to_string().replace(' ', "")
}

/// The backoff as `#[job(backoff = …)]` would write it, with its delays: `exp 5s..1h`,
/// `linear 15s..1h`, `fixed 30s`, `10s, 20s, 40s`.
fn backoff_text(b: &Backoff) -> String {
    match b {
        Backoff::Exponential { base, max } => {
            format!("exp {}..{}", duration(*base), duration(*max))
        }
        Backoff::Linear { step, max } => format!("linear {}..{}", duration(*step), duration(*max)),
        Backoff::Fixed(d) => format!("fixed {}", duration(*d)),
        Backoff::Schedule(list) => list
            .iter()
            .map(|d| duration(*d))
            .collect::<Vec<_>>()
            .join(", "),
        _ => format!("{b:?}"),
    }
}

/// The backoff in `kinds --json`: `{"type": "exponential", "base_ms", "max_ms"}`, `linear`
/// (`step_ms`, `max_ms`), `fixed` (`delay_ms`), `schedule` (`delays_ms`, the last repeated).
fn backoff_json(b: &Backoff) -> Value {
    match b {
        Backoff::Exponential { base, max } => {
            json!({ "type": "exponential", "base_ms": millis(*base), "max_ms": millis(*max) })
        }
        Backoff::Linear { step, max } => {
            json!({ "type": "linear", "step_ms": millis(*step), "max_ms": millis(*max) })
        }
        Backoff::Fixed(d) => json!({ "type": "fixed", "delay_ms": millis(*d) }),
        Backoff::Schedule(list) => json!({
            "type": "schedule",
            "delays_ms": list.iter().map(|d| millis(*d)).collect::<Vec<_>>(),
        }),
        _ => json!({ "type": format!("{b:?}") }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoffs_read_as_job_writes_them() {
        assert_eq!(backoff_text(&Backoff::exponential()), "exp 5s..1h");
        assert_eq!(backoff_text(&Backoff::linear()), "linear 15s..1h");
        assert_eq!(backoff_text(&Backoff::fixed()), "fixed 30s");
        const S: &[Duration] = &[Duration::from_secs(10), Duration::from_secs(90)];
        assert_eq!(backoff_text(&Backoff::Schedule(S)), "10s, 1m30s");
        assert_eq!(
            backoff_json(&Backoff::Schedule(S)),
            json!({ "type": "schedule", "delays_ms": [10_000, 90_000] })
        );
        assert_eq!(
            backoff_json(&Backoff::exponential()),
            json!({ "type": "exponential", "base_ms": 5_000, "max_ms": 3_600_000 })
        );
    }
}
