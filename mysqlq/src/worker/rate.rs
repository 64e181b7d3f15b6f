//! The claim loop's view of rate-limited queues (`docs/rate-limits.md`): which queues have rate
//! keys to serve, when the earliest full key opens again, and how much of a claim's room goes
//! to the keys.
//!
//! A queue's keys are served (the claim locks its open buckets) while the queue had buckets in
//! the last [`ACTIVE_FOR`], and otherwise once per poll ceiling, so a queue without rate keys
//! pays one bucket read per poll ceiling, not one per claim.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::store::RateReport;

/// A queue whose claims saw rate buckets keeps serving its keys this long.
const ACTIVE_FOR: Duration = Duration::from_secs(10);
/// The least slack ε of a rate decision: the longest a local claim's jobs may take from the
/// claim being sent to their handlers' first poll (raised per bucket for long periods).
pub(crate) const SLACK_FLOOR: Duration = Duration::from_millis(5);

#[derive(Debug, Default)]
struct QueueRate {
    active_until: Option<Instant>,
    checked_at: Option<Instant>,
    next_open: Option<Instant>,
    /// The plain lane came back empty in the last claim: the keys may take all the room.
    plain_idle: bool,
}

/// Per-queue rate state of one worker.
#[derive(Debug, Default)]
pub(crate) struct RateState {
    queues: Mutex<HashMap<String, QueueRate>>,
}

impl RateState {
    fn with<T>(&self, queue: &str, f: impl FnOnce(&mut QueueRate) -> T) -> T {
        let mut map = self
            .queues
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(map.entry(queue.to_owned()).or_default())
    }

    /// Whether the next claim of `queue` serves its rate keys.
    pub(crate) fn due(&self, queue: &str, ceiling: Duration) -> bool {
        let now = Instant::now();
        self.with(queue, |q| {
            q.active_until.is_some_and(|t| now < t)
                || q.next_open.is_some_and(|t| now >= t)
                || q.checked_at.is_none_or(|t| now >= t + ceiling)
        })
    }

    /// Whether `queue` has rate keys to serve now (claims ahead are suspended meanwhile).
    pub(crate) fn active(&self, queue: &str) -> bool {
        let now = Instant::now();
        self.with(queue, |q| q.active_until.is_some_and(|t| now < t))
    }

    /// How much of `free` running slots a claim of `queue` offers its keys: half, unless the
    /// plain lane was empty last time (then all), so neither lane can starve the other.
    pub(crate) fn keyed_room(&self, queue: &str, free: usize) -> u32 {
        let room = self.with(
            queue,
            |q| if q.plain_idle { free } else { free.div_ceil(2) },
        );
        u32::try_from(room).unwrap_or(u32::MAX)
    }

    /// What a claim of `queue` that served its keys saw; `replied` is when its reply came.
    pub(crate) fn record(&self, queue: &str, report: &RateReport, replied: Instant, plain: usize) {
        self.with(queue, |q| {
            q.checked_at = Some(replied);
            q.plain_idle = plain == 0;
            q.next_open = report.next_open_in.map(|d| replied + d);
            if report.keys_seen {
                q.active_until = Some(replied + ACTIVE_FOR);
            }
        });
    }

    /// Until the earliest full key of any queue opens again, if one does.
    pub(crate) fn next_open_in(&self) -> Option<Duration> {
        let now = Instant::now();
        let map = self
            .queues
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.values()
            .filter_map(|q| q.next_open)
            .map(|t| t.saturating_duration_since(now))
            .min()
    }
}
