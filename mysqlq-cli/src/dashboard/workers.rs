//! `/workers`: the live workers (not stopped, or stopped within the hour), each with its
//! settings per queue, its last report (stale after 60 s), the leader badge, and its running
//! jobs (50 listed, the rest a search away); jobs a Redis relay holds, grouped by relaying
//! worker; past 5,000 running jobs only each worker's reported count.

use std::collections::BTreeMap;

use axum::extract::State;
use maud::{Markup, html};
use mysqlq::admin::{Holder, LiveWorker, OpState, RUNNING_CAP, RunningJob};
use mysqlq::filter::Filter;

use super::charts::{ago_us, duration_us, utc};
use super::pages::{Res, admin, render};
use super::view::{enc, page};
use super::{Shared, State as DashState};

/// The group of running jobs without `locked_by`.
const NO_HOLDER: &str = "(no holder)";

/// Running jobs listed per worker (or relay); the rest are counted and searchable.
const PER_WORKER: usize = 50;

/// `/jobs?q=state:running worker:<id>`.
fn running_search(state: &DashState, worker: &str) -> String {
    let f = Filter {
        states: vec![OpState::Running],
        workers: vec![worker.to_owned()],
        ..Filter::default()
    };
    state.url(&format!("/jobs?q={}", enc(&f.to_string())))
}

/// `in 4.2 s` / `expired 3 s ago` of a lease's time left.
fn lease_left(us: Option<i64>) -> String {
    match us {
        None => "–".to_owned(),
        Some(us) if us >= 0 => format!("in {}", duration_us(us.unsigned_abs())),
        Some(us) => format!("expired {}", ago_us(us.unsigned_abs())),
    }
}

/// Up to [`PER_WORKER`] jobs as a table; `more` links to the rest when some are left out.
fn jobs_table(state: &DashState, jobs: &[&RunningJob], more: Option<&str>) -> Markup {
    let left = jobs.len().saturating_sub(PER_WORKER);
    html! {
        table.running-jobs {
            thead { tr {
                th.num scope="col" { "job" } th scope="col" { "kind" } th scope="col" { "queue" }
                th.num scope="col" { "running for" } th scope="col" { "lease expires" }
                th.num scope="col" { "attempt" }
            } }
            tbody {
                @for j in jobs.iter().take(PER_WORKER) {
                    tr data-id=(j.id.0) {
                        td.num { a href=(state.url(&format!("/jobs/{}", j.id.0))) { (j.id.0) } }
                        td { (j.kind.as_deref().unwrap_or("–")) }
                        td { (j.queue) }
                        td.num { (j.running_us.map_or_else(|| "–".to_owned(), duration_us)) }
                        td { (lease_left(j.lease_left_us)) }
                        td.num { (j.attempt) "/" (j.max_attempts) }
                    }
                }
            }
        }
        @if left > 0 {
            p.more {
                @match more {
                    Some(href) => a href=(href) { "and " (left) " more →" },
                    None => span.muted { "and " (left) " more" },
                }
            }
        }
    }
}

/// A worker's queues: `emails=10`, `reports` (sharing the slots), its rate and global limit.
fn queues_text(w: &LiveWorker) -> String {
    let parts: Vec<String> = w
        .queues
        .iter()
        .map(|q| {
            let mut s = match q.concurrency {
                Some(n) => format!("{}={n}", q.queue),
                None => q.queue.clone(),
            };
            if let Some(r) = &q.rate {
                s.push_str(&format!(" (rate {r})"));
            }
            if let Some(g) = q.global {
                s.push_str(&format!(" (global {g})"));
            }
            s
        })
        .collect();
    if parts.is_empty() {
        "–".to_owned()
    } else {
        parts.join(", ")
    }
}

