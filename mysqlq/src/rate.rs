//! Rate limits: [`Rate`] ("10/s"), and the pure decision of a bucket's sliding-window log
//! (`decide`), run inside the claim transaction that holds the bucket's row lock.
//!
//! `docs/design/rate-limits.md` §3 is the specification. A bucket's log lists recent admissions
//! as `(time, count)` entries on the database clock, at most [`MAX_ENTRIES`], stored as bytes
//! (`encode`, `decode`). `decide` admits starts so that any N + 1 recorded starts span at least
//! W = P + ε, where ε is the bucket's slack (`slack`): the worker's start guard then keeps every
//! handler start within ε of its recorded time, so no window of length P holds more than N starts.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::Error;

/// A rate limit: at most `count` handler starts in any window of `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    count: u32,
    period: Duration,
}

/// The largest count a [`Rate`] accepts.
const MAX_COUNT: u32 = 1_000_000;
/// The shortest period a [`Rate`] accepts.
const MIN_PERIOD: Duration = Duration::from_millis(10);
/// The longest period a [`Rate`] accepts.
const MAX_PERIOD: Duration = Duration::from_hours(24);

impl Rate {
    /// Starts allowed per period.
    pub const fn count(&self) -> u32 {
        self.count
    }

    /// The period.
    pub const fn period(&self) -> Duration {
        self.period
    }

    /// A rate the `#[job]` macro checked at compile time; not for use outside it.
    #[doc(hidden)]
    pub const fn __validated(count: u32, period_ms: u64) -> Self {
        Self {
            count,
            period: Duration::from_millis(period_ms),
        }
    }

    /// At most `count` starts in any window of `period`: `count` 1 to 1,000,000, `period` 10 ms
    /// to 1 day in whole milliseconds; anything else is an [`Error::Invalid`] that says what to
    /// change.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let rate = mysqlq::Rate::new(600, Duration::from_secs(60))?;
    /// assert_eq!(rate.to_string(), "600/min");
    /// # Ok::<(), mysqlq::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for a count or period outside these bounds.
    pub fn new(count: u32, period: Duration) -> Result<Self, Error> {
        checked(count, period, &PeriodText(period))
    }

    /// At most `count` starts in any window of one second (`"<count>/s"`).
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] unless `count` is 1 to 1,000,000.
    pub fn per_second(count: u32) -> Result<Self, Error> {
        Self::new(count, Duration::from_secs(1))
    }
}

/// The checks of [`Rate::new`]; `period_text` is the period as the user wrote it.
fn checked(count: u32, period: Duration, period_text: &dyn fmt::Display) -> Result<Rate, Error> {
    if !(1..=MAX_COUNT).contains(&count) {
        return Err(count_out_of_range(&count));
    }
    let reason = if !period.subsec_nanos().is_multiple_of(1_000_000) {
        format!("period `{period_text}`: durations count whole milliseconds")
    } else if period < MIN_PERIOD {
        format!("period `{period_text}` is shorter than 10ms")
    } else if period > MAX_PERIOD {
        format!("period `{period_text}` is longer than 1d")
    } else {
        return Ok(Rate { count, period });
    };
    Err(Error::invalid("rate", reason))
}

/// The refusal of a count outside 1..=1,000,000 (`count` as given).
fn count_out_of_range(count: &dyn fmt::Display) -> Error {
    Error::invalid(
        "rate",
        format!("the count must be 1 to {MAX_COUNT} starts per period, not `{count}`"),
    )
}

