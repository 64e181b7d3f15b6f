//! Unit tests of the checker over synthetic histories.

use super::*;
use crate::torture::{Fault, FaultKind, History, JobEnd, RunEvent, StateWrite};

pub(super) const MS: i64 = 1000;

pub(super) fn job(id: u64, act: &str, status: &str) -> JobEnd {
    JobEnd {
        id,
        queue: crate::torture::QUEUE.to_owned(),
        act: act.to_owned(),
        status: status.to_owned(),
        attempts: 1,
        max_attempts: 8,
        last_error: None,
        ordering_key: None,
        concurrency: None,
        cancelled_by: None,
        rate: None,
    }
}

/// A state write of `job` at `at` ms.
pub(super) fn write(
    job: u64,
    at: i64,
    (old_status, new_status): (&str, &str),
    (old_token, new_token): (Option<&str>, Option<&str>),
    worker: &str,
    last_error: Option<&str>,
) -> StateWrite {
    StateWrite {
        seq: 0,
        job,
        old_status: old_status.to_owned(),
        new_status: new_status.to_owned(),
        old_token: old_token.map(str::to_owned),
        new_token: new_token.map(str::to_owned),
        old_worker: old_token.map(|_| worker.to_owned()),
        new_worker: new_token.map(|_| worker.to_owned()),
        old_attempts: 1,
        new_attempts: if new_status == "pending" && last_error == Some("snoozed") {
            0
        } else {
            1
        },
        last_error: last_error.map(str::to_owned),
        at: at * MS,
    }
}

pub(super) fn run(job: u64, token: &str, event: &str, at: i64) -> RunEvent {
    RunEvent {
        job,
        attempt: 1,
        pid: 1,
        tag: "ok".to_owned(),
        event: event.to_owned(),
        token: token.to_owned(),
        at: at * MS,
    }
}

pub(super) fn history(
    jobs: Vec<JobEnd>,
    mut writes: Vec<StateWrite>,
    runs: Vec<RunEvent>,
) -> History {
    writes.sort_by_key(|w| w.at);
    for (i, w) in writes.iter_mut().enumerate() {
        w.seq = i as u64;
    }
    History {
        jobs,
        writes,
        runs,
        faults: Vec::new(),
        actions: Vec::new(),
        ..History::default()
    }
}

/// Issue 13, defect 1: the same worker re-claims a snoozed job; a stale heartbeat drops the
/// new claim, whose lease expires on a healthy worker.
fn defect_one() -> History {
    history(
        vec![job(1, "snooze0", "completed")],
        vec![
            write(
                1,
                0,
                ("pending", "processing"),
                (None, Some("t1")),
                "w",
                None,
            ),
            write(
                1,
                20,
                ("processing", "pending"),
                (Some("t1"), None),
                "w",
                Some("snoozed"),
            ),
            write(
                1,
                30,
                ("pending", "processing"),
                (None, Some("t2")),
                "w",
                None,
            ),
            write(
                1,
                2100,
                ("processing", "pending"),
                (Some("t2"), None),
                "w",
                Some("lease expired while held by w"),
            ),
            write(
                1,
                2200,
                ("pending", "processing"),
                (None, Some("t3")),
                "w",
                None,
            ),
            write(
                1,
                2300,
                ("processing", "completed"),
                (Some("t3"), None),
                "w",
                None,
            ),
        ],
        vec![
            run(1, "t1", "start", 5),
            run(1, "t1", "snooze", 10),
            run(1, "t3", "start", 2210),
            run(1, "t3", "ok", 2250),
        ],
    )
}

#[test]
fn a_lease_expiring_on_a_healthy_worker_is_reported_with_its_history() {
    let report = check(&defect_one());
    assert_eq!(report.count(inv::LEASE), 1, "{report}");
    assert_eq!(report.count(inv::NO_RUN), 1, "{report}");
    assert_eq!(report.violations.len(), 2, "{report}");
    let text = report.to_string();
    assert!(text.contains("claim t2 by w"), "{text}");
    assert!(text.contains("lease expired while held by w"), "{text}");
}

