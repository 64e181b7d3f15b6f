//! The periodic-job scheduler, a service of its own: it sleeps until the next tick of any
//! schedule, measured on the database clock, wakes at that tick and enqueues it (the latest due
//! tick not yet in the ledger; see [`crate::Periodic`] for the exactly-once and catch-up rules).
//! A tick is enqueued a few round trips after its time, not at the next maintenance round.
//!
//! It runs on every worker that declares schedules, not only on the leader: the ledger's primary
//! key makes each tick exactly-once whoever writes it, so a worker that just lost (or never had)
//! the leadership changes nothing, a tick never waits for an election, and the leader need not
//! declare the schedule. The workers that lose the race for a tick write nothing (the ledger row
//! is inserted first in the tick's transaction).
//!
//! It stops when shutdown begins (`stop_fetching`): a worker in its grace period enqueues no
//! tick, and a round in progress enqueues nothing more once the shutdown has begun.

use std::sync::Arc;
use std::time::Duration;

use chrono::NaiveDateTime;
use sqlx::MySqlConnection;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::periodic::latest_tick;
use crate::store;
use crate::worker::{Shared, sleep_or_cancel};

const TICK_FORMAT: &str = "%Y-%m-%d %H:%M:%S";

/// Longest schedule name (`mysqlq_cron.name`).
const MAX_NAME: usize = 128;

/// Longest sleep before the database clock is read again, however far away the next tick is:
/// the local clock's drift against the server's over one sleep stays within milliseconds.
pub(crate) const MAX_SLEEP: Duration = Duration::from_secs(60);

/// Wait before a schedule whose tick could not be enqueued is tried again (doubling per failure
/// in a row, up to [`MAX_SLEEP`]); also the wait after a round that could not read the clock.
pub(crate) const RETRY_FIRST: Duration = Duration::from_secs(1);

/// Checks the schedules a worker is started with: names that fit the ledger, no name twice.
pub(crate) fn validate(periodic: &[crate::Periodic]) -> Result<(), crate::Error> {
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
    }
    Ok(())
}

/// What this process knows of one schedule between rounds.
#[derive(Debug, Clone, Default)]
pub(crate) struct State {
    /// The latest tick known to be in the ledger (written by this worker or another): until a
    /// later tick is due, the schedule costs no statement.
    recorded: Option<NaiveDateTime>,
    /// Rounds in a row whose enqueue failed.
    failures: u32,
    /// After a failure, the database time before which the schedule is not tried again.
    retry_at: Option<NaiveDateTime>,
}

/// What one round decided.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Round {
    /// When the next round is due: the next tick of any schedule (or retry), on the local
    /// monotonic clock.
    pub(crate) wake: Instant,
}

/// The service: a round at start, then one at every tick, until shutdown begins.
pub(crate) async fn run(s: Arc<Shared>) {
    if s.periodic.is_empty() {
        return;
    }
    let stop = s.stop_fetching.clone();
    let mut states = vec![State::default(); s.periodic.len()];
    while !stop.is_cancelled() {
        let round = run_once(&s, &mut states, &stop).await;
        let wait = round.wake.saturating_duration_since(Instant::now());
        if !sleep_or_cancel(wait, &stop).await {
            break;
        }
    }
}