/// `"<count>/<period>"`, e.g. `"10/s"`, `"600/min"`, `"5/100ms"`, `"1/1h30m"`. The period is a
/// number with a unit (`ms`, `s` or `sec`, `m` or `min`, `h`, `d`; several add up) or a bare unit
/// meaning one of it. Whitespace around the text and around `/` is ignored.
impl FromStr for Rate {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let text = s.trim();
        let Some((count, period)) = text
            .split_once('/')
            .map(|(c, p)| (c.trim(), p.trim()))
            .filter(|(_, p)| !p.is_empty())
        else {
            return Err(Error::invalid(
                "rate",
                format!(
                    "`{text}` has no period: write \"<count>/<period>\", e.g. \"10/s\", \
                     \"600/min\", \"5/100ms\""
                ),
            ));
        };
        if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Error::invalid(
                "rate",
                format!("`{count}` is not a whole number of starts"),
            ));
        }
        // All digits: the only failure left is a number beyond u32, which is out of range too.
        let count = count
            .parse::<u32>()
            .map_err(|_| count_out_of_range(&count))?;
        let Some(length) = parse_period(period) else {
            return Err(Error::invalid(
                "rate",
                format!(
                    "period `{period}`: unknown time unit; use ms, s, min, h or d, optionally \
                     with a number (`100ms`, `2s`)"
                ),
            ));
        };
        checked(count, length, &period)
    }
}

/// Microseconds in one of `unit`, for the units a period may name.
fn unit_micros(unit: &str) -> Option<u64> {
    Some(match unit {
        "us" => 1, // only to say "whole milliseconds" rather than "unknown unit"
        "ms" => 1_000,
        "s" | "sec" => 1_000_000,
        "m" | "min" => 60_000_000,
        "h" => 3_600_000_000,
        "d" => 86_400_000_000,
        _ => return None,
    })
}

/// A period beyond `u64` microseconds: far longer than a day, in whole milliseconds.
const TOO_LONG: Duration = Duration::from_secs(u64::MAX);

/// A period's length: a bare unit, or `<number><unit>` parts (`1h30m`, `1h 30m`). `None` for a
/// unit that is missing or unknown. A length beyond `u64` microseconds is taken as `u64::MAX`
/// seconds (and then refused as longer than a day).
fn parse_period(text: &str) -> Option<Duration> {
    if let Some(us) = unit_micros(text) {
        return Some(Duration::from_micros(us));
    }
    let mut rest = text;
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let (number, after) = rest.split_at(digits);
        let after = after.trim_start();
        let letters = after.len()
            - after
                .trim_start_matches(|c: char| c.is_ascii_alphabetic())
                .len();
        let (unit, after) = after.split_at(letters);
        if number.is_empty() {
            return None;
        }
        let unit = unit_micros(unit)?;
        let Some(sum) = number
            .parse::<u64>()
            .ok()
            .and_then(|number| number.checked_mul(unit))
            .and_then(|part| total.checked_add(part))
        else {
            return Some(TOO_LONG);
        };
        total = sum;
        rest = after.trim_start();
    }
    Some(Duration::from_micros(total))
}

/// Units of [`Rate`]'s display, biggest first, in milliseconds.
const DISPLAY_UNITS: [(u128, &str); 4] = [
    (86_400_000, "d"),
    (3_600_000, "h"),
    (60_000, "min"),
    (1_000, "s"),
];

/// A period as text: the biggest unit that divides it, else `ms` (or `us`, `ns` for lengths that
/// are not whole milliseconds). With `bare_one`, one unit is written without its number.
fn write_period(f: &mut fmt::Formatter<'_>, period: Duration, bare_one: bool) -> fmt::Result {
    let ns = period.as_nanos();
    if !ns.is_multiple_of(1_000_000) {
        return if ns.is_multiple_of(1_000) {
            write!(f, "{}us", ns / 1_000)
        } else {
            write!(f, "{ns}ns")
        };
    }
    let ms = ns / 1_000_000;
    let (number, unit) = DISPLAY_UNITS
        .iter()
        .find(|&&(size, _)| ms != 0 && ms.is_multiple_of(size))
        .map_or((ms, "ms"), |&(size, unit)| (ms / size, unit));
    if bare_one && number == 1 {
        f.write_str(unit)
    } else {
        write!(f, "{number}{unit}")
    }
}

/// A period in error messages: always with its number (`1ms`, `2d`, `1500us`).
struct PeriodText(Duration);

impl fmt::Display for PeriodText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_period(f, self.0, false)
    }
}

/// The shortest text that parses back to the same rate: `10/s`, `600/min`, `5/100ms`, `1/2s`,
/// `1/90s`, `3/h`.
impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/", self.count)?;
        write_period(f, self.period, true)
    }
}

