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

#[derive(Debug, Default)]
struct QueueRate {
    active_until: Option<Instant>,
    /// The queue had a queue-wide rate when last claimed from.
    rated_until: Option<Instant>,
    checked_at: Option<Instant>,
    next_open: Option<Instant>,
    /// The plain lane came back empty in the last claim: the keys may take all the room.
    plain_idle: bool,
}

/// Per-queue rate state of one worker.
#[derive(Debug, Default)]
pub(crate) struct RateState {
    queues: Mutex<HashMap<String, QueueRate>>,
    /// The least slack this worker asks of its decisions, raised by late starts (a loaded
    /// host takes longer from claim to handler), lowered again after quiet periods.
    slack: Mutex<Slack>,
}

#[derive(Debug, Default)]
struct Slack {
    floor: Option<Duration>,
    late_at: Option<Instant>,
}

/// The longest slack a worker raises its floor to.
const MAX_SLACK_FLOOR: Duration = Duration::from_millis(250);

impl RateState {
    fn with<T>(&self, queue: &str, f: impl FnOnce(&mut QueueRate) -> T) -> T {
        let mut map = self
            .queues
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Looked up by `&str` first: the claim loop asks on every claim.
        match map.get_mut(queue) {
            Some(q) => f(q),
            None => f(map.entry(queue.to_owned()).or_default()),
        }
    }

    /// Whether the next claim of `queue` serves its rate keys.
    pub(crate) fn due(&self, queue: &str, ceiling: Duration) -> bool {
        let now = Instant::now();
        self.with(queue, |q| {
            q.active_until.is_some_and(|t| now < t)
                || q.rated_until.is_some_and(|t| now < t)
                || q.next_open.is_some_and(|t| now >= t)
                || q.checked_at.is_none_or(|t| now >= t + ceiling)
        })
    }

    /// Whether `queue` has rate keys to serve now (claims ahead are suspended meanwhile).
    pub(crate) fn active(&self, queue: &str) -> bool {
        let now = Instant::now();
        self.with(queue, |q| {
            q.active_until.is_some_and(|t| now < t) || q.rated_until.is_some_and(|t| now < t)
        })
    }

    /// Whether `queue` has a queue-wide rate (as its last claims found): every job of it is
    /// claimed only into a free running slot.
    pub(crate) fn queue_rated(&self, queue: &str) -> bool {
        let now = Instant::now();
        self.with(queue, |q| q.rated_until.is_some_and(|t| now < t))
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
            if report.queue_rated {
                q.rated_until = Some(replied + ACTIVE_FOR);
            }
        });
    }

    /// A claim without key lanes found that `queue` has a queue-wide rate.
    pub(crate) fn found_rated(&self, queue: &str, at: Instant) {
        self.with(queue, |q| q.rated_until = Some(at + ACTIVE_FOR));
    }

    /// The least slack ε of this worker's rate decisions now: [`crate::rate::SLACK_FLOOR`],
    /// raised by late starts to a quarter more than they needed, halved after every 10 s
    /// without one. A bucket keeps the
    /// largest ε any decision used on it (the window property needs ε never to shrink).
    pub(crate) fn slack_floor(&self) -> Duration {
        let mut s = self
            .slack
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let base = crate::rate::SLACK_FLOOR;
        let floor = s.floor.unwrap_or(base);
        if let Some(at) = s.late_at
            && at.elapsed() >= ACTIVE_FOR
        {
            s.floor = Some((floor / 2).max(base));
            s.late_at = Some(Instant::now());
        }
        s.floor.unwrap_or(base)
    }

    /// A rate-admitted job would have started `needed` after its claim was sent (more than its
    /// decision's slack): the next decisions ask for a quarter more than that. Several late
    /// jobs of one claim raise the floor once, to what the latest of them needed.
    pub(crate) fn late_start(&self, needed: Duration) {
        let mut s = self
            .slack
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let floor = s.floor.unwrap_or(crate::rate::SLACK_FLOOR);
        s.floor = Some(floor.max(needed.mul_f64(1.25)).min(MAX_SLACK_FLOOR));
        s.late_at = Some(Instant::now());
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
