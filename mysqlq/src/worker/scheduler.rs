//! The periodic-job scheduler, run by the leader each maintenance round: for every schedule,
//! enqueue the latest due tick not yet in the ledger (see [`crate::Periodic`] for the
//! exactly-once and catch-up rules).

use chrono::NaiveDateTime;
use sqlx::MySqlConnection;

use crate::periodic::latest_tick;
use crate::store;
use crate::worker::Shared;

const TICK_FORMAT: &str = "%Y-%m-%d %H:%M:%S";

/// Enqueues due ticks; returns how many jobs were enqueued.
pub(crate) async fn run_once(s: &Shared, conn: &mut MySqlConnection) -> Result<u64, crate::Error> {
    if s.periodic.is_empty() {
        return Ok(0);
    }
    let now = store::db_now(conn).await?;
    let now = NaiveDateTime::parse_from_str(&now, "%Y-%m-%d %H:%M:%S%.f")
        .map_err(|e| crate::Error::invalid("database time", format!("`{now}`: {e}")))?;
    let mut enqueued = 0;
    for p in &s.periodic {
        let Some(tick) = latest_tick(&p.schedule, now) else {
            continue;
        };
        let tick_s = tick.format(TICK_FORMAT).to_string();
        match store::cron_latest(conn, &p.name).await? {
            None => {
                store::cron_baseline(conn, &p.name, &tick_s).await?;
                tracing::info!(schedule = %p.name, cron = %p.expr, "new periodic job; first run at its next tick");
            }
            Some(last) if last >= tick_s => {}
            Some(last) => {
                if let Some(id) =
                    store::cron_enqueue_tick(conn, &p.name, &tick_s, &p.job.row).await?
                {
                    enqueued += 1;
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
                }
            }
        }
    }
    Ok(enqueued)
}
