//! The invariants a torture run must keep, checked over its [`History`]. Each violation names
//! the invariant, the jobs, and shows their history (state writes, handler runs, faults).
//!
//! A **claim** is one ownership of a job: from the write that set `processing` with a new claim
//! token to the write that left that token. A **run** is one handler execution under a claim:
//! from its `start` row to its end row (`ok`, `error`, `snooze`, `panic`, `dropped`); a run
//! without an end row ends when its process was killed, else at the write that ended its claim
//! if its own worker made it, else never (it counts as still running: strict).
//!
//! A fault **excuses** (see [`FaultKind::excuses`]) a claim whose lifetime it overlaps, and a
//! run overlap that lies within the fault or [`OVERLAP_WINDOW`] after it ends.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::Duration;

use super::{Fault, FaultKind, History, JobEnd, RunEvent, StateWrite};

/// How long after a fault ends (a stopped process continued, a stalled server resumed) a stale
/// handler of the faulted worker may still run beside the job's new owner: it must notice
/// within this window that its lease is gone, and stop. Align with `docs/guarantees.md`.
pub const OVERLAP_WINDOW: Duration = Duration::from_millis(1000);

fn window_us() -> i64 {
    i64::try_from(OVERLAP_WINDOW.as_micros()).unwrap_or(i64::MAX)
}

/// How a claim ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimEnd {
    /// Marked `completed`.
    Completed,
    /// Back to `pending` by a handler error (attempt consumed).
    Retried,
    /// Back to `pending` without consuming the attempt (snooze, release).
    GivenBack,
    /// Marked `failed` by the worker (attempt consumed).
    Failed,
    /// Marked `cancelled`.
    Cancelled,
    /// Lease expired and reaped (attempt consumed; `failed` on the last attempt).
    Reaped,
    /// Still held when the history was read.
    Open,
}

impl Claim {
    /// The handler recorded `ok` and was not aborted after it: it returned `Ok`.
    fn returned_ok(&self) -> bool {
        self.ok_at.is_some() && self.run_end.as_ref().is_some_and(|(e, _)| e != "dropped")
    }
}

impl ClaimEnd {
    fn consumes_attempt(self) -> bool {
        matches!(self, Self::Retried | Self::Failed | Self::Reaped)
    }

    /// Written by the claim's own worker.
    fn by_owner(self) -> bool {
        !matches!(self, Self::Reaped | Self::Open)
    }
}

/// One claim of one job, with its handler run.
#[derive(Debug, Clone)]
pub struct Claim {
    /// The job.
    pub job: u64,
    /// The claim token.
    pub token: String,
    /// The worker (`locked_by`).
    pub worker: String,
    /// When claimed.
    pub at: i64,
    /// How and when it ended.
    pub end: ClaimEnd,
    /// When it ended (`None`: open).
    pub ended_at: Option<i64>,
    /// The handler's `start`, if it ran.
    pub run_start: Option<i64>,
    /// The handler's last end event and its time (`dropped` after `ok`: aborted before it
    /// returned).
    pub run_end: Option<(String, i64)>,
    /// When the handler recorded `ok` (first time).
    pub ok_at: Option<i64>,
}

/// One violated invariant.
#[derive(Debug, Clone)]
pub struct Violation {
    /// The invariant's name.
    pub invariant: &'static str,
    /// The jobs involved.
    pub jobs: Vec<u64>,
    /// What is wrong.
    pub why: String,
}

/// The checker's result.
#[derive(Debug, Clone)]
pub struct Report {
    /// Every violation.
    pub violations: Vec<Violation>,
    /// Counts for the summary line.
    pub claims: usize,
    /// Runs seen.
    pub runs: usize,
    /// Reaped claims.
    pub reaped: usize,
    /// Claims excused by a fault.
    pub excused: usize,
    text: String,
}