#[test]
fn a_stopped_worker_excuses_its_expired_lease_and_an_overlap_within_the_window() {
    let mut h = defect_one();
    h.runs.push(run(1, "t2", "start", 40));
    h.runs.push(run(1, "t2", "dropped", 2600)); // 400 ms after the job's new run started
    h.faults.push(Fault {
        kind: FaultKind::Stop,
        worker: Some("w".to_owned()),
        start: 100 * MS,
        end: Some(2500 * MS),
        note: String::new(),
    });
    // The new run is the same worker's here: only the stale run's worker must be excused.
    let report = check(&h);
    assert!(report.ok(), "{report}");
    // Ending 2 s after the stop ended, the stale run overlaps the new one (running until
    // 4 s) beyond the window.
    h.runs.last_mut().unwrap().at = 4500 * MS;
    for r in &mut h.runs {
        if r.token == "t3" && r.event == "ok" {
            r.at = 4000 * MS;
        }
    }
    h.writes[5].at = 4100 * MS;
    let report = check(&h);
    assert_eq!(report.count(inv::OVERLAP), 1, "{report}");
}

#[test]
fn connection_faults_excuse_nothing() {
    let mut h = defect_one();
    h.faults.push(Fault {
        kind: FaultKind::CommitReplyLost,
        worker: Some("w".to_owned()),
        start: 30 * MS,
        end: Some(30 * MS),
        note: String::new(),
    });
    assert_eq!(check(&h).count(inv::LEASE), 1);
}

#[test]
fn double_completions_and_completions_without_an_ok_are_reported() {
    let h = history(
        vec![job(1, "ok", "completed")],
        vec![
            write(
                1,
                0,
                ("pending", "processing"),
                (None, Some("t1")),
                "a",
                None,
            ),
            write(
                1,
                10,
                ("processing", "completed"),
                (Some("t1"), None),
                "a",
                None,
            ),
            write(
                1,
                20,
                ("completed", "processing"),
                (None, Some("t2")),
                "b",
                None,
            ),
            write(
                1,
                30,
                ("processing", "completed"),
                (Some("t2"), None),
                "b",
                None,
            ),
        ],
        vec![run(1, "t1", "start", 1), run(1, "t1", "ok", 5)],
    );
    let report = check(&h);
    assert_eq!(report.count(inv::TWICE), 1, "{report}");
    assert_eq!(report.count(inv::COMPLETED_BY_OWNER), 1, "{report}");
}

#[test]
fn an_ok_turned_into_a_consumed_attempt_is_reported_but_a_timeout_after_ok_is_not() {
    let mut h = history(
        vec![job(1, "ok", "completed")],
        vec![
            write(
                1,
                0,
                ("pending", "processing"),
                (None, Some("t1")),
                "w",
                None,
            ),
            write(
                1,
                50,
                ("processing", "pending"),
                (Some("t1"), None),
                "w",
                Some("boom"),
            ),
            write(
                1,
                60,
                ("pending", "processing"),
                (None, Some("t2")),
                "w",
                None,
            ),
            write(
                1,
                90,
                ("processing", "completed"),
                (Some("t2"), None),
                "w",
                None,
            ),
        ],
        vec![
            run(1, "t1", "start", 1),
            run(1, "t1", "ok", 20),
            run(1, "t2", "start", 61),
            run(1, "t2", "ok", 80),
        ],
    );
    let report = check(&h);
    assert_eq!(report.count(inv::OUTCOME), 1, "{report}");
    // Aborted (a timeout) while recording `ok`: the handler never returned Ok.
    h.runs.push(run(1, "t1", "dropped", 40));
    assert!(check(&h).ok(), "{}", check(&h));
}

#[test]
fn a_concurrency_limit_exceeded_by_healthy_workers_is_reported() {
    let mut jobs = Vec::new();
    let mut writes = Vec::new();
    let mut runs = Vec::new();
    for id in 1..=3u64 {
        let mut j = job(id, "ok", "completed");
        j.concurrency = Some(("k".to_owned(), 2));
        jobs.push(j);
        let t = format!("t{id}");
        let at = i64::try_from(id).unwrap();
        writes.push(write(
            id,
            at,
            ("pending", "processing"),
            (None, Some(&t)),
            "w",
            None,
        ));
        writes.push(write(
            id,
            100,
            ("processing", "completed"),
            (Some(&t), None),
            "w",
            None,
        ));
        runs.push(run(id, &t, "start", at));
        runs.push(run(id, &t, "ok", 90));
    }
    let report = check(&history(jobs, writes, runs));
    assert_eq!(report.count(inv::CONCURRENCY), 1, "{report}");
    assert_eq!(report.violations.len(), 1, "{report}");
}

fn action(id: u64, action: &str, jobs: u64, changed: Vec<u64>) -> crate::torture::Action {
    crate::torture::Action {
        id,
        action: action.to_owned(),
        actor: "op".to_owned(),
        jobs,
        expected: None,
        changed,
    }
}

