//! Unit tests of the rate-limit invariants ([`super`]) over synthetic histories.

use super::super::tests::{MS, history, job, run, write};
use super::super::{check, inv};
use super::LATE_START;
use crate::torture::{Fault, FaultKind, History, JobEnd, RateLimit, RunEvent, StateWrite};

/// A job of act `ok` carrying `key`'s limit of `n` starts per `p_ms`.
fn limited(id: u64, status: &str, key: &str, (n, p_ms): (u32, i64)) -> JobEnd {
    let mut j = job(id, "ok", status);
    j.rate = Some(RateLimit {
        key: key.to_owned(),
        limit: n,
        period_us: p_ms * MS,
    });
    j
}

/// One claim `token` of `job` by worker `w`: claimed 1 ms before `start`, the handler starts at
/// `start` ms, returns ok 1 ms later, and the claim completes 1 ms after that.
fn completed_run(
    job: u64,
    token: &str,
    start: i64,
    (writes, runs): (&mut Vec<StateWrite>, &mut Vec<RunEvent>),
) {
    writes.push(write(
        job,
        start - 1,
        ("pending", "processing"),
        (None, Some(token)),
        "w",
        None,
    ));
    writes.push(write(
        job,
        start + 2,
        ("processing", "completed"),
        (Some(token), None),
        "w",
        None,
    ));
    runs.push(run(job, token, "start", start));
    runs.push(run(job, token, "ok", start + 1));
}

/// One completed job of `key` (at `limit`) per start time (ms), jobs 1, 2, … in that order.
fn starts(key: &str, limit: (u32, i64), at: &[i64]) -> History {
    let (mut jobs, mut writes, mut runs) = (Vec::new(), Vec::new(), Vec::new());
    for (i, &s) in at.iter().enumerate() {
        let id = i as u64 + 1;
        jobs.push(limited(id, "completed", key, limit));
        completed_run(id, &format!("t{id}"), s, (&mut writes, &mut runs));
    }
    history(jobs, writes, runs)
}

#[test]
fn rate_n_plus_one_starts_within_a_period_are_reported_with_the_starts() {
    // 4 per 300 ms: the fifth start 290 ms after the first.
    let r = check(&starts("rl-0", (4, 300), &[1000, 1050, 1100, 1150, 1290]));
    assert_eq!(r.count(inv::RATE), 1, "{r}");
    assert_eq!(r.violations.len(), 1, "{r}");
    let v = &r.violations[0];
    assert_eq!(v.jobs, [1, 2, 3, 4, 5], "{r}");
    for named in [
        "rate key `rl-0` (at most 4 starts per 300.0ms",
        "5 starts within 290.0ms",
        "job 1 attempt 1 claim t1 by w (pid 1) at +1.0ms (1.0ms after its claim)",
        "job 5 attempt 1 claim t5 by w (pid 1) at +291.0ms",
    ] {
        assert!(v.why.contains(named), "`{named}` not in: {}", v.why);
    }
    // A burst of six with two windows over the limit is one violation, named by its densest
    // window (starts 2 to 6, within 200 ms).
    let r = check(&starts(
        "rl-0",
        (4, 300),
        &[1000, 1050, 1100, 1150, 1250, 1250],
    ));
    assert_eq!(r.count(inv::RATE), 1, "{r}");
    assert_eq!(r.violations[0].jobs, [2, 3, 4, 5, 6], "{r}");
    assert!(
        r.violations[0].why.contains("5 starts within 200.0ms")
            && r.violations[0].why.contains("2 windows over the limit"),
        "{r}"
    );
}

#[test]
fn rate_exactly_n_starts_in_every_window_pass() {
    // 4 per 300 ms, each group of four exactly one period after the previous one: the window
    // [s, s + P) is half-open, so a start P after another is in the next window.
    let at = [
        1000, 1000, 1100, 1299, 1300, 1300, 1400, 1599, 1600, 1899, 1900,
    ];
    let r = check(&starts("rl-0", (4, 300), &at));
    assert!(r.ok(), "{r}");
    assert!(
        r.to_string().contains(
            "rate key `rl-0` (4 per 300.0ms): 11 starts of 11 jobs (the last at +901.0ms), at most 4 in one window"
        ),
        "{r}"
    );
    // Other keys' and unlimited jobs' starts do not count: three more keys share the window.
    let mut h = starts("rl-0", (4, 300), &[1000, 1010, 1020, 1030]);
    let more = starts("rl-1", (3, 1000), &[1005, 1015, 1025]);
    for (i, mut j) in more.jobs.into_iter().enumerate() {
        j.id += 10;
        if i == 2 {
            j.rate = None;
        }
        h.jobs.push(j);
    }
    h.writes.extend(more.writes.into_iter().map(|mut w| {
        w.job += 10;
        w
    }));
    h.runs.extend(more.runs.into_iter().map(|mut r| {
        r.job += 10;
        r
    }));
    let r = check(&h);
    assert!(r.ok(), "{r}");
}

#[test]
fn rate_reads_each_keys_limit_from_its_job_rows() {
    let at = [1000, 1050, 1100, 1150, 1290];
    assert!(check(&starts("k", (5, 300), &at)).ok());
    assert_eq!(check(&starts("k", (4, 300), &at)).count(inv::RATE), 1);
    assert!(check(&starts("k", (4, 290), &at)).ok());
    assert_eq!(check(&starts("k", (1, 60), &at)).count(inv::RATE), 1);
    assert!(check(&starts("k", (1, 50), &at)).ok());
}