impl Report {
    /// Whether every invariant held.
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }

    /// Violations of one invariant.
    pub fn count(&self, invariant: &str) -> usize {
        self.violations
            .iter()
            .filter(|v| v.invariant == invariant)
            .count()
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// Names of the invariants, as reported.
pub mod inv {
    /// Every job ends `completed` or `failed`.
    pub const LOST: &str = "no job lost";
    /// The final state is the one the job's act leads to; a handler's `Ok` never becomes a
    /// consumed attempt.
    pub const OUTCOME: &str = "final state matches the job's behaviour";
    /// One transition to `completed` per job.
    pub const TWICE: &str = "none completed twice";
    /// A completion follows an `ok` of the same claim's handler.
    pub const COMPLETED_BY_OWNER: &str = "completed only after its own handler returned ok";
    /// An attempt is consumed only by a handler run, unless a fault excuses it.
    pub const NO_RUN: &str = "no attempt consumed without a handler run";
    /// A healthy worker's lease never expires.
    pub const LEASE: &str = "no lease expired while its worker was healthy";
    /// Two runs of one job overlap only within a fault's window.
    pub const OVERLAP: &str = "no two runs of one job overlapping";
    /// Two runs of one ordering key overlap only within a fault's window.
    pub const ORDERING: &str = "ordering key: one run at a time";
    /// A concurrency key's limit holds, but for runs within a fault's window.
    pub const CONCURRENCY: &str = "concurrency key: limit never exceeded";
}

/// Builds the claims from the state writes and the runs.
pub fn claims(h: &History) -> Vec<Claim> {
    let mut out: Vec<Claim> = Vec::new();
    let mut open: HashMap<u64, usize> = HashMap::new();
    for w in &h.writes {
        if let Some(&i) = open.get(&w.job) {
            let c = &out[i];
            let leaves = w.old_token.as_deref() == Some(c.token.as_str())
                && (w.new_token != w.old_token || w.new_status != "processing");
            if leaves {
                let c = &mut out[i];
                c.end = classify(w);
                c.ended_at = Some(w.at);
                open.remove(&w.job);
            }
        }
        if w.new_status == "processing" && w.new_token.is_some() && w.new_token != w.old_token {
            open.insert(w.job, out.len());
            out.push(Claim {
                job: w.job,
                token: w.new_token.clone().unwrap_or_default(),
                worker: w.new_worker.clone().unwrap_or_default(),
                at: w.at,
                end: ClaimEnd::Open,
                ended_at: None,
                run_start: None,
                run_end: None,
                ok_at: None,
            });
        }
    }
    let mut by_key: HashMap<(u64, &str), usize> = HashMap::new();
    for (i, c) in out.iter().enumerate() {
        by_key.insert((c.job, c.token.as_str()), i);
    }
    let mut runs: Vec<(usize, &RunEvent)> = h
        .runs
        .iter()
        .filter_map(|r| by_key.get(&(r.job, r.token.as_str())).map(|&i| (i, r)))
        .collect();
    runs.sort_by_key(|(_, r)| r.at);
    for (i, r) in runs {
        let c = &mut out[i];
        if r.event == "start" {
            c.run_start = Some(c.run_start.map_or(r.at, |s| s.min(r.at)));
        } else {
            if r.event == "ok" && c.ok_at.is_none() {
                c.ok_at = Some(r.at);
            }
            c.run_end = Some((r.event.clone(), r.at));
        }
    }
    out
}

fn classify(w: &StateWrite) -> ClaimEnd {
    let reaped = w
        .last_error
        .as_deref()
        .is_some_and(|e| e.contains("lease expired"));
    match w.new_status.as_str() {
        "completed" => ClaimEnd::Completed,
        "cancelled" => ClaimEnd::Cancelled,
        "pending" if w.new_attempts < w.old_attempts => ClaimEnd::GivenBack,
        "pending" | "failed" if reaped => ClaimEnd::Reaped,
        "pending" => ClaimEnd::Retried,
        "failed" => ClaimEnd::Failed,
        _ => ClaimEnd::Open,
    }
}

/// Fault windows of `worker` that excuse, each extended by `extend` after its end.
fn excuse_windows(faults: &[Fault], worker: &str, extend: i64) -> Vec<(i64, i64)> {
    faults
        .iter()
        .filter(|f| f.kind.excuses() && f.hits(worker))
        .map(|f| {
            (
                f.start,
                f.end.map_or(i64::MAX, |e| e.saturating_add(extend)),
            )
        })
        .collect()
}

fn intersects(windows: &[(i64, i64)], a: i64, b: i64) -> bool {
    windows.iter().any(|&(s, e)| s <= b && a <= e)
}

/// Whether some part of `[a, b)` lies outside every window.
fn uncovered(mut windows: Vec<(i64, i64)>, a: i64, b: i64) -> bool {
    windows.sort_unstable();
    let mut at = a;
    for (s, e) in windows {
        if s > at {
            break;
        }
        at = at.max(e);
        if at >= b {
            return false;
        }
    }
    at < b
}

/// A run's interval `[start, end)`.
#[derive(Debug, Clone, Copy)]
struct Span {
    claim: usize,
    start: i64,
    end: i64,
}

fn spans(cl: &[Claim], faults: &[Fault]) -> Vec<Span> {
    cl.iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let start = c.run_start?;
            let killed = faults
                .iter()
                .filter(|f| f.kind == FaultKind::Kill && f.hits(&c.worker) && f.start >= start)
                .map(|f| f.start)
                .min();
            let end = match (&c.run_end, killed, c.ended_at) {
                (Some((_, e)), _, _) => *e,
                (None, Some(k), _) => k,
                (None, None, Some(e)) if c.end.by_owner() => e,
                _ => i64::MAX,
            };
            Some(Span {
                claim: i,
                start,
                end: end.max(start),
            })
        })
        .collect()
}