#[test]
fn a_run_now_off_the_record_or_a_bulk_action_past_its_count_is_reported() {
    // Job 1 was due later and ran now: one `pending` → `pending` write.
    let mut h = history(
        vec![job(1, "ok", "pending"), job(2, "ok", "pending")],
        vec![
            write(1, 10, ("pending", "pending"), (None, None), "w", None),
            write(2, 11, ("pending", "pending"), (None, None), "w", None),
        ],
        vec![],
    );
    h.actions = vec![action(1, "run_now", 1, vec![1])];
    let r = check(&h);
    assert_eq!(
        r.count(inv::OPERATOR_TRAIL),
        1,
        "job 2 ran now off the record: {r}"
    );
    h.actions[0] = action(1, "run_now", 2, vec![1, 2]);
    h.actions[0].expected = Some(2);
    let r = check(&h);
    assert_eq!(
        r.count(inv::OPERATOR_TRAIL) + r.count(inv::BULK_AT_MOST),
        0,
        "{r}"
    );
    h.actions[0].expected = Some(1);
    let r = check(&h);
    assert_eq!(
        r.count(inv::BULK_AT_MOST),
        1,
        "two changed, one confirmed: {r}"
    );
}

#[test]
fn an_operator_action_changing_a_job_twice_or_off_the_record_is_reported() {
    // Job 1 failed, retried, failed again, retried again: two retry changes, one retry action.
    let failed_twice = vec![
        write(
            1,
            10,
            ("pending", "failed"),
            (None, None),
            "w",
            Some("permanent"),
        ),
        write(1, 20, ("failed", "pending"), (None, None), "w", None),
        write(
            1,
            30,
            ("pending", "failed"),
            (None, None),
            "w",
            Some("permanent"),
        ),
        write(1, 40, ("failed", "pending"), (None, None), "w", None),
        write(
            1,
            50,
            ("pending", "failed"),
            (None, None),
            "w",
            Some("permanent"),
        ),
    ];
    let mut failed = job(1, "fail", "failed");
    failed.last_error = Some("torture: deliberate permanent failure".to_owned());
    let mut h = history(vec![failed], failed_twice, vec![]);
    h.actions = vec![action(1, "retry", 1, vec![1])];
    let r = check(&h);
    assert_eq!(r.count(inv::OPERATOR_ONCE), 1, "{r}");
    // Two actions, each named it once: as the history shows.
    h.actions.push(action(2, "retry", 1, vec![1]));
    assert!(check(&h).ok(), "{}", check(&h));
    // A cancel no action names; an action whose count is not its links; a job gone that no
    // delete names.
    let mut h = history(
        vec![job(2, "ok", "cancelled")],
        vec![write(
            2,
            10,
            ("pending", "cancelled"),
            (None, None),
            "w",
            None,
        )],
        vec![],
    );
    h.actions = vec![action(1, "delete", 2, vec![3])];
    h.runs.push(run(3, "t3", "start", 5));
    let r = check(&h);
    assert_eq!(
        r.count(inv::OPERATOR_TRAIL),
        2,
        "the cancel and the count: {r}"
    );
    assert_eq!(
        r.count(inv::LOST),
        1,
        "cancelled without a cancel on record: {r}"
    );
    h.actions[0].jobs = 1;
    h.actions.push(action(2, "cancel", 1, vec![2]));
    let r = check(&h);
    assert!(r.ok(), "{r}");
}

/// A workflow of two steps, 2 depending on 1: inserted (`pending` → `waiting` for 2), 1 runs
/// and completes, 2 is released and runs. `early` claims 2 before 1's completion instead.
fn two_steps(early: bool) -> History {
    let claim2 = if early { 3 } else { 7 };
    let mut h = history(
        vec![job(1, "ok", "completed"), job(2, "ok", "completed")],
        vec![
            write(2, 0, ("pending", "waiting"), (None, None), "w", None),
            write(
                1,
                1,
                ("pending", "processing"),
                (None, Some("t1")),
                "w",
                None,
            ),
            write(
                1,
                5,
                ("processing", "completed"),
                (Some("t1"), Some("t1")),
                "w",
                None,
            ),
            write(
                2,
                if early { 2 } else { 5 },
                ("waiting", "pending"),
                (None, None),
                "w",
                None,
            ),
            write(
                2,
                claim2,
                ("pending", "processing"),
                (None, Some("t2")),
                "w",
                None,
            ),
            write(
                2,
                claim2 + 4,
                ("processing", "completed"),
                (Some("t2"), Some("t2")),
                "w",
                None,
            ),
        ],
        vec![
            run(1, "t1", "start", 2),
            run(1, "t1", "ok", 4),
            run(2, "t2", "start", claim2 + 1),
            run(2, "t2", "ok", claim2 + 2),
        ],
    );
    h.edges = vec![(1, 2)];
    h.steps = [(1, (false, false)), (2, (false, false))]
        .into_iter()
        .collect();
    h
}

