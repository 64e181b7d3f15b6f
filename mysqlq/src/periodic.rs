//! Periodic jobs: cron schedules declared in code, enqueued once per tick.
//!
//! Schedules are standard 5-field cron (`*/5 * * * *`: minute hour day-of-month month
//! day-of-week) or 6/7 fields with seconds first (`*/10 * * * * *`), always in **UTC**.
//!
//! **Exactly once per tick**: each tick is enqueued in a transaction that also inserts the row
//! `(name, tick)` into `mysqlq_cron`, whose primary key refuses a second one — however many
//! workers run the scheduler, and across leader changes.
//!
//! **When**: every worker that declares a schedule runs a scheduler of its own that sleeps until
//! the schedule's next tick on the database clock and enqueues it then, typically milliseconds
//! after the tick (not at the next maintenance round). It stops as soon as the worker's shutdown
//! begins: no tick is enqueued during the grace period.
//!
//! **Catch-up policy**: the scheduler enqueues the most recent tick that is due and not yet in
//! the ledger. After downtime (no worker carrying the schedule; a paused queue does not matter,
//! enqueueing continues) the missed ticks collapse into one run for the latest of them; older
//! missed ticks are skipped and logged. A schedule seen for the first time starts with the next
//! tick (no run for a tick that passed before it was deployed).

use std::str::FromStr;

use chrono::NaiveDateTime;

use crate::{EnqueueOptions, Error, Job, NewJob};

/// A cron schedule and the job it enqueues.
#[derive(Debug, Clone)]
pub struct Periodic {
    pub(crate) name: String,
    pub(crate) expr: String,
    pub(crate) schedule: cron::Schedule,
    pub(crate) job: NewJob,
}

impl Periodic {
    /// Enqueues `job` on every tick of `schedule` (UTC). The schedule's ledger name is the
    /// job's kind; use [`named`](Self::named) for several schedules of one kind.
    pub fn new<J: Job>(schedule: &str, job: &J) -> Result<Self, Error> {
        Ok(Self {
            name: J::KIND.to_owned(),
            expr: schedule.to_owned(),
            schedule: parse_schedule(schedule)?,
            job: NewJob::from_job(job, &EnqueueOptions::new())?,
        })
    }

    /// A periodic job without arguments (payload `{}`): what `#[job(cron = "...")]` declares.
    pub(crate) fn without_arguments(
        kind: &str,
        queue: &str,
        max_attempts: u32,
        expr: &str,
    ) -> Result<Self, Error> {
        Ok(Self {
            name: kind.to_owned(),
            expr: expr.to_owned(),
            schedule: parse_schedule(expr)?,
            job: NewJob::new(
                kind,
                queue,
                &serde_json::json!({}),
                &EnqueueOptions::new().max_attempts(max_attempts),
            )?,
        })
    }

    /// Sets the ledger name (default: the job's kind).
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The ledger name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The cron expression as given.
    pub fn expression(&self) -> &str {
        &self.expr
    }
}

/// Parses a 5-, 6- or 7-field cron expression.
pub fn parse_schedule(expr: &str) -> Result<cron::Schedule, Error> {
    let fields = expr.split_whitespace().count();
    let full = match fields {
        5 => format!("0 {expr}"),
        6 | 7 => expr.to_owned(),
        _ => {
            return Err(Error::invalid(
                "cron expression",
                format!(
                    "`{expr}` has {fields} fields; use 5 (`*/5 * * * *`) or 6 with seconds first (`*/10 * * * * *`)"
                ),
            ));
        }
    };
    cron::Schedule::from_str(&full).map_err(|e| {
        let reason = e.to_string();
        let reason = reason
            .lines()
            .last()
            .unwrap_or_default()
            .trim()
            .trim_end_matches('.')
            .to_owned();
        Error::invalid("cron expression", format!("`{expr}`: {reason}"))
    })
}

/// The latest tick at or before `now`, if any (walking the schedule backwards from `now`).
pub(crate) fn latest_tick(schedule: &cron::Schedule, now: NaiveDateTime) -> Option<NaiveDateTime> {
    let now_utc = now.and_utc();
    schedule
        .after(&(now_utc + chrono::Duration::microseconds(1)))
        .next_back()
        .filter(|t| *t <= now_utc)
        .map(|t| t.naive_utc())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> NaiveDateTime {
        NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f").unwrap()
    }

    #[test]
    fn five_field_expressions_tick_on_minutes() {
        let s = parse_schedule("*/5 * * * *").unwrap();
        assert_eq!(
            latest_tick(&s, at("2026-12-01 10:07:30.5")),
            Some(at("2026-12-01 10:05:00.0"))
        );
        assert_eq!(
            latest_tick(&s, at("2026-12-01 10:05:00.0")),
            Some(at("2026-12-01 10:05:00.0"))
        );
    }

    #[test]
    fn six_field_expressions_have_seconds() {
        let s = parse_schedule("*/2 * * * * *").unwrap();
        assert_eq!(
            latest_tick(&s, at("2026-12-01 10:00:03.9")),
            Some(at("2026-12-01 10:00:02.0"))
        );
    }

    #[test]
    fn bad_expressions_are_named() {
        let e = parse_schedule("every day").unwrap_err().to_string();
        assert!(e.contains("every day") && e.contains("5"), "{e}");
        assert!(parse_schedule("61 * * * *").is_err());
    }
}