/// Checks every invariant over `h`.
pub fn check(h: &History) -> Report {
    let cl = claims(h);
    let jobs: BTreeMap<u64, &JobEnd> = h.jobs.iter().map(|j| (j.id, j)).collect();
    let mut v: Vec<Violation> = Vec::new();
    let touched = |c: &Claim| {
        let w = excuse_windows(&h.faults, &c.worker, 0);
        intersects(&w, c.at, c.ended_at.unwrap_or(i64::MAX))
    };
    // Per job: final state, completions.
    for j in jobs.values() {
        let mine: Vec<&Claim> = cl.iter().filter(|c| c.job == j.id).collect();
        if j.status != "completed" && j.status != "failed" {
            v.push(Violation {
                invariant: inv::LOST,
                jobs: vec![j.id],
                why: format!(
                    "job {} is `{}` after the run drained: neither completed nor failed",
                    j.id, j.status
                ),
            });
        } else if j.act == crate::jobs::act::FAIL {
            let permanent = j
                .last_error
                .as_deref()
                .is_some_and(|e| e.contains("permanent"));
            if j.status != "failed" || !permanent {
                v.push(Violation {
                    invariant: inv::OUTCOME,
                    jobs: vec![j.id],
                    why: format!(
                        "job {} (act `fail`) ended `{}` ({:?}); expected `failed` by its permanent error",
                        j.id, j.status, j.last_error
                    ),
                });
            }
        } else if j.status == "failed" {
            // Each attempt must have been used up by a handler that failed (an error, a panic,
            // a timeout) or by an excusing fault.
            let unexplained = mine
                .iter()
                .filter(|c| c.end.consumes_attempt() && !touched(c))
                .any(|c| c.run_start.is_none() || c.returned_ok());
            if unexplained {
                v.push(Violation {
                    invariant: inv::OUTCOME,
                    jobs: vec![j.id],
                    why: format!(
                        "job {} (act `{}`) ended `failed` ({:?}) though not all its attempts were used up by failing handler runs or faults",
                        j.id, j.act, j.last_error
                    ),
                });
            }
        }
        let completions = h
            .writes
            .iter()
            .filter(|w| w.job == j.id && w.new_status == "completed" && w.old_status != "completed")
            .count();
        if completions > 1 {
            v.push(Violation {
                invariant: inv::TWICE,
                jobs: vec![j.id],
                why: format!("job {} was marked completed {completions} times", j.id),
            });
        }
    }
    // Per claim: completion by its own run, attempts consumed by runs, leases of healthy workers.
    let mut reaped = 0;
    let mut excused = 0;
    for c in &cl {
        let excuse = touched(c);
        excused += usize::from(excuse);
        if c.end == ClaimEnd::Completed {
            let ok_before = c.ok_at.is_some_and(|at| Some(at) <= c.ended_at);
            if !ok_before {
                v.push(Violation {
                    invariant: inv::COMPLETED_BY_OWNER,
                    jobs: vec![c.job],
                    why: format!(
                        "job {} was completed under claim {} by {} without an `ok` of that claim's handler before it (handler end: {:?})",
                        c.job,
                        short(&c.token),
                        c.worker,
                        c.run_end
                    ),
                });
            }
        }
        if c.end.consumes_attempt() && c.returned_ok() && !excuse {
            v.push(Violation {
                invariant: inv::OUTCOME,
                jobs: vec![c.job],
                why: format!(
                    "job {}: the handler of claim {} by {} returned ok, yet the attempt was consumed ({:?})",
                    c.job,
                    short(&c.token),
                    c.worker,
                    c.end
                ),
            });
        }
        if c.end.consumes_attempt() && c.run_start.is_none() && !excuse {
            v.push(Violation {
                invariant: inv::NO_RUN,
                jobs: vec![c.job],
                why: format!(
                    "job {}: claim {} by {} consumed an attempt ({:?}) but its handler never started, and no fault stopped {}",
                    c.job,
                    short(&c.token),
                    c.worker,
                    c.end,
                    c.worker
                ),
            });
        }
        if c.end == ClaimEnd::Reaped {
            reaped += 1;
            if !excuse {
                v.push(Violation {
                    invariant: inv::LEASE,
                    jobs: vec![c.job],
                    why: format!(
                        "job {}: the lease of claim {} expired and was reaped, but {} was not stopped, killed or stalled meanwhile",
                        c.job,
                        short(&c.token),
                        c.worker
                    ),
                });
            }
        }
    }
    let sp = spans(&cl, &h.faults);
    overlaps(
        &cl,
        &sp,
        &h.faults,
        |c| Some(c.job.to_string()),
        inv::OVERLAP,
        &mut v,
    );
    overlaps(
        &cl,
        &sp,
        &h.faults,
        |c| jobs.get(&c.job).and_then(|j| j.ordering_key.clone()),
        inv::ORDERING,
        &mut v,
    );
    concurrency(&cl, &sp, &h.faults, &jobs, &mut v);
    let text = render(h, &cl, &v, reaped, excused, sp.len());
    Report {
        violations: v,
        claims: cl.len(),
        runs: sp.len(),
        reaped,
        excused,
        text,
    }
}