#[test]
fn workflow_a_step_claimed_before_its_dependency_completed_is_caught() {
    let r = check(&two_steps(false));
    assert!(r.ok(), "{r}");
    let r = check(&two_steps(true));
    assert_eq!(r.count(inv::WF_EARLY), 1, "{r}");
}

#[test]
fn workflow_a_settlement_that_never_landed_or_a_workflow_left_running_is_caught() {
    let mut h = two_steps(false);
    h.unsettled = vec![(1, 2)];
    let r = check(&h);
    assert_eq!(r.count(inv::WF_SETTLED), 1, "{r}");
    let mut h = two_steps(false);
    h.unfinished = vec![7];
    let r = check(&h);
    assert_eq!(r.count(inv::WF_SETTLED), 1, "{r}");
}

/// [`two_steps`] with step 2 handed off: its release is its claim (`waiting` → `processing`
/// under the worker's token, in the settlement of step 1's completion).
fn two_steps_handed_off(early: bool) -> History {
    let mut h = two_steps(early);
    h.writes
        .retain(|w| !(w.job == 2 && w.old_status == "waiting"));
    for w in &mut h.writes {
        if w.job == 2 && w.old_status == "pending" && w.new_status == "processing" {
            w.old_status = "waiting".to_owned();
        }
    }
    h
}

/// `h` with step 2 released `pending` once more, after everything: WF_ONCE reports it.
fn assert_released_again_is_caught(mut h: History) {
    h.writes.push(write(
        2,
        20,
        ("waiting", "pending"),
        (None, None),
        "w",
        None,
    ));
    h.writes.last_mut().unwrap().seq = 100;
    let r = check(&h);
    assert_eq!(r.count(inv::WF_ONCE), 1, "{r}");
}

#[test]
fn workflow_a_handed_off_step_is_one_release_and_its_claim_is_checked_like_any() {
    let r = check(&two_steps_handed_off(false));
    assert!(r.ok(), "{r}");
    let r = check(&two_steps_handed_off(true));
    assert_eq!(r.count(inv::WF_EARLY), 1, "{r}");
    // Released `pending` and handed off as well: twice.
    assert_released_again_is_caught(two_steps_handed_off(false));
}

#[test]
fn workflow_a_step_released_twice_or_cancelled_without_reason_is_caught() {
    assert_released_again_is_caught(two_steps(false));

    // Step 2 cancelled upstream though its dependency completed: no reason, and it had run.
    let mut h = two_steps(false);
    h.jobs[1].status = "cancelled".to_owned();
    h.jobs[1].cancelled_by = Some("mysqlq:upstream".to_owned());
    let r = check(&h);
    assert_eq!(r.count(inv::WF_UPSTREAM), 1, "{r}");

    // A dependency that failed cancels it, if it was never released or claimed: fine.
    let mut h = history(
        vec![job(1, "fail", "failed"), job(2, "ok", "cancelled")],
        vec![
            write(2, 0, ("pending", "waiting"), (None, None), "w", None),
            write(
                1,
                1,
                ("pending", "processing"),
                (None, Some("t1")),
                "w",
                None,
            ),
            write(
                1,
                5,
                ("processing", "failed"),
                (Some("t1"), Some("t1")),
                "w",
                Some("permanent"),
            ),
            write(2, 6, ("waiting", "cancelled"), (None, None), "w", None),
        ],
        vec![run(1, "t1", "start", 2), run(1, "t1", "error", 4)],
    );
    h.jobs[0].last_error = Some("permanent".to_owned());
    h.jobs[1].cancelled_by = Some("mysqlq:upstream".to_owned());
    h.edges = vec![(1, 2)];
    h.steps = [(1, (false, false)), (2, (false, false))]
        .into_iter()
        .collect();
    let r = check(&h);
    assert!(r.ok(), "{r}");
    // The same with `ignore_failed`: it should have run.
    h.steps.insert(2, (true, false));
    let r = check(&h);
    assert_eq!(r.count(inv::WF_UPSTREAM), 1, "{r}");
    h.rolled_back_found = vec!["rolled-back-3".to_owned()];
    assert_eq!(check(&h).count(inv::WF_ROLLBACK), 1);
}

