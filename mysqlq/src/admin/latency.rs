//! `Admin::latency`: run and pickup latency per queue and kind over a window, read from the
//! workers' log-scale histograms (`mysqlq_run_minute`, [`crate::latency`]): attempts counted by
//! how they ended, and percentiles within 9.1% of the exact ones.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use super::Admin;
use crate::Error;
use crate::latency::{BUCKETS, Series, percentile};
use crate::store::{RunMinuteRow, run_minute_read};

/// Attempts over the window by how they ended, and pickups (attempts started).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SeriesCounts {
    /// Attempts that completed.
    pub completed: u64,
    /// Failed attempts scheduled again.
    pub retried: u64,
    /// Attempts that moved their job to `failed`.
    pub failed: u64,
    /// Attempts whose handler cancelled the job.
    pub cancelled: u64,
    /// Attempts that snoozed or were rate-limited by the service (429).
    pub snoozed: u64,
    /// Attempts started (their pickup latency was measured).
    pub pickup: u64,
}

impl SeriesCounts {
    fn add(&mut self, series: Series, n: u64) {
        let slot = match series {
            Series::Completed => &mut self.completed,
            Series::Retried => &mut self.retried,
            Series::Failed => &mut self.failed,
            Series::Cancelled => &mut self.cancelled,
            Series::Snoozed => &mut self.snoozed,
            Series::Pickup => &mut self.pickup,
        };
        *slot = slot.saturating_add(n);
    }
}

/// Percentile estimates in microseconds (`None` without data): the geometric middle of the
/// histogram bucket that holds each, within 9.1% of the exact value from 1 ms to about 6.6 h;
/// under 1 ms reads as 500 µs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Percentiles {
    /// The median.
    pub p50_us: Option<u64>,
    /// The 95th percentile.
    pub p95_us: Option<u64>,
    /// The 99th percentile.
    pub p99_us: Option<u64>,
}

impl Percentiles {
    fn of(counts: &[u64; BUCKETS]) -> Self {
        let us = |q: f64| {
            percentile(counts, q).map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        };
        Self {
            p50_us: us(0.5),
            p95_us: us(0.95),
            p99_us: us(0.99),
        }
    }
}

/// Latency of one queue and kind, or of a whole queue (`kind` `None`), over the window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LatencyRow {
    /// The queue.
    pub queue: String,
    /// The job kind; `None` for the queue's row, which sums its kinds.
    pub kind: Option<String>,
    /// Attempts by how they ended, and pickups.
    pub counts: SeriesCounts,
    /// Run time of the attempts that completed, were retried or failed.
    pub run: Percentiles,
    /// Pickup latency: from ready (the later of `available_at` and `created_at`) to the
    /// handler's start.
    pub pickup: Percentiles,
    /// The run-time histogram of the same attempts: `(bucket, count)` of each occupied bucket
    /// ([`crate::latency::bucket_bounds`]), in bucket order.
    pub run_buckets: Vec<(u8, u64)>,
    /// The pickup-latency histogram, likewise.
    pub pickup_buckets: Vec<(u8, u64)>,
}

/// The counts of one row being summed.
struct Sums {
    counts: SeriesCounts,
    run: [u64; BUCKETS],
    pickup: [u64; BUCKETS],
}

impl Sums {
    fn new() -> Self {
        Self {
            counts: SeriesCounts::default(),
            run: [0; BUCKETS],
            pickup: [0; BUCKETS],
        }
    }

    fn add(&mut self, series: Series, bucket: u8, n: u64) {
        self.counts.add(series, n);
        let histogram = match series {
            Series::Completed | Series::Retried | Series::Failed => &mut self.run,
            Series::Pickup => &mut self.pickup,
            Series::Cancelled | Series::Snoozed => return,
        };
        let b = usize::from(bucket).min(BUCKETS - 1);
        histogram[b] = histogram[b].saturating_add(n);
    }