/// The slack ε of a bucket whose period is `period`: `period / 20`, at most 250 ms, at least
/// `floor` (the worker's `rate_slack_floor`; the floor wins over the 250 ms cap).
pub(crate) fn slack(period: Duration, floor: Duration) -> Duration {
    (period / 20).min(Duration::from_millis(250)).max(floor)
}

/// At most this many entries in a bucket's log; [`decide`] merges entries beyond it.
pub(crate) const MAX_ENTRIES: usize = 64;

/// The least slack ε of a decision: the longest a local claim's jobs may take from the claim
/// being sent to their handlers' first poll (raised per bucket for long periods, [`slack`]).
pub(crate) const SLACK_FLOOR: Duration = Duration::from_millis(5);

/// The first byte of an encoded log.
const LOG_VERSION: u8 = 1;
/// Bytes per encoded entry: the time (i64) and the count (u32), both big-endian.
const ENTRY_BYTES: usize = 12;

/// One entry of a bucket's log: `n` starts recorded at `t_us`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The recorded time, microseconds since the Unix epoch on the database clock.
    pub(crate) t_us: i64,
    /// How many starts were recorded at that time.
    pub(crate) n: u32,
}

/// A log as stored in `mysqlq_rate_bucket.starts`: the version byte 1, then per entry its time
/// (big-endian i64) and count (big-endian u32): 1 + 12 × 64 = 769 bytes at most.
pub(crate) fn encode(log: &[Entry]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(1 + ENTRY_BYTES * log.len());
    bytes.push(LOG_VERSION);
    for entry in log {
        bytes.extend_from_slice(&entry.t_us.to_be_bytes());
        bytes.extend_from_slice(&entry.n.to_be_bytes());
    }
    bytes
}

/// The log that [`encode`] wrote. Empty bytes (a new bucket) are an empty log. Bytes of an
/// unknown version or of a length other than 1 + 12k also give an empty log, never a panic: bytes
/// other than `[]` and `[1]` (the empty log) that decode to nothing are corrupt, for the caller
/// to log.
pub(crate) fn decode(bytes: &[u8]) -> Vec<Entry> {
    let Some((&LOG_VERSION, body)) = bytes.split_first() else {
        return Vec::new();
    };
    if !body.len().is_multiple_of(ENTRY_BYTES) {
        return Vec::new();
    }
    body.chunks_exact(ENTRY_BYTES)
        .filter_map(|chunk| {
            let (t, n) = chunk.split_first_chunk::<8>()?;
            Some(Entry {
                t_us: i64::from_be_bytes(*t),
                n: u32::from_be_bytes(*n.first_chunk::<4>()?),
            })
        })
        .collect()
}

/// Whether `bytes`, which [`decode`] read as `log`, are corrupt: they gave no entry but are
/// neither `[]` (a new bucket) nor `[1]` (an empty log, as [`encode`] writes one once every
/// entry has left the window).
pub(crate) fn unreadable(bytes: &[u8], log: &[Entry]) -> bool {
    log.is_empty() && bytes.len() > 1
}

/// What [`decide`] decides on: a bucket's state, its limit and this claim's demand.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DecideInput<'a> {
    /// The bucket's log ([`decode`] of its `starts`).
    pub(crate) log: &'a [Entry],
    /// The limit applied (the strictest among the claim's candidates).
    pub(crate) rate: Rate,
    /// ε: the caller passes max(the bucket's `slack_us`, [`slack`]`(P, floor)`).
    pub(crate) slack: Duration,
    /// W of the bucket's previous decision (its stored period + slack); `None` if unknown.
    pub(crate) prev_window: Option<Duration>,
    /// The database clock (`UTC_TIMESTAMP(6)` of the statement that locked the bucket), µs.
    pub(crate) now_us: i64,
    /// Starts wanted: this claim's free slots for the key.
    pub(crate) want: u32,
    /// Candidates were left unclaimed beyond `want`: the key still has ready jobs.
    pub(crate) more_ready: bool,
    /// The poll ceiling: when to look at a key with room but no ready job again.
    pub(crate) idle_recheck: Duration,
}