#[test]
fn workflow_a_grafted_step_its_grafters_dependents_do_not_wait_for_is_caught() {
    let mut h = two_steps(false);
    // Job 3 was grafted by job 1, which job 2 waits for; 2 must wait for 3 too.
    h.grafted_by.insert(3, 1);
    let r = check(&h);
    assert_eq!(r.count(inv::WF_GRAFT), 1, "{r}");
    h.edges.push((3, 2));
    assert_eq!(check(&h).count(inv::WF_GRAFT), 0);
}

/// Job 1 (plain) and job 2 (a workflow step) each claimed and run by `worker`, and completed:
/// 1 by `end1`, 2 by `end2` (`completed` or `deleted`).
fn completions_by(worker: &str, end1: &str, end2: &str) -> History {
    let mut h = history(
        vec![job(1, "ok", "completed"), job(2, "ok", "completed")],
        vec![
            write(
                1,
                0,
                ("pending", "processing"),
                (None, Some("t1")),
                worker,
                None,
            ),
            write(
                1,
                10,
                ("processing", end1),
                (Some("t1"), None),
                worker,
                None,
            ),
            write(
                2,
                20,
                ("pending", "processing"),
                (None, Some("t2")),
                worker,
                None,
            ),
            write(
                2,
                30,
                ("processing", end2),
                (Some("t2"), None),
                worker,
                None,
            ),
        ],
        vec![
            run(1, "t1", "start", 1),
            run(1, "t1", "ok", 5),
            run(2, "t2", "start", 21),
            run(2, "t2", "ok", 25),
        ],
    );
    h.steps.insert(2, (false, false));
    h.deleted.extend((end1 == "deleted").then_some(1));
    h.deleted.extend((end2 == "deleted").then_some(2));
    h
}

#[test]
fn a_deleting_worker_deletes_exactly_the_completed_jobs_no_reader_needs() {
    let mut h = completions_by("d", "deleted", "completed");
    h.deleting.insert("d".to_owned());
    let report = check(&h);
    assert!(report.ok(), "{report}");
    assert_eq!(
        cl_ends(&h),
        [ClaimEnd::Completed, ClaimEnd::Completed],
        "a deletion from processing is a completion"
    );
    // It kept a job no reader needs, and deleted a workflow step.
    let mut h = completions_by("d", "completed", "deleted");
    h.deleting.insert("d".to_owned());
    assert_eq!(check(&h).count(inv::NO_HISTORY), 2);
    // A dedupe window keeps the row too.
    let mut h = completions_by("d", "deleted", "completed");
    h.deleting.insert("d".to_owned());
    h.dedupe_window.insert(1);
    assert_eq!(check(&h).count(inv::NO_HISTORY), 1);
    // A worker that keeps completed jobs deleted one.
    let h = completions_by("k", "deleted", "completed");
    assert_eq!(check(&h).count(inv::NO_HISTORY), 1);
}

fn cl_ends(h: &History) -> Vec<ClaimEnd> {
    claims(h).iter().map(|c| c.end).collect()
}

#[test]
fn a_completion_by_deletion_counts_for_twice_and_metrics_must_count_each_once() {
    let mut h = completions_by("d", "deleted", "completed");
    h.deleting.insert("d".to_owned());
    h.counted.push(("d".to_owned(), 2));
    assert!(check(&h).ok());
    h.counted[0].1 = 3;
    assert_eq!(check(&h).count(inv::COUNTED), 1);
    h.counted[0].1 = 2;
    // Job 1 claimed again and completed once more, by an update: twice.
    h.writes.push(write(
        1,
        40,
        ("pending", "processing"),
        (None, Some("t3")),
        "k",
        None,
    ));
    h.writes.push(write(
        1,
        50,
        ("processing", "completed"),
        (Some("t3"), None),
        "k",
        None,
    ));
    h.runs.push(run(1, "t3", "start", 41));
    h.runs.push(run(1, "t3", "ok", 45));
    for (i, w) in h.writes.iter_mut().enumerate() {
        w.seq = i as u64;
    }
    assert_eq!(check(&h).count(inv::TWICE), 1);
}
