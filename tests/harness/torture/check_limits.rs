//! The queue-wide limits and the "429" of a torture run (`docs/design/rate-limits.md` §12): the
//! queue with limits stored in `mysqlq_queue` ([`LIMITED_QUEUE`]), and the holds handlers write
//! with `JobError::rate_limited`.
//!
//! **RATE, per queue.** A queue's rate is checked as a key's is (`check_rate.rs`): the starts of
//! every job of the queue, none excused.
//!
//! **GLOBAL.** At no instant do more runs of the queue run than its global limit, not counting
//! runs within their worker's excuse windows — as concurrency keys are checked. A run ends at
//! its handler's end row, before its outcome is written, so the runs are never more than the
//! `processing` rows the limit counts.
//!
//! **HELD.** A hold names a queue and a key (`''`: the whole queue), the job that wrote it, the
//! statement's time `at` and `until`. No job it covers may be *claimed* (the write that set
//! `processing`, which comes after the claim's read of the holds) in `[at + MARGIN, until)`:
//! the hold commits shortly after `at` (same transaction as the job's own hand-back). Excused:
//! a fault of the holder's or the claimer's worker, or of the server, between `at` and the
//! claim (a stalled commit, a stalled claim between its read and its write). A claim made
//! before the hold and started after it is RATE's business, not HELD's. Also HELD: every claim
//! whose handler ended `limited` and gave its attempt back wrote its hold; and (RATE_ATTEMPT)
//! such a claim gave its attempt back unless a fault of its worker touched it.

use std::collections::BTreeMap;

use super::rate::{Limit, starts_of, summary, windows};
use super::{
    Claim, ClaimEnd, Span, Violation, excuse_windows, intersects, inv, ms, short, touched,
};
use crate::torture::report::run_start;
use crate::torture::{History, Hold, JobEnd, LIMITED_QUEUE};

/// How long after its statement a hold must be seen by every claim. Its commit follows at once
/// (the job's hand-back and the hold are one transaction), but on a loaded host the holder's
/// thread or the server may lag up to the torture's stall thresholds (a quarter lease, 500 ms)
/// without a fault on record: past them, a lag is a fault and excuses.
pub(crate) const MARGIN_US: i64 = 600_000;

/// The global-limit group of a job: its queue's, when the queue has a global limit.
pub(super) fn global_of(h: &History, j: &JobEnd) -> Option<(String, u32)> {
    let q = h.queue_limits.iter().find(|q| q.queue == j.queue)?;
    Some((format!("queue `{}`", q.queue), q.global?))
}

/// Checks the queues' rates, HELD and the 429's attempts over the claims `cl` and their runs
/// `sp`; returns summary lines.
pub(super) fn check(
    h: &History,
    (cl, sp): (&[Claim], &[Span]),
    jobs: &BTreeMap<u64, &JobEnd>,
    v: &mut Vec<Violation>,
) -> Vec<String> {
    let t0 = run_start(h);
    let mut notes = Vec::new();
    for q in &h.queue_limits {
        let member = |job: u64| jobs.get(&job).is_some_and(|j| j.queue == q.queue);
        if let Some((n, p)) = q.rate {
            let starts = starts_of(h, cl, &member);
            let (label, slack) = (format!("queue `{}`", q.queue), format!("queue {}", q.queue));
            let limit = Limit {
                label: &label,
                source: "as mysqlq_queue says",
                slack: &slack,
                n,
                p,
            };
            windows(&limit, &starts, t0, v);
            notes.push(summary(h, cl, &limit, &member, &starts));
        }
        if let Some(g) = q.global {
            notes.push(format!(
                "queue `{}` (global limit {g}): at most {} runs at once",
                q.queue,
                most_at_once(cl, sp, &member)
            ));
        }
    }
    if jobs.values().any(|j| j.queue == LIMITED_QUEUE)
        && !h.queue_limits.iter().any(|q| q.queue == LIMITED_QUEUE)
    {
        v.push(Violation {
            invariant: inv::GLOBAL,
            jobs: Vec::new(),
            why: format!(
                "queue `{LIMITED_QUEUE}` has jobs but no limits in mysqlq_queue: the workers started with them did not store them"
            ),
        });
    }
    held(h, cl, jobs, t0, v);
    let limited = answered(h, cl, v);
    let checkable = h
        .holds
        .iter()
        .filter(|hd| hd.at + MARGIN_US < hd.until)
        .count();
    notes.push(format!(
        "429: {} holds written ({checkable} longer than the {} margin), {limited} claims ended by a handler's 429",
        h.holds.len(),
        ms(MARGIN_US)
    ));
    notes
}