/// Four completed starts of `rl-0` (4 per 300 ms) from 1,000 ms on, jobs 1 to 4, and job 5
/// whose first attempt starts at 1,200 ms under claim `t5`, is then stopped with its worker `s`
/// (a SIGSTOP past its lease), reaped, aborted when `s` continues, and runs again at 5,000 ms
/// under claim `u5`.
fn a_start_that_never_completed() -> History {
    let mut h = starts("rl-0", (4, 300), &[1000, 1050, 1100, 1150]);
    h.jobs.push(limited(5, "completed", "rl-0", (4, 300)));
    h.writes.push(write(
        5,
        1199,
        ("pending", "processing"),
        (None, Some("t5")),
        "s",
        None,
    ));
    h.writes.push(write(
        5,
        3500,
        ("processing", "pending"),
        (Some("t5"), None),
        "s",
        Some("lease expired while held by s"),
    ));
    h.runs.push(run(5, "t5", "start", 1200));
    // Aborted when its worker continued and found its lease gone.
    h.runs.push(run(5, "t5", "dropped", 3650));
    let (mut writes, mut runs) = (Vec::new(), Vec::new());
    completed_run(5, "u5", 5000, (&mut writes, &mut runs));
    for r in &mut runs {
        r.attempt = 2;
    }
    h.writes.extend(writes);
    h.runs.extend(runs);
    h.faults.push(Fault {
        kind: FaultKind::Stop,
        worker: Some("s".to_owned()),
        start: 1150 * MS,
        end: Some(3600 * MS),
        note: "pid 7".to_owned(),
    });
    h.writes.sort_by_key(|w| w.at);
    for (i, w) in h.writes.iter_mut().enumerate() {
        w.seq = i as u64;
    }
    h
}

#[test]
fn rate_counts_starts_of_attempts_that_never_completed_and_no_fault_excuses_it() {
    let h = a_start_that_never_completed();
    let r = check(&h);
    // The stop excuses the reaped claim (its lease, its attempt) but not the fifth start.
    assert_eq!(r.count(inv::LEASE), 0, "{r}");
    assert_eq!(r.count(inv::RATE), 1, "{r}");
    assert_eq!(r.violations.len(), 1, "{r}");
    assert!(
        r.violations[0]
            .why
            .contains("job 5 attempt 1 claim t5 by s (pid 1) at +201.0ms"),
        "{r}"
    );
    // Its start row written twice (an INSERT retried after a lost reply) is still one start.
    let mut h = starts("rl-0", (4, 300), &[1000, 1050, 1100, 1150]);
    h.runs.push(run(4, "t4", "start", 1150));
    assert!(check(&h).ok(), "{}", check(&h));
}

/// Job 1 of `rl-0`: claim `t1` ends without a start at 20 ms by `end` (its status, attempts
/// after, `last_error`), then claim `t2` runs it to completion at 100 ms.
fn limited_then_run(end: (&str, u32, Option<&str>)) -> History {
    let (status, attempts, error) = end;
    let mut writes = vec![
        write(
            1,
            10,
            ("pending", "processing"),
            (None, Some("t1")),
            "w",
            None,
        ),
        write(
            1,
            20,
            ("processing", status),
            (Some("t1"), None),
            "w",
            error,
        ),
    ];
    writes[1].new_attempts = attempts;
    let mut runs = Vec::new();
    completed_run(1, "t2", 100, (&mut writes, &mut runs));
    history(
        vec![limited(1, "completed", "rl-0", (4, 300))],
        writes,
        runs,
    )
}

#[test]
fn rate_a_late_start_handed_back_is_no_run_but_a_consumed_attempt_without_a_start_is_caught() {
    // Handed back by the start guard: `pending`, the attempt given back, no `last_error`.
    let r = check(&limited_then_run(("pending", 0, None)));
    assert!(r.ok(), "{r}");
    assert!(
        r.to_string()
            .contains("1 claims given back without a start"),
        "{r}"
    );
    // The hand-back recorded as a retry: the attempt is gone, and no handler ran.
    let late = format!("{LATE_START}; handed back");
    let r = check(&limited_then_run(("pending", 1, Some(&late))));
    assert_eq!(r.count(inv::RATE_ATTEMPT), 1, "{r}");
    assert_eq!(r.count(inv::NO_RUN), 1, "{r}");
    assert_eq!(r.violations.len(), 2, "{r}");
    // A stop of its worker excuses the attempt consumed without a start, not the late start
    // turned into a retry.
    let mut h = limited_then_run(("pending", 1, Some(&late)));
    h.faults.push(Fault {
        kind: FaultKind::Stop,
        worker: Some("w".to_owned()),
        start: 5 * MS,
        end: Some(15 * MS),
        note: String::new(),
    });
    let r = check(&h);
    assert_eq!(r.count(inv::RATE_ATTEMPT), 1, "{r}");
    assert_eq!(r.violations.len(), 1, "{r}");
    // An attempt of a rate-limited job consumed without a start, for any other reason.
    let r = check(&limited_then_run(("pending", 1, Some("boom"))));
    assert_eq!(r.count(inv::NO_RUN), 1, "{r}");
    assert_eq!(r.violations.len(), 1, "{r}");
}
