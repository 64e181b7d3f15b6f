//! The rate-limit invariants of a torture run (`docs/design/rate-limits.md` §3.2 and §12).
//!
//! **RATE.** Per rate key, take the `start` rows of every job whose row carries the key: every
//! attempt's, also those whose claim was then lost, reaped, timed out or killed. A `start` row
//! written twice by a retried INSERT (same job, claim token and time) is one start. Sorted, they
//! are s₀ ≤ s₁ ≤ …; with N and P read from the job rows (`rate_limit`, `rate_period_us`), a
//! violation is any i with s[i+N] − s[i] < P: N + 1 starts in the half-open window
//! [s[i], s[i] + P). Overlapping windows over the limit make one violation (a burst), named by
//! its densest N + 1 starts. A key whose rows carry different limits is checked under each.
//!
//! No fault excuses RATE. The worker's start guard measures the time from a claim's first
//! statement to its handler's first poll on a monotonic clock, which runs on through a SIGSTOP
//! of the worker, a server stall or a starved thread: a start that would come later than the
//! decision's slack ε is handed back instead (§3.2: recorded ≤ physical ≤ recorded + ε, and
//! N + 1 recorded times span at least P + ε).
//!
//! **RATE_ATTEMPT.** A claim whose ending write says its start came too late for its rate
//! decision (the guard's error) gave its attempt back, whatever the faults: the hand-back writes
//! no `last_error`, so the error shows only when the hand-back became a retry. An attempt
//! consumed without a `start`, a keyed job's too, is [`inv::NO_RUN`]'s; a hand-back without a
//! start is a `GivenBack` claim, which no invariant counts as a run, a loss or an attempt.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::{Claim, ClaimEnd, Violation, classify, inv, ms, short};
use crate::torture::report::run_start;
use crate::torture::{History, JobEnd, RunEvent};

/// The error of a start the guard found too late (`LATE_START` in `worker/executor.rs`).
pub(crate) const LATE_START: &str = "started too late after its rate-limit admission";

/// One handler start of a rate-limited job.
pub(super) struct Start<'a> {
    run: &'a RunEvent,
    /// The worker of its claim (`?`: no claim on record).
    worker: &'a str,
    /// When its claim was written.
    claimed: Option<i64>,
}

/// Checks RATE and RATE_ATTEMPT; returns a summary line per rate key and limit.
pub(super) fn check(
    h: &History,
    cl: &[Claim],
    jobs: &BTreeMap<u64, &JobEnd>,
    v: &mut Vec<Violation>,
) -> Vec<String> {
    let t0 = run_start(h);
    let mut limits: BTreeMap<&str, BTreeSet<(u32, i64)>> = BTreeMap::new();
    for j in jobs.values() {
        if let Some(r) = &j.rate {
            limits
                .entry(r.key.as_str())
                .or_default()
                .insert((r.limit, r.period_us));
        }
    }
    let mut notes = Vec::new();
    for (key, limits) in &limits {
        let label = format!("rate key `{key}`");
        let keyed = |job: u64| {
            jobs.get(&job)
                .and_then(|j| j.rate.as_ref())
                .is_some_and(|r| r.key == *key)
        };
        let starts = starts_of(h, cl, &keyed);
        for &(n, p) in limits {
            let limit = Limit {
                label: &label,
                source: "as its job rows say",
                slack: key,
                n,
                p,
            };
            windows(&limit, &starts, t0, v);
            notes.push(summary(h, cl, &limit, &keyed, &starts));
        }
    }
    attempts(h, v);
    notes
}

/// A rate limit as the checker names it.
pub(super) struct Limit<'a> {
    /// What is limited: "rate key `rl-0`", "queue `torture_g`".
    pub(super) label: &'a str,
    /// Where the limit was read.
    pub(super) source: &'a str,
    /// Its bucket's name in [`History::rate_slack`].
    pub(super) slack: &'a str,
    /// N starts…
    pub(super) n: u32,
    /// …per P µs.
    pub(super) p: i64,
}

/// The handler starts of the jobs `member` selects, each once, in order of time.
pub(super) fn starts_of<'a>(
    h: &'a History,
    cl: &'a [Claim],
    member: &dyn Fn(u64) -> bool,
) -> Vec<Start<'a>> {
    let claim_of: HashMap<(u64, &str), &Claim> =
        cl.iter().map(|c| ((c.job, c.token.as_str()), c)).collect();
    let mut seen = HashSet::new();
    let mut out: Vec<Start> = h
        .runs
        .iter()
        .filter(|r| r.event == "start" && member(r.job))
        .filter(|r| seen.insert((r.job, r.token.as_str(), r.at)))
        .map(|r| {
            let claim = claim_of.get(&(r.job, r.token.as_str()));
            Start {
                run: r,
                worker: claim.map_or("?", |c| c.worker.as_str()),
                claimed: claim.map(|c| c.at),
            }
        })
        .collect();
    out.sort_by_key(|s| (s.run.at, s.run.job));
    out
}

