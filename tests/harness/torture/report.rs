//! The checker's report: a summary, then each violation with the history of its jobs (state
//! writes, handler runs and the faults that hit their workers), times relative to the run's
//! first event.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::check::{Claim, Violation, ms, short, window_us};
use super::{FaultKind, History};

/// Most violations shown in full per invariant.
const SHOWN: usize = 5;

/// The run's first event (state write, handler event or fault): what report times are
/// relative to.
pub(crate) fn run_start(h: &History) -> i64 {
    h.writes
        .first()
        .map(|w| w.at)
        .into_iter()
        .chain(h.runs.first().map(|r| r.at))
        .chain(h.faults.iter().map(|f| f.start))
        .min()
        .unwrap_or(0)
}

/// `notes`: summary lines of particular invariants (shown after the counts).
pub(crate) fn render(
    h: &History,
    cl: &[Claim],
    v: &[Violation],
    (reaped, excused, runs): (usize, usize, usize),
    notes: &[String],
) -> String {
    let t0 = run_start(h);
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
    let deleted = cl.iter().filter(|c| c.deleted).count();
    let kept = h
        .jobs
        .iter()
        .filter(|j| j.status == "completed" && !h.deleted.contains(&j.id))
        .count();
    let _ = writeln!(
        out,
        "completions by deletion: {deleted} (workers deleting: {:?}); completed rows kept: {kept}; metrics counted: {:?}",
        h.deleting, h.counted
    );
    let _ = writeln!(out, "outcomes (act, status): {:?}", h.outcome_counts());
    for n in notes {
        let _ = writeln!(out, "{n}");
    }
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
        "  job {} act `{}` status `{}` attempts {}/{} ordering {:?} concurrency {:?} rate {} last_error {:?}",
        j.id,
        j.act,
        j.status,
        j.attempts,
        j.max_attempts,
        j.ordering_key,
        j.concurrency,
        j.rate.as_ref().map_or_else(
            || "None".to_owned(),
            |r| format!("`{}` {}/{}", r.key, r.limit, ms(r.period_us))
        ),
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