/// The outcome of [`decide`]: how many starts to admit and the bucket's new state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decision {
    /// Starts admitted, at most `want`.
    pub(crate) admit: u32,
    /// The new log, ascending, at most [`MAX_ENTRIES`] entries.
    pub(crate) log: Vec<Entry>,
    /// The time recorded for the admitted starts: max(now, the log's last time), µs.
    pub(crate) t_us: i64,
    /// No start is admitted before this (the bucket's `open_at`), µs.
    pub(crate) open_at_us: i64,
    /// W = P + ε, the window this decision counted.
    pub(crate) window: Duration,
}

/// Whole microseconds of `d`, rounded up (a window never shrinks by rounding), saturating.
fn micros_ceil(d: Duration) -> i64 {
    i64::try_from(d.as_nanos().div_ceil(1_000)).unwrap_or(i64::MAX)
}

/// The decision of one bucket (`docs/design/rate-limits.md` §3.1): admit at most N starts in any
/// window of W = P + ε, recorded at t = max(now, the log's last time).
///
/// Entries at or before t − max(W, previous W) are dropped; the count in (t − W, t] is what is
/// used. Beyond [`MAX_ENTRIES`] the two closest entries are merged into the later one, which
/// can only refuse starts later on, never admit extra ones. `open_at` is t while the window has
/// room and ready jobs remain, t + `idle_recheck` when it has room but no ready job, and
/// otherwise the earliest time a start would be admitted: `t_j + W` for the entry `j` at which the
/// count, walking back from the newest entry, reaches N.
pub(crate) fn decide(d: &DecideInput<'_>) -> Decision {
    let limit = u64::from(d.rate.count);
    let window = d.rate.period.saturating_add(d.slack);
    let w_us = micros_ceil(window);
    let horizon = d
        .prev_window
        .map_or(w_us, |prev| micros_ceil(prev).max(w_us));

    let mut log = d.log.to_vec();
    if !log.is_sorted_by_key(|e| e.t_us) {
        log.sort_by_key(|e| e.t_us); // only a corrupt log is out of order
    }
    let t = log.last().map_or(d.now_us, |last| last.t_us.max(d.now_us));
    log.retain(|e| e.t_us > t.saturating_sub(horizon));
    let counted = |log: &[Entry]| -> u64 {
        log.iter()
            .filter(|e| e.t_us > t.saturating_sub(w_us))
            .map(|e| u64::from(e.n))
            .sum()
    };

    let room = limit.saturating_sub(counted(&log));
    // At most `want`, so it fits in u32.
    let admit = u32::try_from(room.min(u64::from(d.want))).unwrap_or(d.want);
    if admit > 0 {
        match log.last_mut() {
            Some(last) if last.t_us == t => last.n = last.n.saturating_add(admit),
            _ => log.push(Entry { t_us: t, n: admit }),
        }
    }
    while log.len() > MAX_ENTRIES {
        merge_closest(&mut log);
    }

    // Counted on the new log: a merge may have moved an older count into the window, and
    // `open_at` must agree with what the next decision will count.
    let open_at_us = if counted(&log) < limit {
        if d.more_ready {
            t
        } else {
            t.saturating_add(micros_ceil(d.idle_recheck))
        }
    } else {
        let mut seen = 0;
        log.iter()
            .rev()
            .find(|e| {
                seen += u64::from(e.n);
                seen >= limit
            })
            .map_or(t, |e| e.t_us)
            .saturating_add(w_us)
    };
    Decision {
        admit,
        log,
        t_us: t,
        open_at_us,
        window,
    }
}

/// Merges the two adjacent entries with the smallest gap (the earliest such pair) into the later
/// one: its time is kept and the counts are added.
fn merge_closest(log: &mut Vec<Entry>) {
    let closest = log
        .windows(2)
        .enumerate()
        .min_by_key(|(_, pair)| pair[1].t_us.saturating_sub(pair[0].t_us))
        .map(|(i, _)| i);
    if let Some(i) = closest {
        let earlier = log.remove(i);
        if let Some(later) = log.get_mut(i) {
            later.n = later.n.saturating_add(earlier.n);
        }
    }
}

#[cfg(test)]
mod tests;
