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
use std::time::Duration;

use super::{Fault, FaultKind, History, JobEnd, RunEvent, StateWrite};

/// How long after a fault ends (a stopped process continued, a stalled server resumed) a stale
/// handler of the faulted worker may still run beside the job's new owner: it must notice
/// within this window that its lease is gone, and stop. Align with `docs/guarantees.md`.
pub const OVERLAP_WINDOW: Duration = Duration::from_millis(1000);

pub(crate) fn window_us() -> i64 {
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
    /// Ended by deleting the row (a completion by a worker that deletes completed jobs).
    pub deleted: bool,
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
    /// A worker that deletes completed jobs deletes each it completes but the kept ones (workflow
    /// steps, dedupe keys held for a window), which it marks `completed`; no other worker deletes
    /// one.
    pub const NO_HISTORY: &str = "no history: deleted exactly the completed jobs no reader needs";
    /// An in-process worker's metrics count each completion it wrote once.
    pub const COUNTED: &str = "metrics: each completion counted once";
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
    /// An operator action (cancel, retry, discard, delete) changes each job at most once.
    pub const OPERATOR_ONCE: &str = "an operator action changes each job at most once";
    /// The audit trail names exactly the changes operators made, and counts them.
    pub const OPERATOR_TRAIL: &str = "the audit trail names every operator change, and only those";
    /// An action on every job of a search changes at most the count the operator confirmed.
    pub const BULK_AT_MOST: &str = "a bulk action changes at most its confirmed count";
    /// A workflow step is claimed only after each dependency ended in a way it accepts.
    pub const WF_EARLY: &str = "workflow: no step starts before its dependencies";
    /// A workflow step is released (`waiting` → `pending`, or straight to `processing` when its
    /// settlement hands it to the worker) at most once.
    pub const WF_ONCE: &str = "workflow: each step released once";
    /// A step cancelled by its upstream rule had a dependency that failed or was cancelled,
    /// which it does not accept, and was never claimed or released.
    pub const WF_UPSTREAM: &str = "workflow: upstream cancels only for a reason, before any run";
    /// A step whose dependencies all accepted it runs.
    pub const WF_LIVE: &str = "workflow: every step whose dependencies allow it runs";
    /// A step added by a running step (a graft) is waited for by every step that waited for
    /// the grafter.
    pub const WF_GRAFT: &str = "workflow: what waits for a grafter waits for what it grafted";
    /// A workflow enqueued in a rolled-back transaction leaves nothing; no row dangles.
    pub const WF_ROLLBACK: &str = "workflow: a rolled-back enqueue leaves nothing";
    /// Every ended dependency's edges are settled in the end (a deferred settlement lands), and
    /// a workflow with no step left to run is marked finished.
    pub const WF_SETTLED: &str = "workflow: every settlement lands, every workflow ends";
    /// No window of a rate key's period holds more handler starts of the key's jobs than its
    /// limit; no fault excuses it (`check_rate.rs`).
    pub const RATE: &str = "rate key: at most N starts in any window of P";
    /// A start handed back as too late for its rate decision gives its attempt back, whatever
    /// the faults (`check_rate.rs`; an attempt consumed without a start is [`NO_RUN`]'s).
    pub const RATE_ATTEMPT: &str = "rate limits: no attempt consumed while limited";
    /// A queue's global limit holds across every worker, but for runs within a fault's window
    /// (`check_limits.rs`).
    pub const GLOBAL: &str = "global limit: at most N of the queue running at once";
    /// After a handler's "429" (`JobError::rate_limited`), its key (its queue, for a job without
    /// one) takes no new claim until the hold ends, and the hold is written
    /// (`check_limits.rs`).
    pub const HELD: &str = "429: a held key or queue takes no new job until its hold ends";
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
                c.deleted = w.new_status == "deleted";
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
                deleted: false,
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
        // Only a completion deletes a `processing` row (an operator's delete refuses one).
        "deleted" if w.old_status == "processing" => ClaimEnd::Completed,
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

/// Whether an excusing fault of its worker overlaps the claim's lifetime.
fn touched(faults: &[Fault], c: &Claim) -> bool {
    let w = excuse_windows(faults, &c.worker, 0);
    intersects(&w, c.at, c.ended_at.unwrap_or(i64::MAX))
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
    let touched = |c: &Claim| touched(&h.faults, c);
    // Per job: final state, completions.
    for j in jobs.values() {
        let mine: Vec<&Claim> = cl.iter().filter(|c| c.job == j.id).collect();
        if j.status == "cancelled" && h.operator_changed("cancel", j.id) {
            // An operator's cancel is its final state ([`operator_actions`] checks the trail).
        } else if j.status == "cancelled" && j.cancelled_by.as_deref() == Some("mysqlq:upstream") {
            // A workflow step cancelled by its upstream rule ([`workflow::check`] checks why).
        } else if j.status != "completed" && j.status != "failed" {
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
            .filter(|w| {
                w.job == j.id
                    && ((w.new_status == "completed" && w.old_status != "completed")
                        || (w.new_status == "deleted" && w.old_status == "processing"))
            })
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
    at_most(
        &cl,
        &sp,
        &h.faults,
        |c| {
            let (key, n) = jobs.get(&c.job)?.concurrency.clone()?;
            Some((format!("concurrency key `{key}`"), u32::from(n)))
        },
        inv::CONCURRENCY,
        &mut v,
    );
    at_most(
        &cl,
        &sp,
        &h.faults,
        |c| limits::global_of(h, jobs.get(&c.job)?),
        inv::GLOBAL,
        &mut v,
    );
    no_history(h, &cl, &mut v);
    operator_actions(h, &jobs, &mut v);
    workflow::check(h, &jobs, &mut v);
    let mut notes = rate::check(h, &cl, &jobs, &mut v);
    notes.extend(limits::check(h, (&cl, &sp), &jobs, &mut v));
    let text = super::report::render(h, &cl, &v, (reaped, excused, sp.len()), &notes);
    Report {
        violations: v,
        claims: cl.len(),
        runs: sp.len(),
        reaped,
        excused,
        text,
    }
}

/// Completions by deletion: by the workers that delete completed jobs ([`History::deleting`]),
/// of every job they complete but workflow steps and jobs with a dedupe window, which keep a
/// `completed` row; by no other worker. And each in-process worker's completions metric equals
/// the completions it wrote ([`History::counted`]).
fn no_history(h: &History, cl: &[Claim], v: &mut Vec<Violation>) {
    for c in cl.iter().filter(|c| c.end == ClaimEnd::Completed) {
        let kept = h.steps.contains_key(&c.job) || h.dedupe_window.contains(&c.job);
        let deletes = h.deleting.contains(&c.worker);
        let should = deletes && !kept;
        if c.deleted != should {
            let what = match (deletes, kept) {
                (false, _) => "a worker that keeps completed jobs",
                (true, true) => {
                    "a worker that deletes completed jobs, but a job whose row is kept (a workflow step or a dedupe window)"
                }
                (true, false) => "a worker that deletes completed jobs",
            };
            v.push(Violation {
                invariant: inv::NO_HISTORY,
                jobs: vec![c.job],
                why: format!(
                    "job {} was completed under claim {} by {} ({what}) {}",
                    c.job,
                    short(&c.token),
                    c.worker,
                    if c.deleted {
                        "by deleting its row"
                    } else {
                        "by keeping its row `completed`"
                    }
                ),
            });
        }
    }
    for (worker, counted) in &h.counted {
        let wrote: Vec<u64> = cl
            .iter()
            .filter(|c| c.end == ClaimEnd::Completed && &c.worker == worker)
            .map(|c| c.job)
            .collect();
        if wrote.len() as u64 != *counted {
            // Where to look: the worker's claims whose handler returned ok but that did not
            // end `completed` (a completion counted but not written is one of these).
            let unwritten: Vec<&Claim> = cl
                .iter()
                .filter(|c| &c.worker == worker && c.returned_ok())
                .filter(|c| c.end != ClaimEnd::Completed)
                .collect();
            v.push(Violation {
                invariant: inv::COUNTED,
                jobs: unwritten.iter().map(|c| c.job).collect(),
                why: format!(
                    "{worker} wrote {} completions and its metrics counted {counted}; its \
                     claims whose handler returned ok without a completion: {:?}",
                    wrote.len(),
                    unwritten
                        .iter()
                        .map(|c| format!(
                            "job {} claim {} ended {:?}",
                            c.job,
                            short(&c.token),
                            c.end
                        ))
                        .collect::<Vec<_>>()
                ),
            });
        }
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

/// At no time do more runs of a group (from `group_of`: a name and its limit) run than its
/// limit, not counting runs within their worker's excuse windows: concurrency keys, and queues
/// with a global limit. One violation per group.
fn at_most(
    cl: &[Claim],
    sp: &[Span],
    faults: &[Fault],
    group_of: impl Fn(&Claim) -> Option<(String, u32)>,
    invariant: &'static str,
    v: &mut Vec<Violation>,
) {
    let mut groups: BTreeMap<(String, u32), Vec<Span>> = BTreeMap::new();
    for s in sp {
        if let Some(k) = group_of(&cl[s.claim]) {
            groups.entry(k).or_default().push(*s);
        }
    }
    for ((name, limit), g) in groups {
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
            if active.len() > usize::try_from(limit).unwrap_or(usize::MAX) {
                let named: Vec<String> = active
                    .iter()
                    .map(|&i| {
                        let c = &cl[g[i].claim];
                        format!("job {} (claim {} by {})", c.job, short(&c.token), c.worker)
                    })
                    .collect();
                v.push(Violation {
                    invariant,
                    jobs: active.iter().map(|&i| cl[g[i].claim].job).collect(),
                    why: format!(
                        "{name} (limit {limit}): {} runs at once outside any fault window: {}",
                        active.len(),
                        named.join(", ")
                    ),
                });
                break; // one report per group
            }
        }
    }
}

pub(crate) fn short(token: &str) -> &str {
    token.get(..8).unwrap_or(token)
}

pub(crate) fn ms(us: i64) -> String {
    format!("{:.1}ms", us as f64 / 1000.0)
}

#[cfg(test)]
#[path = "check_tests.rs"]
mod tests;

#[path = "check_workflow.rs"]
mod workflow;

#[path = "check_rate.rs"]
mod rate;

#[path = "check_limits.rs"]
mod limits;

/// Operator actions racing the workers: per job, the history's operator changes (`failed` →
/// `pending` is only ever an operator's retry; `pending`/`processing` → `cancelled` only a
/// cancel, as no torture act cancels itself) must match one for one the actions of the audit
/// trail that name the job (the trail links a job once per action, so an action that changed a
/// job twice shows as one link short); a job gone from the table must be named by exactly one
/// delete or discard, and one still there by none; each action's count must be its links.
fn operator_actions(h: &History, jobs: &BTreeMap<u64, &JobEnd>, v: &mut Vec<Violation>) {
    let named = |action: &str, job: u64| {
        h.actions
            .iter()
            .filter(|a| a.action == action && a.changed.contains(&job))
            .count()
    };
    let mut seen: Vec<u64> = h
        .writes
        .iter()
        .map(|w| w.job)
        .chain(h.runs.iter().map(|r| r.job))
        .chain(h.actions.iter().flat_map(|a| a.changed.iter().copied()))
        .chain(jobs.keys().copied())
        .collect();
    seen.sort_unstable();
    seen.dedup();
    for job in seen {
        let changes = |from: &[&str], to: &str| {
            h.writes
                .iter()
                .filter(|w| {
                    w.job == job && from.contains(&w.old_status.as_str()) && w.new_status == to
                })
                .count()
        };
        // A waiting workflow step cancelled by its upstream rule is no operator's change.
        let upstream = jobs
            .get(&job)
            .is_some_and(|j| j.cancelled_by.as_deref() == Some("mysqlq:upstream"));
        let cancelled_from: &[&str] = if upstream {
            &["pending", "processing"]
        } else {
            &["waiting", "pending", "processing"]
        };
        for (action, made) in [
            ("retry", changes(&["failed"], "pending")),
            ("cancel", changes(cancelled_from, "cancelled")),
            // `pending` → `pending` due earlier: only an operator's run now writes that.
            ("run_now", changes(&["pending"], "pending")),
        ] {
            let on_record = named(action, job);
            if made != on_record {
                v.push(Violation {
                    // More changes than actions naming the job: one action changed it twice
                    // (its link is one per action); none naming it: a change off the record.
                    invariant: if made > on_record && on_record > 0 {
                        inv::OPERATOR_ONCE
                    } else {
                        inv::OPERATOR_TRAIL
                    },
                    jobs: vec![job],
                    why: format!(
                        "job {job}: the history shows {made} {action} change(s), the audit trail names it in {on_record} {action} action(s)"
                    ),
                });
            }
        }
        let removals = named("delete", job) + named("discard", job);
        let gone = !jobs.contains_key(&job);
        if gone != (removals == 1) {
            v.push(Violation {
                invariant: if removals > 1 {
                    inv::OPERATOR_ONCE
                } else {
                    inv::OPERATOR_TRAIL
                },
                jobs: vec![job],
                why: format!(
                    "job {job} is {} the table, and {removals} delete or discard action(s) name it",
                    if gone { "gone from" } else { "still in" }
                ),
            });
        }
    }
    for a in &h.actions {
        if let Some(expected) = a.expected
            && a.changed.len() as u64 > expected
        {
            v.push(Violation {
                invariant: inv::BULK_AT_MOST,
                jobs: a.changed.clone(),
                why: format!(
                    "{} action {} by {} was confirmed for {expected} jobs and changed {}",
                    a.action,
                    a.id,
                    a.actor,
                    a.changed.len()
                ),
            });
        }
        let counted = matches!(
            a.action.as_str(),
            "cancel" | "retry" | "discard" | "delete" | "run_now"
        );
        if counted && a.jobs != a.changed.len() as u64 {
            v.push(Violation {
                invariant: inv::OPERATOR_TRAIL,
                jobs: a.changed.clone(),
                why: format!(
                    "{} action {} by {} counts {} jobs but links {}",
                    a.action,
                    a.id,
                    a.actor,
                    a.jobs,
                    a.changed.len()
                ),
            });
        }
    }
}