/// One worker's card.
fn card(state: &DashState, w: &LiveWorker, jobs: Option<&[&RunningJob]>) -> Markup {
    html! {
        section.worker id=(format!("worker-{}", w.worker_id)) data-worker=(w.worker_id) {
            h2 {
                (w.worker_id)
                @if w.leader { " " span.badge.leader title="holds the maintenance lease: reaper, pruner, gauges, depth history" { "leader" } }
                @if w.stopped_at.is_some() { " " span.badge.stopped { "stopped" } }
                @else if w.stale { " " span.badge.stale title="no report for over 60 s: it may have died" { "stale" } }
            }
            dl.facts {
                dt { "host" } dd { (w.host) }
                dt { "pid" } dd { (w.pid) }
                dt { "version" } dd { (w.version.as_deref().unwrap_or("–")) }
                dt { "queues" } dd.queues title="QUEUE=N: its own limit on this worker; without: it shares the worker's slots" { (queues_text(w)) }
                dt { "running" } dd.running { (w.running) " / " (w.concurrency) }
                dt { "last report" } dd.last-report { (ago_us(w.last_seen_age_us)) " (" (utc(&w.last_seen_at)) ")" }
                dt { "started" } dd { (utc(&w.started_at)) }
                @if let Some(t) = &w.stopped_at { dt { "stopped" } dd { (utc(t)) } }
                @if let Some(ms) = w.lease_ms { dt { "lease" } dd { (duration_us(ms * 1000)) } }
                @if w.redis == Some(true) { dt { "transport" } dd { "Redis Streams" } }
            }
            @match jobs {
                None => {}
                Some([]) => p.muted { "no running job" },
                Some(jobs) => (jobs_table(state, jobs, Some(&running_search(state, &w.worker_id)))),
            }
        }
    }
}

/// `GET /workers`.
pub(super) async fn list(State(state): State<Shared>) -> Res {
    let admin = admin(&state);
    let workers = admin.workers().await?;
    let running = admin.running_jobs().await?;
    let mut by_worker: BTreeMap<&str, Vec<&RunningJob>> = BTreeMap::new();
    let mut by_relay: BTreeMap<&str, Vec<&RunningJob>> = BTreeMap::new();
    for j in &running.jobs {
        match &j.holder {
            Some(Holder::Worker(w)) => by_worker.entry(w.as_str()).or_default().push(j),
            Some(Holder::Relay(w)) => by_relay.entry(w.as_str()).or_default().push(j),
            None => by_worker.entry(NO_HOLDER).or_default().push(j),
        }
    }
    let jobs_of = |w: &LiveWorker| -> Option<Vec<&RunningJob>> {
        (!running.capped).then(|| {
            by_worker
                .get(w.worker_id.as_str())
                .cloned()
                .unwrap_or_default()
        })
    };
    let others: Vec<(&str, &Vec<&RunningJob>)> = by_worker
        .iter()
        .filter(|(h, _)| !workers.workers.iter().any(|w| w.worker_id == **h))
        .map(|(h, jobs)| (*h, jobs))
        .collect();
    let body = html! {
        h1 { "Workers" }
        div #workers-live data-live {
        p.muted {
            (workers.workers.iter().filter(|w| w.stopped_at.is_none()).count()) " running, "
            (workers.workers.iter().filter(|w| w.stopped_at.is_some()).count()) " stopped in the last hour; "
            @if running.capped { "more than " (RUNNING_CAP) } @else { (running.jobs.len()) }
            " jobs running."
            @if workers.leader.is_none() { " No worker holds the leader lease." }
        }
        @if running.capped {
            p.notice #running-capped role="status" {
                "More than " (RUNNING_CAP) " jobs are running: they are not listed. Each worker's count is its own last report; "
                a href=(state.url("/jobs?q=state%3Arunning")) { "search the running jobs" } "."
            }
        }
        @if workers.workers.is_empty() { p.muted #no-workers { "No worker ran in the last hour." } }
        @for w in &workers.workers { (card(&state, w, jobs_of(w).as_deref())) }
        @if !by_relay.is_empty() {
            section #in-streams {
                h2 { "In Redis streams" }
                p.muted { "Jobs a relay moved into a Redis stream that no consumer has taken yet (they count as ready)." }
                @for (relay, jobs) in &by_relay {
                    h3 { "relayed by " (relay) ": " (jobs.len()) }
                    (jobs_table(&state, jobs, None))
                }
            }
        }
        @if !others.is_empty() {
            section #other-holders {
                h2 { "Held by workers not listed" }
                p.muted { "Their worker has not reported for a day or stopped over an hour ago; the reaper takes each job back when its lease expires." }
                @for (holder, jobs) in &others {
                    h3 { (holder) ": " (jobs.len()) }
                    (jobs_table(&state, jobs, (*holder != NO_HOLDER).then(|| running_search(&state, holder)).as_deref()))
                }
            }
        }
        }
        p.muted {
            "Last report is the worker's statistics flush (every few seconds while busy, every 30 s while idle): a worker that died reads as stale after 60 s, and its jobs come back when their leases expire."
        }
    };
    Ok(render(&page(&state, "Workers", "workers", &body)))
}