    fn row(self, queue: &str, kind: Option<String>) -> LatencyRow {
        let occupied = |h: &[u64; BUCKETS]| -> Vec<(u8, u64)> {
            (0..=u8::MAX)
                .zip(h)
                .filter(|&(_, &n)| n > 0)
                .map(|(b, &n)| (b, n))
                .collect()
        };
        LatencyRow {
            queue: queue.to_owned(),
            kind,
            counts: self.counts,
            run: Percentiles::of(&self.run),
            pickup: Percentiles::of(&self.pickup),
            run_buckets: occupied(&self.run),
            pickup_buckets: occupied(&self.pickup),
        }
    }
}

/// Per queue its row (kind `None`) and then one per kind, queues and kinds in name order.
fn rows_of(read: Vec<RunMinuteRow>) -> Vec<LatencyRow> {
    let mut queues: BTreeMap<String, (Sums, BTreeMap<String, Sums>)> = BTreeMap::new();
    for r in read {
        let (total, kinds) = queues
            .entry(r.queue)
            .or_insert_with(|| (Sums::new(), BTreeMap::new()));
        total.add(r.series, r.bucket, r.n);
        kinds
            .entry(r.kind)
            .or_insert_with(Sums::new)
            .add(r.series, r.bucket, r.n);
    }
    let mut out = Vec::new();
    for (queue, (total, kinds)) in queues {
        out.push(total.row(&queue, None));
        for (kind, sums) in kinds {
            out.push(sums.row(&queue, Some(kind)));
        }
    }
    out
}

impl Admin {
    /// Run and pickup latency over the last `window` (at least a minute: workers count per
    /// minute), per queue and per queue and kind, from the histograms the workers flush with
    /// their statistics. Kinds a worker does not register are counted under `(unregistered)`.
    pub async fn latency(&self, window: Duration) -> Result<Vec<LatencyRow>, Error> {
        if window < Duration::from_secs(60) {
            return Err(Error::invalid(
                "latency window",
                format!("{window:?} is shorter than a minute: the workers count per minute"),
            ));
        }
        let mut conn = super::causal::CausalReads::acquire(&self.pool).await?;
        let read = run_minute_read(&mut conn, window).await?;
        conn.done().await;
        Ok(rows_of(read))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::{bucket_of, estimate};

    #[test]
    fn rows_sum_kinds_into_their_queue_and_estimate_from_the_run_series() {
        let row = |queue: &str, kind: &str, series, ms: u64, n| RunMinuteRow {
            queue: queue.into(),
            kind: kind.into(),
            series,
            bucket: bucket_of(Duration::from_millis(ms)),
            n,
        };
        let rows = rows_of(vec![
            row("slow", "nap", Series::Completed, 200, 10),
            row("test", "nap", Series::Completed, 20, 8),
            row("test", "nap", Series::Pickup, 3, 9),
            row("test", "nap", Series::Retried, 20, 1),
            row("test", "flaky", Series::Failed, 2000, 3),
            row("test", "flaky", Series::Snoozed, 9000, 50),
        ]);
        let names: Vec<(&str, Option<&str>)> = rows
            .iter()
            .map(|r| (r.queue.as_str(), r.kind.as_deref()))
            .collect();
        assert_eq!(
            names,
            [
                ("slow", None),
                ("slow", Some("nap")),
                ("test", None),
                ("test", Some("flaky")),
                ("test", Some("nap")),
            ]
        );
        let us = |ms: u64| {
            let estimate = estimate(bucket_of(Duration::from_millis(ms)));
            Some(u64::try_from(estimate.as_micros()).unwrap())
        };
        let test = &rows[2];
        assert_eq!(
            test.counts,
            SeriesCounts {
                completed: 8,
                retried: 1,
                failed: 3,
                snoozed: 50,
                pickup: 9,
                ..SeriesCounts::default()
            }
        );
        assert_eq!(
            (test.run.p50_us, test.run.p95_us),
            (us(20), us(2000)),
            "snoozes are not run times"
        );
        assert_eq!(test.pickup.p99_us, us(3));
        assert_eq!(test.run_buckets, [(18, 9), (44, 3)]);
        assert_eq!(rows[4].run.p99_us, us(20));
        assert_eq!(rows[0].run, rows[1].run);
        assert_eq!(
            rows[3].pickup,
            Percentiles::default(),
            "no pickups, no figure"
        );
    }
}
