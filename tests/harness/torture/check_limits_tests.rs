//! Unit tests of the queue-limit and 429 invariants ([`super`]) over synthetic histories.

use super::super::tests::{MS, history, job, run, write};
use super::super::{check, inv};
use crate::torture::{
    Fault, FaultKind, History, Hold, JobEnd, LIMITED_QUEUE, QueueLimits, RateLimit,
};

/// A job of `queue`, completed.
fn of(id: u64, queue: &str) -> JobEnd {
    let mut j = job(id, "ok", "completed");
    j.queue = queue.to_owned();
    j
}

/// The limits of [`LIMITED_QUEUE`]: `rate` (N per P ms) and `global`.
fn limits(rate: Option<(u32, i64)>, global: Option<u32>) -> QueueLimits {
    QueueLimits {
        queue: LIMITED_QUEUE.to_owned(),
        rate: rate.map(|(n, p)| (n, p * MS)),
        global,
    }
}

/// Claim `t<job>` of `job` by worker `w`: claimed at `claim` ms, its handler runs from `start`
/// to `end` ms ending with `event`, and the claim completes 1 ms after (or, for `limited`,
/// goes back with its attempt).
fn claim(h: &mut History, job: u64, w: &str, (claim, start, end): (i64, i64, i64), event: &str) {
    let token = format!("t{job}");
    h.writes.push(write(
        job,
        claim,
        ("pending", "processing"),
        (None, Some(&token)),
        w,
        None,
    ));
    let (status, error) = if event == "limited" {
        ("pending", Some("snoozed"))
    } else {
        ("completed", None)
    };
    h.writes.push(write(
        job,
        end + 1,
        ("processing", status),
        (Some(&token), None),
        w,
        error,
    ));
    h.runs.push(run(job, &token, "start", start));
    h.runs.push(run(job, &token, event, end));
    h.writes.sort_by_key(|w| w.at);
}

/// Jobs 1.. of [`LIMITED_QUEUE`], each claimed 1 ms before its run `(start, end)` ms.
fn runs_of_the_limited_queue(q: QueueLimits, runs: &[(i64, i64)]) -> History {
    let mut h = history(Vec::new(), Vec::new(), Vec::new());
    for (i, &(start, end)) in runs.iter().enumerate() {
        let id = i as u64 + 1;
        h.jobs.push(of(id, LIMITED_QUEUE));
        claim(&mut h, id, "w", (start - 1, start, end), "ok");
    }
    h.queue_limits.push(q);
    h
}

#[test]
fn global_more_runs_of_the_queue_at_once_than_its_limit_are_reported() {
    // Global limit 3: four runs overlap from 1,300 ms to 1,400 ms.
    let runs = [(1000, 1500), (1100, 1600), (1200, 1400), (1300, 1700)];
    let r = check(&runs_of_the_limited_queue(limits(None, Some(3)), &runs));
    assert_eq!(r.count(inv::GLOBAL), 1, "{r}");
    let v = &r.violations[0];
    assert_eq!(v.jobs, [1, 2, 3, 4], "{r}");
    assert!(
        v.why
            .contains("queue `torture_g` (limit 3): 4 runs at once outside any fault window"),
        "{}",
        v.why
    );
    // With limit 4, or with the third run over before the fourth starts, it holds.
    assert!(check(&runs_of_the_limited_queue(limits(None, Some(4)), &runs)).ok());
    let apart = [(1000, 1500), (1100, 1600), (1200, 1300), (1300, 1700)];
    let r = check(&runs_of_the_limited_queue(limits(None, Some(3)), &apart));
    assert!(r.ok(), "{r}");
    // Runs of another queue do not count.
    let mut h = runs_of_the_limited_queue(limits(None, Some(3)), &runs);
    h.jobs[3].queue = crate::torture::QUEUE.to_owned();
    assert!(check(&h).ok());
}

#[test]
fn global_runs_within_a_fault_window_of_their_worker_are_excused() {
    let mut h = runs_of_the_limited_queue(
        limits(None, Some(3)),
        &[(1000, 1500), (1100, 1600), (1200, 1400)],
    );
    h.jobs.push(of(4, LIMITED_QUEUE));
    claim(&mut h, 4, "s", (1299, 1300, 1700), "ok");
    h.faults.push(Fault {
        kind: FaultKind::Stop,
        worker: Some("s".to_owned()),
        start: 900 * MS,
        end: Some(1000 * MS),
        note: String::new(),
    });
    let r = check(&h);
    assert!(r.ok(), "{r}");
    // A connection fault excuses nothing.
    h.faults[0].kind = FaultKind::KillConnection;
    assert_eq!(check(&h).count(inv::GLOBAL), 1);
}

#[test]
fn queue_rate_counts_every_start_of_the_queue() {
    // 2 per 1,000 ms: three starts within 500 ms.
    let runs = [(1000, 1010), (1200, 1210), (1500, 1510), (2600, 2610)];
    let r = check(&runs_of_the_limited_queue(
        limits(Some((2, 1000)), None),
        &runs,
    ));
    assert_eq!(r.count(inv::RATE), 1, "{r}");
    assert!(
        r.violations[0]
            .why
            .contains("queue `torture_g` (at most 2 starts per 1000.0ms, as mysqlq_queue says): 3 starts within 500.0ms"),
        "{r}"
    );
    let spread = [(1000, 1010), (1200, 1210), (2000, 2010), (2200, 2210)];
    let r = check(&runs_of_the_limited_queue(
        limits(Some((2, 1000)), None),
        &spread,
    ));
    assert!(r.ok(), "{r}");
    assert!(
        r.to_string()
            .contains("queue `torture_g` (2 per 1000.0ms): 4 starts of 4 jobs"),
        "{r}"
    );
}