/// Runs sharing a key (from `key_of`) must not overlap, except within the excuse windows of
/// either run's worker. One violation per earlier run, naming every run it overlaps.
fn overlaps(
    cl: &[Claim],
    sp: &[Span],
    faults: &[Fault],
    key_of: impl Fn(&Claim) -> Option<String>,
    invariant: &'static str,
    v: &mut Vec<Violation>,
) {
    let mut groups: BTreeMap<String, Vec<Span>> = BTreeMap::new();
    for s in sp {
        if let Some(k) = key_of(&cl[s.claim]) {
            groups.entry(k).or_default().push(*s);
        }
    }
    for (key, mut g) in groups {
        g.sort_by_key(|s| s.start);
        for (i, a) in g.iter().enumerate() {
            let ca = &cl[a.claim];
            let mut jobs = vec![ca.job];
            let mut with = Vec::new();
            for b in &g[i + 1..] {
                if b.start >= a.end {
                    break;
                }
                let (lo, hi) = (b.start, a.end.min(b.end));
                let cb = &cl[b.claim];
                let mut w = excuse_windows(faults, &ca.worker, window_us());
                w.extend(excuse_windows(faults, &cb.worker, window_us()));
                if uncovered(w, lo, hi) {
                    jobs.push(cb.job);
                    let length = if hi == i64::MAX {
                        "from its start on".to_owned()
                    } else {
                        format!("for {}", ms(hi - lo))
                    };
                    with.push(format!(
                        "job {} (claim {} by {}) {length}",
                        cb.job,
                        short(&cb.token),
                        cb.worker
                    ));
                }
            }
            if with.is_empty() {
                continue;
            }
            jobs.dedup();
            let ended = if a.end == i64::MAX {
                " (its handler never recorded an end, was not killed, and its claim was not ended by its own worker)"
            } else {
                ""
            };
            v.push(Violation {
                invariant,
                jobs,
                why: format!(
                    "{} `{key}`: the run of job {} under claim {} by {}{ended} overlaps, outside any fault window (+{OVERLAP_WINDOW:?}), the runs of {}",
                    if invariant == inv::OVERLAP { "job" } else { "ordering key" },
                    ca.job,
                    short(&ca.token),
                    ca.worker,
                    with.join(", ")
                ),
            });
        }
    }
}

