//! The periodic-job scheduler, run by the leader each maintenance round: for every schedule,
//! enqueue the latest due tick not yet in the ledger (see [`crate::Periodic`] for the
//! exactly-once and catch-up rules).

use chrono::NaiveDateTime;
use sqlx::MySqlConnection;

use crate::periodic::latest_tick;
use crate::store;
use crate::worker::Shared;

const TICK_FORMAT: &str = "%Y-%m-%d %H:%M:%S";

/// Longest schedule name (`mysqlq_cron.name`).
const MAX_NAME: usize = 128;

/// Checks the schedules a worker is started with: names that fit the ledger, no name twice.
/// A schedule whose ticks come faster than the maintenance interval is accepted with a
/// warning: the scheduler runs once per maintenance round and enqueues only the latest due tick
/// each time (the catch-up rule), so such a schedule runs about once per round.
pub(crate) fn validate(
    periodic: &[crate::Periodic],
    maintenance_interval: std::time::Duration,
) -> Result<(), crate::Error> {
    let mut seen = std::collections::HashSet::new();
    for p in periodic {
        if p.name.is_empty() || p.name.len() > MAX_NAME {
            return Err(crate::Error::Config(format!(
                "periodic job name `{}` must be 1 to {MAX_NAME} bytes long; give it a shorter \
                 name with Periodic::named",
                p.name
            )));
        }
        if !seen.insert(p.name.as_str()) {
            return Err(crate::Error::Config(format!(
                "two periodic jobs are named `{}`: their ticks would share one ledger and one \
                 would never run; name them apart with Periodic::named",
                p.name
            )));
        }
        let mut ticks = p.schedule.upcoming(chrono::Utc).take(2);
        if let (Some(a), Some(b)) = (ticks.next(), ticks.next())
            && let Ok(gap) = (b - a).to_std()
            && gap < maintenance_interval
        {
            tracing::warn!(
                schedule = %p.name,
                cron = %p.expr,
                "schedule ticks every {}, faster than the maintenance interval {}: it runs \
                 about once per maintenance round (the latest due tick), not on every tick",
                crate::backoff::format_duration(gap),
                crate::backoff::format_duration(maintenance_interval)
            );
        }
    }
    Ok(())
}

/// Enqueues due ticks; returns how many jobs were enqueued. Each schedule is handled on its
/// own: one whose ledger or enqueue fails is logged and the others still run.
pub(crate) async fn run_once(s: &Shared, conn: &mut MySqlConnection) -> u64 {
    if s.periodic.is_empty() {
        return 0;
    }
    let now = match store::db_now(conn).await {
        Ok(now) => now,
        Err(e) => {
            tracing::warn!(error = %crate::worker::write::error_chain(&e), "scheduler could not read the database clock; next round");
            return 0;
        }
    };
    let Ok(now) = NaiveDateTime::parse_from_str(&now, "%Y-%m-%d %H:%M:%S%.f") else {
        tracing::warn!(now, "scheduler could not parse the database clock");
        return 0;
    };
    let mut enqueued = 0;
    for p in &s.periodic {
        match run_schedule(conn, p, now).await {
            Ok(n) => enqueued += n,
            Err(e) => {
                let m = &s.metrics;
                m.add(&m.counters.db_errors, 1);
                tracing::warn!(schedule = %p.name, error = %crate::worker::write::error_chain(&e), "periodic job not scheduled this round");
            }
        }
    }
    enqueued
}

async fn run_schedule(
    conn: &mut MySqlConnection,
    p: &crate::Periodic,
    now: NaiveDateTime,
) -> Result<u64, crate::Error> {
    let Some(tick) = latest_tick(&p.schedule, now) else {
        return Ok(0);
    };
    let tick_s = tick.format(TICK_FORMAT).to_string();
    match store::cron_latest(conn, &p.name).await? {
        None => {
            store::cron_baseline(conn, &p.name, &tick_s).await?;
            tracing::info!(schedule = %p.name, cron = %p.expr, "new periodic job; first run at its next tick");
            Ok(0)
        }
        Some(last) if last >= tick_s => Ok(0),
        Some(last) => {
            let Some(id) = store::cron_enqueue_tick(conn, &p.name, &tick_s, &p.job.row).await?
            else {
                return Ok(0);
            };
            let missed = NaiveDateTime::parse_from_str(&last, TICK_FORMAT)
                .ok()
                .map(|last| {
                    p.schedule
                        .after(&last.and_utc())
                        .take_while(|t| t.naive_utc() < tick)
                        .count()
                })
                .unwrap_or(0);
            if missed > 0 {
                tracing::warn!(schedule = %p.name, skipped = missed, "missed ticks skipped; running the latest once");
            }
            tracing::info!(schedule = %p.name, tick = %tick_s, id = id.0, "periodic job enqueued");
            Ok(1)
        }
    }
}