/// Reads the database clock, enqueues every due tick not yet recorded, and says when the next
/// tick of any schedule is due. Each schedule is handled on its own: one whose ledger or enqueue
/// fails is logged and tried again later, and the others still run.
pub(crate) async fn run_once(s: &Shared, states: &mut [State], stop: &CancellationToken) -> Round {
    let retry = Round {
        wake: Instant::now() + RETRY_FIRST,
    };
    let mut conn = match s.db.acquire().await {
        Ok(c) => c,
        Err(e) => {
            failed(s, None, &e.into());
            return retry;
        }
    };
    let (now, read_at) = match db_clock(&mut conn).await {
        Ok(clock) => clock,
        Err(e) => {
            failed(s, None, &e);
            return retry;
        }
    };
    for (p, st) in s.periodic.iter().zip(states.iter_mut()) {
        let Some(tick) = latest_tick(&p.schedule, now) else {
            continue;
        };
        if st.recorded.is_some_and(|r| r >= tick) || st.retry_at.is_some_and(|r| r > now) {
            continue;
        }
        match run_schedule(&mut conn, p, tick, stop).await {
            Ok(Due::Recorded) => {
                *st = State {
                    recorded: Some(tick),
                    ..State::default()
                };
            }
            Ok(Due::ShutdownBegan) => break,
            Err(e) => {
                st.failures = st.failures.saturating_add(1);
                let wait = RETRY_FIRST
                    .saturating_mul(1 << st.failures.min(8).saturating_sub(1))
                    .min(MAX_SLEEP);
                st.retry_at = chrono::Duration::from_std(wait).ok().map(|w| now + w);
                failed(s, Some(&p.name), &e);
            }
        }
    }
    let next = s
        .periodic
        .iter()
        .zip(states.iter())
        .filter_map(|(p, st)| {
            let tick = p
                .schedule
                .after(&now.and_utc())
                .next()
                .map(|t| t.naive_utc());
            match (tick, st.retry_at) {
                (Some(t), Some(r)) => Some(t.min(r)),
                (t, r) => t.or(r),
            }
        })
        .min();
    let wait = next
        .and_then(|next| (next - now).to_std().ok())
        .unwrap_or(MAX_SLEEP)
        .min(MAX_SLEEP);
    Round {
        // From the moment the clock's reading came back, so the wake is never before the tick
        // on the database clock (it is later by at most the reply's way back).
        wake: read_at + wait,
    }
}

/// The database clock, and the local instant its reading arrived.
async fn db_clock(conn: &mut MySqlConnection) -> Result<(NaiveDateTime, Instant), crate::Error> {
    let now = store::db_now(conn).await?;
    let read_at = Instant::now();
    let now = NaiveDateTime::parse_from_str(&now, "%Y-%m-%d %H:%M:%S%.f").map_err(|e| {
        crate::Error::Config(format!("the database clock read `{now}`, not a time: {e}"))
    })?;
    Ok((now, read_at))
}

fn failed(s: &Shared, schedule: Option<&str>, e: &crate::Error) {
    let m = &s.metrics;
    m.add(&m.counters.db_errors, 1);
    let error = crate::worker::write::error_chain(e);
    match schedule {
        Some(name) => {
            tracing::warn!(schedule = %name, error = %error, "periodic job not enqueued; trying again shortly");
        }
        None => {
            tracing::warn!(error = %error, "scheduler could not read the database clock; trying again shortly");
        }
    }
}

/// What became of a due tick.
enum Due {
    /// It is in the ledger now: enqueued by this worker or another, or recorded as a new
    /// schedule's baseline.
    Recorded,
    /// Shutdown began before it was enqueued: nothing more is.
    ShutdownBegan,
}

/// Enqueues `tick` (the schedule's latest due tick) unless the ledger has it.
async fn run_schedule(
    conn: &mut MySqlConnection,
    p: &crate::Periodic,
    tick: NaiveDateTime,
    stop: &CancellationToken,
) -> Result<Due, crate::Error> {
    let tick_s = tick.format(TICK_FORMAT).to_string();
    let last = store::cron_latest(conn, &p.name).await?;
    if stop.is_cancelled() {
        return Ok(Due::ShutdownBegan);
    }
    match last {
        None => {
            store::cron_baseline(conn, &p.name, &tick_s).await?;
            tracing::info!(schedule = %p.name, cron = %p.expr, "new periodic job; first run at its next tick");
            Ok(Due::Recorded)
        }
        Some(last) if last >= tick_s => Ok(Due::Recorded),
        Some(last) => {
            let Some(id) = store::cron_enqueue_tick(conn, &p.name, &tick_s, &p.job.row).await?
            else {
                return Ok(Due::Recorded);
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
            Ok(Due::Recorded)
        }
    }
}
