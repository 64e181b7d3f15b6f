//! `latency`'s tests: bucket bounds, series names, percentiles of 10⁵ seeded samples per round
//! against exact ones, and the book's take and put back.
#![allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]

use std::time::Duration;

use super::{
    BUCKETS, LatencyBook, MAX_RELATIVE_ERROR, Series, TOP, bucket_bounds, bucket_of, estimate,
    lower_ms, percentile,
};

#[test]
fn buckets_are_contiguous_and_monotone() {
    assert_eq!(bucket_of(Duration::ZERO), 0);
    assert_eq!(bucket_of(Duration::from_nanos(999_999)), 0);
    assert_eq!(bucket_of(Duration::from_millis(1)), 1);
    assert_eq!(
        bucket_of(Duration::from_millis(2)),
        5,
        "2 ms opens bucket 5"
    );
    assert_eq!(bucket_of(Duration::from_millis(20)), 18);
    assert_eq!(bucket_of(Duration::from_millis(200)), 31);
    assert_eq!(bucket_of(Duration::from_secs(7 * 3600)), 99);
    assert_eq!(bucket_of(Duration::MAX), 99);
    let mut previous = Duration::ZERO;
    for k in 0..=TOP {
        let (lo, hi) = bucket_bounds(k);
        assert_eq!(
            lo,
            previous,
            "bucket {k} starts where {} ends",
            k.max(1) - 1
        );
        assert_eq!(bucket_of(lo), k);
        if k > 0 {
            assert_eq!(bucket_of(lo - Duration::from_nanos(1)), k - 1);
            let exact = lower_ms(k) * 1e6;
            assert!((lo.as_nanos() as f64 - exact).abs() <= 1.0, "{k}: {lo:?}");
            let middle = estimate(k);
            assert_eq!(bucket_of(middle), k, "the estimate of {k} lies in it");
        }
        match hi {
            Some(hi) => {
                assert!(hi > lo, "{k}");
                assert_eq!(bucket_of(hi - Duration::from_nanos(1)), k);
                previous = hi;
            }
            None => assert_eq!(k, TOP, "only the top bucket is open"),
        }
    }
    let (top, _) = bucket_bounds(TOP);
    assert!(
        (6.5..6.7).contains(&(top.as_secs_f64() / 3600.0)),
        "{top:?}"
    );
}

#[test]
fn series_names_round_trip_in_the_enum_order() {
    let names: Vec<&str> = Series::ALL.iter().map(|s| s.as_str()).collect();
    assert_eq!(
        names,
        [
            "completed",
            "retried",
            "failed",
            "cancelled",
            "snoozed",
            "pickup"
        ]
    );
    for s in Series::ALL {
        assert_eq!(Series::parse(s.as_str()), Some(s));
    }
    assert_eq!(Series::parse("done"), None);
    assert!(Series::ALL.windows(2).all(|w| w[0] < w[1]));
}

/// 10⁵ seeded log-uniform samples from 1 ms to 1 h per round: p50, p95, p99 and a few others
/// estimated from the buckets are within 9.05% of the exact percentiles.
#[test]
fn percentiles_are_within_the_bound_of_exact_ones() {
    let mut rng = fastrand::Rng::with_seed(32);
    let mut worst: f64 = 0.0;
    for round in 0..5 {
        // Each round a narrower range, so the percentiles fall in different buckets.
        let span = [3_600_000.0_f64, 60_000.0, 500.0, 20.0, 1.5][round];
        let mut samples: Vec<Duration> = (0..100_000)
            .map(|_| Duration::from_secs_f64(span.powf(rng.f64()) / 1000.0))
            .collect();
        let mut counts = [0; BUCKETS];
        for s in &samples {
            counts[usize::from(bucket_of(*s))] += 1;
        }
        samples.sort();
        for q in [0.0, 0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0] {
            let rank = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len());
            let exact = samples[rank - 1].as_secs_f64();
            let got = percentile(&counts, q).unwrap().as_secs_f64();
            let error = (got - exact).abs() / exact;
            worst = worst.max(error);
            // The estimate is a whole number of nanoseconds: 1e-6 of 1 ms at most.
            assert!(
                error <= MAX_RELATIVE_ERROR + 1e-6,
                "round {round}, q {q}: estimate {got} s, exact {exact} s, {:.2}% off",
                error * 100.0
            );
        }
    }
    assert!(worst > 0.05, "the samples test the bound ({worst})");
    assert!((2f64.powf(0.125) - 1.0 - MAX_RELATIVE_ERROR).abs() < 1e-12);
    assert_eq!(percentile(&[0; BUCKETS], 0.5), None);
}

#[test]
fn the_book_hands_out_each_count_once_in_key_order() {
    let mut book = LatencyBook::default();
    let ms = Duration::from_millis;
    book.record("b", "k", Series::Pickup, ms(3));
    book.record("a", "z", Series::Completed, ms(20));
    book.record("a", "k", Series::Failed, ms(20));
    book.record("a", "k", Series::Completed, ms(200));
    book.record("a", "k", Series::Completed, ms(20));
    book.record("a", "k", Series::Completed, ms(21));
    let taken = book.take();
    let rows: Vec<_> = taken
        .rows()
        .map(|c| (c.queue, c.kind, c.series, c.bucket, c.n))
        .collect();
    assert_eq!(
        rows,
        [
            ("a", "k", Series::Completed, 18, 2),
            ("a", "k", Series::Completed, 31, 1),
            ("a", "k", Series::Failed, 18, 1),
            ("a", "z", Series::Completed, 18, 1),
            ("b", "k", Series::Pickup, 7, 1),
        ]
    );
    assert!(book.take().is_empty(), "taken once");
    book.record("a", "k", Series::Completed, ms(20));
    book.put_back(taken);
    let again: Vec<_> = book.take().rows().map(|c| (c.bucket, c.n)).collect();
    assert_eq!(again, [(18, 3), (31, 1), (18, 1), (18, 1), (7, 1)]);
}
