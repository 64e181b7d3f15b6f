//! Run and pickup latency as log-scale histograms: the buckets of `mysqlq_run_minute`, the
//! percentile estimate read from them, and [`LatencyBook`], the worker's counts between two
//! flushes. Pure: no I/O, no clock.
//!
//! Bucket 0 holds what took less than 1 ms; bucket `k` in `1..=99` holds
//! `[2^((k−1)/4), 2^(k/4))` ms, four buckets per doubling; the top bucket, 99, is open (from
//! `2^24.5` ms, about 6.6 h). A percentile is estimated as the geometric middle of the bucket
//! where the cumulative count reaches its rank, so for a value of 1 ms up to the top bucket the
//! estimate is within `2^(1/8) − 1` (9.05%) of the exact percentile of the recorded values.

use std::collections::BTreeMap;
use std::time::Duration;

/// Number of buckets: 0 (under 1 ms) to 99 (open, from about 6.6 h).
pub const BUCKETS: usize = 100;

/// The top bucket (open).
const TOP: u8 = 99;

/// Bound on the relative error of [`percentile`] for values of 1 ms and more below the top
/// bucket: `2^(1/8) − 1`.
pub const MAX_RELATIVE_ERROR: f64 = 0.090_507_732_665_257_7;

/// What a latency measures: the `series` of `mysqlq_run_minute`. The run time of an attempt,
/// by how it ended (`completed` … `snoozed`, a 429 counting as snoozed), or the pickup latency
/// (ready to started) of an attempt. Ordered as the column's `ENUM`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Series {
    /// Attempts that returned `Ok`.
    Completed,
    /// Failed attempts scheduled again.
    Retried,
    /// Attempts that moved the job to `failed`.
    Failed,
    /// Attempts whose handler cancelled the job.
    Cancelled,
    /// Attempts that snoozed, or that the service rate-limited (429).
    Snoozed,
    /// From ready (the later of `available_at` and `created_at`) to the handler's start.
    Pickup,
}

impl Series {
    /// Every series, in the column's order.
    pub const ALL: [Self; 6] = [
        Self::Completed,
        Self::Retried,
        Self::Failed,
        Self::Cancelled,
        Self::Snoozed,
        Self::Pickup,
    ];

    /// The name stored in `mysqlq_run_minute.series`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Retried => "retried",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Snoozed => "snoozed",
            Self::Pickup => "pickup",
        }
    }

    /// The series of a stored name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// `true` for the series of an attempt's run time (every series but pickup).
    pub fn is_run(self) -> bool {
        self != Self::Pickup
    }
}

/// The lower bound of bucket `k` ≥ 1, in milliseconds: `2^((k−1)/4)`.
fn lower_ms(k: u8) -> f64 {
    (f64::from(k - 1) / 4.0).exp2()
}

/// The bucket that holds `took`.
pub fn bucket_of(took: Duration) -> u8 {
    let ms = took.as_secs_f64() * 1000.0;
    if ms < 1.0 {
        return 0;
    }
    let guess = (ms.log2() * 4.0).floor() + 1.0;
    // In 1..=99 once clamped, so the cast is exact.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let mut k = guess.clamp(1.0, f64::from(TOP)) as u8;
    // log2 may round across a bound: the bounds themselves decide.
    while k < TOP && ms >= lower_ms(k + 1) {
        k += 1;
    }
    while k > 1 && ms < lower_ms(k) {
        k -= 1;
    }
    k
}

/// The bounds of bucket `k`: the shortest duration it holds (to the nanosecond), and the
/// shortest the next one holds (`None` for the top bucket, which is open).
pub fn bucket_bounds(k: u8) -> (Duration, Option<Duration>) {
    let lower = |k: u8| -> Duration {
        if k == 0 {
            return Duration::ZERO;
        }
        let k = k.min(TOP);
        // Near the bound, then the first nanosecond `bucket_of` puts in `k`.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let mut ns = (lower_ms(k) * 1e6).ceil() as u64;
        while bucket_of(Duration::from_nanos(ns - 1)) >= k {
            ns -= 1;
        }
        while bucket_of(Duration::from_nanos(ns)) < k {
            ns += 1;
        }
        Duration::from_nanos(ns)
    };
    let upper = (k < TOP).then(|| lower(k + 1));
    (lower(k), upper)
}