#[test]
fn a_limited_queue_whose_limits_were_never_stored_is_reported() {
    let mut h = runs_of_the_limited_queue(limits(None, Some(3)), &[(1000, 1100)]);
    h.queue_limits.clear();
    let r = check(&h);
    assert_eq!(r.count(inv::GLOBAL), 1, "{r}");
}

/// Job 1 of [`LIMITED_QUEUE`] answers 429 at 1,000 ms; its hold (the queue, `''`) is written at
/// 1,002 ms until 2,000 ms. Job 2 of the queue and job 3 of the main queue are claimed at
/// `claim_at` ms and run 1 ms later for 10 ms.
fn a_held_queue(claim_at: i64) -> History {
    let mut h = history(
        vec![
            of(1, LIMITED_QUEUE),
            of(2, LIMITED_QUEUE),
            of(3, crate::torture::QUEUE),
        ],
        Vec::new(),
        Vec::new(),
    );
    claim(&mut h, 1, "a", (900, 901, 1000), "limited");
    h.holds.push(Hold {
        queue: LIMITED_QUEUE.to_owned(),
        key: String::new(),
        job: 1,
        at: 1002 * MS,
        until: 2000 * MS,
    });
    claim(
        &mut h,
        2,
        "b",
        (claim_at, claim_at + 1, claim_at + 11),
        "ok",
    );
    claim(
        &mut h,
        3,
        "b",
        (claim_at, claim_at + 1, claim_at + 11),
        "ok",
    );
    h.queue_limits.push(limits(None, None));
    h
}

#[test]
fn held_a_claim_of_a_held_queue_before_the_hold_ends_is_reported() {
    let r = check(&a_held_queue(1700));
    assert_eq!(r.count(inv::HELD), 1, "{r}");
    assert_eq!(r.violations.len(), 1, "{r}");
    assert_eq!(r.violations[0].jobs, [1, 2], "{r}");
    assert!(
        r.violations[0].why.contains(
            "queue `torture_g` was held by job 1's 429 (written at +102.0ms by a, until +1100.0ms), yet job 2 was claimed at +800.0ms (claim t2 by b)"
        ),
        "{r}"
    );
    // Within the margin after the hold's statement (its commit may follow), or from its end on,
    // a claim is allowed.
    assert!(check(&a_held_queue(1550)).ok());
    assert!(check(&a_held_queue(2000)).ok());
    // A stop of the claimer between the hold and the claim excuses it (its read may predate
    // the hold), as does one of the holder (its commit may have waited).
    for worker in ["a", "b"] {
        let mut h = a_held_queue(1700);
        h.faults.push(Fault {
            kind: FaultKind::Stop,
            worker: Some(worker.to_owned()),
            start: 1100 * MS,
            end: Some(1400 * MS),
            note: String::new(),
        });
        assert!(check(&h).ok(), "stop of {worker}");
    }
}

#[test]
fn held_a_keys_hold_covers_that_key_only() {
    let mut h = a_held_queue(1700);
    let key = |k: &str| {
        Some(RateLimit {
            key: k.to_owned(),
            limit: 100,
            period_us: 1000 * MS,
        })
    };
    h.holds[0].key = "rl-0".to_owned();
    h.jobs[0].rate = key("rl-0");
    h.jobs[1].rate = key("rl-1");
    assert!(check(&h).ok(), "another key's claim");
    h.jobs[1].rate = key("rl-0");
    assert_eq!(check(&h).count(inv::HELD), 1, "the held key's claim");
    h.jobs[1].rate = None;
    assert!(check(&h).ok(), "an unkeyed job of the queue");
}

#[test]
fn held_a_429_consumes_no_attempt_and_writes_its_hold() {
    // Not even a claim: the 429's claim went back without its hold.
    let mut h = a_held_queue(2500);
    h.holds.clear();
    let r = check(&h);
    assert_eq!(r.count(inv::HELD), 1, "{r}");
    assert!(r.violations[0].why.contains("no hold was written"), "{r}");
    // The claim consumed its attempt (a retry), with no fault on its worker.
    let mut h = a_held_queue(2500);
    let back = h
        .writes
        .iter_mut()
        .find(|w| w.job == 1 && w.new_status == "pending")
        .expect("the hand-back");
    back.new_attempts = back.old_attempts;
    back.last_error = Some("rate limited".to_owned());
    let r = check(&h);
    assert_eq!(r.count(inv::RATE_ATTEMPT), 1, "{r}");
    // A kill of its worker excuses it (reaped before the hand-back could be written).
    h.faults.push(Fault {
        kind: FaultKind::Kill,
        worker: Some("a".to_owned()),
        start: 1000 * MS,
        end: Some(1000 * MS),
        note: String::new(),
    });
    assert_eq!(check(&h).count(inv::RATE_ATTEMPT), 0);
}