/// The most runs of the jobs `member` selects at any instant, excused or not: how close the
/// run came to a global limit (a limit never reached tests little).
fn most_at_once(cl: &[Claim], sp: &[Span], member: &dyn Fn(u64) -> bool) -> usize {
    let mut edges: Vec<(i64, i32)> = sp
        .iter()
        .filter(|s| member(cl[s.claim].job))
        .flat_map(|s| [(s.start, 1), (s.end, -1)])
        .collect();
    edges.sort_unstable();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    usize::try_from(most).unwrap_or(0)
}

/// Whether the hold `hold` covers `j`.
fn covers(hold: &Hold, j: &JobEnd) -> bool {
    j.queue == hold.queue
        && (hold.key.is_empty() || j.rate.as_ref().is_some_and(|r| r.key == hold.key))
}

/// HELD: no claim of a covered job in `[at + MARGIN, until)`, but for faults.
fn held(h: &History, cl: &[Claim], jobs: &BTreeMap<u64, &JobEnd>, t0: i64, v: &mut Vec<Violation>) {
    let rel = |t: i64| format!("+{}", ms(t - t0));
    for hold in &h.holds {
        let from = hold.at + MARGIN_US;
        if from >= hold.until {
            continue;
        }
        // The claim whose handler wrote the hold: the job's last before it (its hand-back may
        // be written just before the hold, in the same transaction).
        let holder = cl
            .iter()
            .filter(|c| c.job == hold.job && c.at <= hold.at)
            .max_by_key(|c| c.at)
            .map(|c| c.worker.as_str());
        for c in cl.iter().filter(|c| c.at >= from && c.at < hold.until) {
            let Some(j) = jobs.get(&c.job) else {
                continue;
            };
            if !covers(hold, j) {
                continue;
            }
            let mut w = excuse_windows(&h.faults, &c.worker, 0);
            if let Some(holder) = holder {
                w.extend(excuse_windows(&h.faults, holder, 0));
            }
            if intersects(&w, hold.at, c.at) {
                continue;
            }
            let what = if hold.key.is_empty() {
                format!("queue `{}`", hold.queue)
            } else {
                format!("rate key `{}` of queue `{}`", hold.key, hold.queue)
            };
            v.push(Violation {
                invariant: inv::HELD,
                jobs: vec![hold.job, c.job],
                why: format!(
                    "{what} was held by job {}'s 429 (written at {} by {}, until {}), yet job {} was claimed at {} (claim {} by {}), outside any fault",
                    hold.job,
                    rel(hold.at),
                    holder.unwrap_or("?"),
                    rel(hold.until),
                    c.job,
                    rel(c.at),
                    short(&c.token),
                    c.worker
                ),
            });
        }
    }
}

/// The claims whose handler answered 429: each gave its attempt back (RATE_ATTEMPT) unless a
/// fault of its worker touched it, and each that did wrote its hold (HELD). Returns how many.
fn answered(h: &History, cl: &[Claim], v: &mut Vec<Violation>) -> usize {
    let mut n = 0;
    for c in cl {
        let Some(("limited", at)) = c.run_end.as_ref().map(|(e, at)| (e.as_str(), *at)) else {
            continue;
        };
        n += 1;
        if c.end.consumes_attempt() && !touched(&h.faults, c) {
            v.push(Violation {
                invariant: inv::RATE_ATTEMPT,
                jobs: vec![c.job],
                why: format!(
                    "job {}: the handler of claim {} by {} answered 429, yet the claim consumed an attempt ({:?}) and no fault touched {}",
                    c.job,
                    short(&c.token),
                    c.worker,
                    c.end,
                    c.worker
                ),
            });
        }
        // The handler's clock and the server's are this host's; 5 ms for their resolution.
        let wrote = h
            .holds
            .iter()
            .any(|hd| hd.job == c.job && hd.at >= at - 5_000);
        if c.end == ClaimEnd::GivenBack && !wrote {
            v.push(Violation {
                invariant: inv::HELD,
                jobs: vec![c.job],
                why: format!(
                    "job {}: the handler of claim {} by {} answered 429 and the job went back, but no hold was written after it",
                    c.job,
                    short(&c.token),
                    c.worker
                ),
            });
        }
    }
    n
}

#[cfg(test)]
#[path = "check_limits_tests.rs"]
mod tests;