/// The value a percentile falling in bucket `k` reads as: the bucket's geometric middle,
/// `2^((2k−1)/8)` ms; 0.5 ms for bucket 0 (under 1 ms), and for the open top bucket the middle
/// it would have as a closed one (its values may be any longer).
pub fn estimate(k: u8) -> Duration {
    if k == 0 {
        return Duration::from_micros(500);
    }
    let ms = (f64::from(2 * u32::from(k.min(TOP)) - 1) / 8.0).exp2();
    Duration::from_secs_f64(ms / 1000.0)
}

/// The bucket of the `q`-quantile (`q` in `0.0..=1.0`; 0.5 for p50) of the values counted in
/// `counts`: the first bucket where the cumulative count reaches the rank `⌈q·n⌉` (at least 1).
/// `None` when nothing was counted.
pub fn percentile_bucket(counts: &[u64; BUCKETS], q: f64) -> Option<u8> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    // The rank, 1..=total: the product rounds, so the clamp keeps it in range.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).clamp(1, total);
    let mut seen = 0;
    for (k, n) in (0..=TOP).zip(counts) {
        seen += n;
        if seen >= rank {
            return Some(k);
        }
    }
    Some(TOP)
}

/// The estimate of the `q`-quantile of the values counted in `counts` ([`percentile_bucket`],
/// read as its bucket's [`estimate`]); `None` when nothing was counted.
pub fn percentile(counts: &[u64; BUCKETS], q: f64) -> Option<Duration> {
    percentile_bucket(counts, q).map(estimate)
}

/// Occupied buckets of one queue and kind: `(series, bucket)` → count.
type Cells = BTreeMap<(Series, u8), u64>;

/// Counts by queue, kind, series and bucket, held sparse and in the order of
/// `mysqlq_run_minute`'s primary key (queue, kind, series, bucket).
type Book = BTreeMap<String, BTreeMap<String, Cells>>;

/// A worker's latency counts since its last flush, by queue, kind, series and bucket. Memory is
/// bounded by the cells: queues × kinds × series × buckets.
#[derive(Debug, Default)]
pub struct LatencyBook {
    book: Book,
}

impl LatencyBook {
    /// Counts one latency of `series` for a job of `queue` and `kind`.
    pub fn record(&mut self, queue: &str, kind: &str, series: Series, took: Duration) {
        let kinds = match self.book.get_mut(queue) {
            Some(kinds) => kinds,
            None => self.book.entry(queue.to_owned()).or_default(),
        };
        let cells = match kinds.get_mut(kind) {
            Some(cells) => cells,
            None => kinds.entry(kind.to_owned()).or_default(),
        };
        *cells.entry((series, bucket_of(took))).or_default() += 1;
    }

    /// Everything counted so far, leaving the book empty: each count is handed out once.
    pub fn take(&mut self) -> LatencyDeltas {
        LatencyDeltas {
            book: std::mem::take(&mut self.book),
        }
    }

    /// Adds back counts that were taken but not written (a failed flush), for the next flush.
    pub fn put_back(&mut self, deltas: LatencyDeltas) {
        for (queue, kinds) in deltas.book {
            let mine = self.book.entry(queue).or_default();
            for (kind, cells) in kinds {
                let mine = mine.entry(kind).or_default();
                for (cell, n) in cells {
                    *mine.entry(cell).or_default() += n;
                }
            }
        }
    }
}

/// Counts taken from a [`LatencyBook`], to be written once.
#[derive(Debug, Default)]
pub struct LatencyDeltas {
    book: Book,
}

/// One row of [`LatencyDeltas`]: `n` more latencies of `series` in `bucket` for jobs of
/// `queue` and `kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatencyCell<'a> {
    /// The queue.
    pub queue: &'a str,
    /// The job kind.
    pub kind: &'a str,
    /// What was measured.
    pub series: Series,
    /// The bucket ([`bucket_of`]).
    pub bucket: u8,
    /// How many.
    pub n: u64,
}

impl LatencyDeltas {
    /// The rows, in the order of `mysqlq_run_minute`'s primary key (queue, kind, series,
    /// bucket), so that writers lock them in one order.
    pub fn rows(&self) -> impl Iterator<Item = LatencyCell<'_>> {
        self.book.iter().flat_map(|(queue, kinds)| {
            kinds.iter().flat_map(move |(kind, cells)| {
                cells
                    .iter()
                    .map(move |(&(series, bucket), &n)| LatencyCell {
                        queue,
                        kind,
                        series,
                        bucket,
                        n,
                    })
            })
        })
    }

    /// `true` when nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.book.is_empty()
    }
}

#[cfg(test)]
mod tests;
