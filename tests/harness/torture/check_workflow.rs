//! The workflow invariants of a torture run, over the state writes of the steps (`torture_history`
//! logs every status change, the insert's `pending` → `waiting` included, in the order the
//! triggers ran) and the graph read at the end (`mysqlq_wf_edge`, `mysqlq_wf_step`).
//!
//! A dependency **satisfies** an edge when it ended `completed`, or `failed` and the dependent
//! has `ignore_failed`, or `cancelled` and the dependent has `ignore_cancelled`.

use std::collections::{BTreeMap, HashMap};

use super::{Violation, inv};
use crate::torture::{History, JobEnd, StateWrite};

/// `cancelled_by` of a step cancelled by its upstream rule.
const UPSTREAM: &str = "mysqlq:upstream";

fn satisfies(end: &str, (ignore_failed, ignore_cancelled): (bool, bool)) -> bool {
    end == "completed"
        || (end == "failed" && ignore_failed)
        || (end == "cancelled" && ignore_cancelled)
}

/// Checks: no early start, one release per step, upstream cancels only for a reason and never
/// after a claim, every step whose dependencies all satisfied it ran, every settlement landed,
/// nothing of a rolled-back enqueue left, no dangling row.
pub(super) fn check(h: &History, jobs: &BTreeMap<u64, &JobEnd>, v: &mut Vec<Violation>) {
    let mut deps: HashMap<u64, Vec<u64>> = HashMap::new();
    for &(d, t) in &h.edges {
        deps.entry(t).or_default().push(d);
    }
    let mut writes: HashMap<u64, Vec<&StateWrite>> = HashMap::new();
    for w in &h.writes {
        writes.entry(w.job).or_default().push(w);
    }
    let none = Vec::new();
    let writes_of = |j: u64| writes.get(&j).unwrap_or(&none);
    // The first final write of a job before `seq` (the ends that can satisfy an edge).
    let ended_before = |j: u64, seq: u64| -> Option<&str> {
        writes_of(j)
            .iter()
            .filter(|w| w.seq < seq)
            .find(|w| matches!(w.new_status.as_str(), "completed" | "failed" | "cancelled"))
            .map(|w| w.new_status.as_str())
    };
    for (&step, rules) in &h.steps {
        let my_deps = deps.get(&step).map(Vec::as_slice).unwrap_or_default();
        let ws = writes_of(step);
        // No early start: every claim follows a satisfying end of each dependency.
        for w in ws.iter().filter(|w| {
            w.new_status == "processing" && w.new_token.is_some() && w.new_token != w.old_token
        }) {
            let early: Vec<u64> = my_deps
                .iter()
                .copied()
                .filter(|&d| !ended_before(d, w.seq).is_some_and(|e| satisfies(e, *rules)))
                .collect();
            if !early.is_empty() {
                v.push(Violation {
                    invariant: inv::WF_EARLY,
                    jobs: std::iter::once(step).chain(early.iter().copied()).collect(),
                    why: format!(
                        "step {step} was claimed (token {:?}) before its dependencies {early:?} ended in a way it accepts",
                        w.new_token
                    ),
                });
            }
        }
        // Released once: `waiting` → `pending` (or → `processing`, claimed by the worker whose
        // settlement released it) at most once (no operator retries here).
        let releases = ws
            .iter()
            .filter(|w| {
                w.old_status == "waiting"
                    && matches!(w.new_status.as_str(), "pending" | "processing")
            })
            .count();
        if releases > 1 {
            v.push(Violation {
                invariant: inv::WF_ONCE,
                jobs: vec![step],
                why: format!("step {step} was released {releases} times"),
            });
        }
        let Some(end) = jobs.get(&step) else {
            continue;
        };
        let claimed = ws.iter().any(|w| w.new_status == "processing");
        let dep_end = |d: u64| jobs.get(&d).map_or("(gone)", |j| j.status.as_str());
        if end.cancelled_by.as_deref() == Some(UPSTREAM) {
            let reason = my_deps.iter().any(|&d| {
                let e = dep_end(d);
                matches!(e, "failed" | "cancelled") && !satisfies(e, *rules)
            });
            if claimed || !reason || releases > 0 {
                v.push(Violation {
                    invariant: inv::WF_UPSTREAM,
                    jobs: std::iter::once(step).chain(my_deps.iter().copied()).collect(),
                    why: format!(
                        "step {step} was cancelled by its upstream rule (claimed before: {claimed}, released before: {}); its dependencies ended {:?}",
                        releases > 0,
                        my_deps.iter().map(|&d| (d, dep_end(d))).collect::<Vec<_>>()
                    ),
                });
            }
        } else if my_deps.iter().all(|&d| satisfies(dep_end(d), *rules)) && !claimed {
            v.push(Violation {
                invariant: inv::WF_LIVE,
                jobs: std::iter::once(step).chain(my_deps.iter().copied()).collect(),
                why: format!(
                    "step {step} ended `{}` without ever being claimed, though every dependency accepted it: {:?}",
                    end.status,
                    my_deps.iter().map(|&d| (d, dep_end(d))).collect::<Vec<_>>()
                ),
            });
        }
    }
    // Grafts: what waited for the grafter waits for each step it added.
    let mut out_edges: HashMap<u64, Vec<u64>> = HashMap::new();
    for &(d, t) in &h.edges {
        out_edges.entry(d).or_default().push(t);
    }
    for (&n, &g) in &h.grafted_by {
        let mine = out_edges.get(&n).map(Vec::as_slice).unwrap_or_default();
        let missing: Vec<u64> = out_edges
            .get(&g)
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .copied()
            .filter(|t| h.grafted_by.get(t) != Some(&g) && !mine.contains(t))
            .collect();
        if !missing.is_empty() {
            v.push(Violation {
                invariant: inv::WF_GRAFT,
                jobs: vec![n, g],
                why: format!(
                    "step {n}, grafted by {g}, is not waited for by {missing:?}, which wait for {g}"
                ),
            });
        }
    }
    if !h.unsettled.is_empty() || !h.unfinished.is_empty() {
        v.push(Violation {
            invariant: inv::WF_SETTLED,
            jobs: h.unsettled.iter().map(|&(d, _)| d).collect(),
            why: format!(
                "edges (dependency, dependent) still open though the dependency ended: {:?}; \
                 workflows still running with no step left to run: {:?}",
                h.unsettled, h.unfinished
            ),
        });
    }
    if !h.rolled_back_found.is_empty() || h.orphans > 0 {
        v.push(Violation {
            invariant: inv::WF_ROLLBACK,
            jobs: Vec::new(),
            why: format!(
                "workflows enqueued in rolled-back transactions found: {:?}; rows naming a missing workflow or step: {}",
                h.rolled_back_found, h.orphans
            ),
        });
    }
}