/// At no time do more runs of a concurrency key run than its limit, not counting runs within
/// their worker's excuse windows.
fn concurrency(
    cl: &[Claim],
    sp: &[Span],
    faults: &[Fault],
    jobs: &BTreeMap<u64, &JobEnd>,
    v: &mut Vec<Violation>,
) {
    let mut groups: BTreeMap<(String, u16), Vec<Span>> = BTreeMap::new();
    for s in sp {
        if let Some(k) = jobs
            .get(&cl[s.claim].job)
            .and_then(|j| j.concurrency.clone())
        {
            groups.entry(k).or_default().push(*s);
        }
    }
    for ((key, limit), g) in groups {
        let windows: Vec<Vec<(i64, i64)>> = g
            .iter()
            .map(|s| excuse_windows(faults, &cl[s.claim].worker, window_us()))
            .collect();
        let mut times: Vec<i64> = g.iter().map(|s| s.start).collect();
        times.extend(windows.iter().flatten().map(|&(_, e)| e));
        times.sort_unstable();
        times.dedup();
        for t in times {
            let active: Vec<usize> = (0..g.len())
                .filter(|&i| g[i].start <= t && t < g[i].end)
                .filter(|&i| !windows[i].iter().any(|&(s, e)| s <= t && t < e))
                .collect();
            if active.len() > usize::from(limit) {
                v.push(Violation {
                    invariant: inv::CONCURRENCY,
                    jobs: active.iter().map(|&i| cl[g[i].claim].job).collect(),
                    why: format!(
                        "concurrency key `{key}` (limit {limit}): {} runs at once outside any fault window",
                        active.len()
                    ),
                });
                break; // one report per key
            }
        }
    }
}

fn short(token: &str) -> &str {
    token.get(..8).unwrap_or(token)
}

fn ms(us: i64) -> String {
    format!("{:.1}ms", us as f64 / 1000.0)
}

/// Most violations shown in full per invariant.
const SHOWN: usize = 5;

fn render(
    h: &History,
    cl: &[Claim],
    v: &[Violation],
    reaped: usize,
    excused: usize,
    runs: usize,
) -> String {
    let t0 = h
        .writes
        .first()
        .map(|w| w.at)
        .into_iter()
        .chain(h.runs.first().map(|r| r.at))
        .chain(h.faults.iter().map(|f| f.start))
        .min()
        .unwrap_or(0);
    let rel = |t: i64| format!("+{:>9.1}ms", (t - t0) as f64 / 1000.0);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "torture history: {} jobs, {} claims, {runs} runs, {reaped} reaped claims, {excused} claims touched by an excusing fault, {} faults",
        h.jobs.len(),
        cl.len(),
        h.faults.len()
    );
    let mut kinds: BTreeMap<FaultKind, usize> = BTreeMap::new();
    for f in &h.faults {
        *kinds.entry(f.kind).or_default() += 1;
    }
    let _ = writeln!(out, "faults: {kinds:?}");
    let mut ends: BTreeMap<String, usize> = BTreeMap::new();
    for c in cl {
        *ends.entry(format!("{:?}", c.end)).or_default() += 1;
    }
    let _ = writeln!(out, "claims by end: {ends:?}");
    let _ = writeln!(out, "outcomes (act, status): {:?}", h.outcome_counts());
    if v.is_empty() {
        let _ = writeln!(out, "every invariant held");
        return out;
    }
    let mut by_inv: BTreeMap<&str, Vec<&Violation>> = BTreeMap::new();
    for x in v {
        by_inv.entry(x.invariant).or_default().push(x);
    }
    let _ = writeln!(out, "\n{} VIOLATIONS:", v.len());
    for (name, list) in &by_inv {
        let _ = writeln!(out, "\n== {name}: {} violation(s)", list.len());
        for x in list.iter().take(SHOWN) {
            let _ = writeln!(out, "\n- {}", x.why);
            for &job in &x.jobs {
                timeline(&mut out, h, cl, job, &rel);
            }
        }
        if list.len() > SHOWN {
            let ids: Vec<u64> = list
                .iter()
                .skip(SHOWN)
                .flat_map(|x| x.jobs.clone())
                .collect();
            let _ = writeln!(out, "\n  … and {} more (jobs {ids:?})", list.len() - SHOWN);
        }
    }
    out
}