/// RATE for the sorted starts `s` of one limit.
pub(super) fn windows(l: &Limit, s: &[Start], t0: i64, v: &mut Vec<Violation>) {
    let (key, source, p) = (l.label, l.source, l.p);
    let n = usize::try_from(l.n).unwrap_or(usize::MAX);
    let span = |i: usize| s[i + n].run.at - s[i].run.at;
    let over = |i: usize| i.checked_add(n).is_some_and(|e| e < s.len()) && span(i) < p;
    let rel = |t: i64| format!("+{}", ms(t - t0));
    let mut i = 0;
    while i < s.len() {
        if !over(i) {
            i += 1;
            continue;
        }
        let first = i;
        let mut densest = i;
        while over(i) {
            if span(i) < span(densest) {
                densest = i;
            }
            i += 1;
        }
        let window = &s[densest..=densest + n];
        let named: Vec<String> = window
            .iter()
            .map(|x| {
                let claimed = x.claimed.map_or_else(
                    || "no claim on record".to_owned(),
                    |c| format!("{} after its claim", ms(x.run.at - c)),
                );
                format!(
                    "job {} attempt {} claim {} by {} (pid {}) at {} ({claimed})",
                    x.run.job,
                    x.run.attempt,
                    short(&x.run.token),
                    x.worker,
                    x.run.pid,
                    rel(x.run.at)
                )
            })
            .collect();
        let burst = if i - first > 1 {
            format!(
                "; the burst of {} starts from {} to {} has {} windows over the limit",
                i - first + n,
                rel(s[first].run.at),
                rel(s[i - 1 + n].run.at),
                i - first
            )
        } else {
            String::new()
        };
        let mut ids: Vec<u64> = window.iter().map(|x| x.run.job).collect();
        ids.sort_unstable();
        ids.dedup();
        v.push(Violation {
            invariant: inv::RATE,
            jobs: ids,
            why: format!(
                "{key} (at most {n} starts per {}, {source}): {} starts within {}{burst}:\n    {}",
                ms(p),
                n + 1,
                ms(span(densest)),
                named.join("\n    ")
            ),
        });
    }
}

/// The summary line of a limit over the starts `s` of the jobs `member` selects: how full its
/// windows got and how its starts followed their claims (a limit never reached tests little).
pub(super) fn summary(
    h: &History,
    cl: &[Claim],
    l: &Limit,
    member: &dyn Fn(u64) -> bool,
    s: &[Start],
) -> String {
    let (n, p) = (l.n, l.p);
    let mut fullest = 0;
    let mut j = 0;
    for i in 0..s.len() {
        while j < s.len() && s[j].run.at < s[i].run.at + p {
            j += 1;
        }
        fullest = fullest.max(j - i);
    }
    let handed_back = cl
        .iter()
        .filter(|c| member(c.job) && c.end == ClaimEnd::GivenBack && c.run_start.is_none())
        .count();
    let delays: Vec<i64> = s
        .iter()
        .filter_map(|x| x.claimed.map(|c| x.run.at - c))
        .collect();
    let slack = h.rate_slack.get(l.slack).copied();
    let late = slack.map_or(0, |e| delays.iter().filter(|&&d| d > e).count());
    let distinct: HashSet<u64> = s.iter().map(|x| x.run.job).collect();
    let last = s.last().map_or(0, |x| x.run.at - run_start(h));
    format!(
        "{} ({n} per {}): {} starts of {} jobs (the last at +{}), at most {fullest} \
         in one window; {handed_back} claims given back without a start; a start at most {} \
         after its claim (bucket slack {}, {late} starts later than it)",
        l.label,
        ms(p),
        s.len(),
        distinct.len(),
        ms(last),
        ms(delays.iter().copied().max().unwrap_or(0)),
        slack.map_or_else(|| "unknown".to_owned(), ms)
    )
}

/// RATE_ATTEMPT: no claim whose ending write carries the guard's error consumed its attempt.
fn attempts(h: &History, v: &mut Vec<Violation>) {
    for w in &h.writes {
        let ends_claim = w.old_status == "processing"
            && w.old_token.is_some()
            && (w.new_token != w.old_token || w.new_status != "processing");
        let late = w
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains(LATE_START));
        let end = classify(w);
        if ends_claim && late && end.consumes_attempt() {
            v.push(Violation {
                invariant: inv::RATE_ATTEMPT,
                jobs: vec![w.job],
                why: format!(
                    "job {}: claim {} by {} was handed back as started too late for its rate decision, yet it consumed an attempt ({end:?}, attempts {} -> {})",
                    w.job,
                    w.old_token.as_deref().map_or("-", short),
                    w.old_worker.as_deref().unwrap_or("-"),
                    w.old_attempts,
                    w.new_attempts
                ),
            });
        }
    }
}

#[cfg(test)]
#[path = "check_rate_tests.rs"]
mod tests;