fn timeline(out: &mut String, h: &History, cl: &[Claim], job: u64, rel: &dyn Fn(i64) -> String) {
    let Some(j) = h.jobs.iter().find(|j| j.id == job) else {
        return;
    };
    let _ = writeln!(
        out,
        "  job {} act `{}` status `{}` attempts {}/{} ordering {:?} concurrency {:?} last_error {:?}",
        j.id,
        j.act,
        j.status,
        j.attempts,
        j.max_attempts,
        j.ordering_key,
        j.concurrency,
        j.last_error
    );
    let mut lines: Vec<(i64, String)> = Vec::new();
    for w in h.writes.iter().filter(|w| w.job == job) {
        lines.push((
            w.at,
            format!(
                "write  {:>10} -> {:<10} token {} -> {}  worker {} -> {}  attempts {} -> {}  {}",
                w.old_status,
                w.new_status,
                w.old_token.as_deref().map_or("-", short),
                w.new_token.as_deref().map_or("-", short),
                w.old_worker.as_deref().unwrap_or("-"),
                w.new_worker.as_deref().unwrap_or("-"),
                w.old_attempts,
                w.new_attempts,
                w.last_error.as_deref().unwrap_or("")
            ),
        ));
    }
    for r in h.runs.iter().filter(|r| r.job == job) {
        lines.push((
            r.at,
            format!(
                "run    {:<8} token {} attempt {} pid {}",
                r.event,
                short(&r.token),
                r.attempt,
                r.pid
            ),
        ));
    }
    let workers: Vec<&str> = cl
        .iter()
        .filter(|c| c.job == job)
        .map(|c| c.worker.as_str())
        .collect();
    let (lo, hi) = lines.iter().fold((i64::MAX, i64::MIN), |(lo, hi), (t, _)| {
        (lo.min(*t), hi.max(*t))
    });
    for f in &h.faults {
        let near = f.start <= hi && f.end.unwrap_or(i64::MAX) >= lo.saturating_sub(window_us());
        if near && workers.iter().any(|w| f.hits(w)) {
            lines.push((
                f.start,
                format!(
                    "fault  {:?} on {} until {} {}",
                    f.kind,
                    f.worker.as_deref().unwrap_or("every worker"),
                    f.end.map_or_else(|| "never".to_owned(), rel),
                    f.note
                ),
            ));
        }
    }
    lines.sort_by_key(|(t, _)| *t);
    for (t, l) in lines {
        let _ = writeln!(out, "    {} {l}", rel(t));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::torture::{Fault, FaultKind, History, JobEnd, RunEvent, StateWrite};

    const MS: i64 = 1000;

    fn job(id: u64, act: &str, status: &str) -> JobEnd {
        JobEnd {
            id,
            act: act.to_owned(),
            status: status.to_owned(),
            attempts: 1,
            max_attempts: 8,
            last_error: None,
            ordering_key: None,
            concurrency: None,
        }
    }

    /// A state write of `job` at `at` ms.
    fn write(
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

    fn run(job: u64, token: &str, event: &str, at: i64) -> RunEvent {
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

    fn history(jobs: Vec<JobEnd>, mut writes: Vec<StateWrite>, runs: Vec<RunEvent>) -> History {
        writes.sort_by_key(|w| w.at);
        for (i, w) in writes.iter_mut().enumerate() {
            w.seq = i as u64;
        }
        History {
            jobs,
            writes,
            runs,
            faults: Vec::new(),
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
}
