//! `/queues` (every queue: its jobs by operator state, each count a search; oldest ready;
//! the last hour's throughput, failure share and p95s; pause flag, limits, pause / resume) and
//! `/queues/{q}` (depth and throughput charts of the last hour, run-time and pickup
//! percentiles per kind, the limits and their form, the live workers' concurrency for it).

use std::collections::HashMap;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::http::Uri;
use axum::response::{IntoResponse, Redirect};
use maud::{Markup, html};
use mysqlq::Rate;
use mysqlq::admin::{
    DEPTH_STATES, LatencyRow, OpState, Percentiles, QueueLimits, QueueSettings, QueueStates,
    StateCounts,
};
use mysqlq::filter::Filter;

use super::charts::{Column, Series, ago_us, duration_us, stacked};
use super::pages::{Fail, Res, admin, render};
use super::view::{csrf, enc, notice, page};
use super::{Shared, State as DashState};

/// `?msg=` after an action.
#[derive(Debug, serde::Deserialize)]
pub(super) struct Msg {
    msg: Option<String>,
}

/// The states the queues pages count, in their column order (the unfinished ones and failed).
const STATES: [OpState; 7] = DEPTH_STATES;

/// The window of the throughput, failure share and percentiles.
const HOUR: Duration = Duration::from_secs(3600);

/// `/jobs?q=queue:<q> state:<state>`: the search a count stands for.
pub(super) fn search_link(state: &DashState, queue: &str, op: OpState) -> String {
    let queue = Filter {
        queues: vec![queue.to_owned()],
        ..Filter::default()
    };
    let op = Filter {
        states: vec![op],
        ..Filter::default()
    };
    state.url(&format!("/jobs?q={}", enc(&format!("{queue} {op}"))))
}

/// `/queues/<q>`.
pub(super) fn queue_link(state: &DashState, queue: &str) -> String {
    state.url(&format!("/queues/{}", enc(queue)))
}

/// A queue's count of `op`, a link to the search of those jobs.
fn count_cell(state: &DashState, queue: &str, states: &StateCounts, op: OpState) -> Markup {
    let n = states.get(op).unwrap_or_default();
    html! {
        td.num data-state=(op.as_str()) {
            a href=(search_link(state, queue, op)) { (n) }
            @if op == OpState::Ready && states.in_stream > 0 {
                " " span.muted title="relayed into a Redis stream, not yet taken" { "(" (states.in_stream) " in streams)" }
            }
        }
    }
}

/// `10/s · global 5`, or `none`.
fn limits_text(l: &QueueLimits) -> String {
    let mut parts = Vec::new();
    if let Some(r) = l.rate {
        parts.push(format!("rate {r}"));
    }
    if let Some(g) = l.global {
        parts.push(format!("global {g}"));
    }
    if parts.is_empty() {
        "none".to_owned()
    } else {
        parts.join(" · ")
    }
}

/// Completed per minute over the last hour, and the failed share of the finished.
fn throughput(row: Option<&LatencyRow>) -> (String, String) {
    let Some(r) = row else {
        return ("0".to_owned(), "–".to_owned());
    };
    let c = r.counts;
    #[allow(clippy::cast_precision_loss)]
    let per_min = c.completed as f64 / 60.0;
    let finished = c.completed + c.failed;
    #[allow(clippy::cast_precision_loss)]
    let share = (finished > 0).then(|| 100.0 * c.failed as f64 / finished as f64);
    (
        format!("{per_min:.1}"),
        share.map_or_else(|| "–".to_owned(), |s| format!("{s:.1} %")),
    )
}

/// A percentile cell, its microseconds in `data-us`.
fn pct_cell(field: &str, us: Option<u64>) -> Markup {
    html! {
        @match us {
            Some(us) => td.num data-f=(field) data-us=(us) { (duration_us(us)) },
            None => td.num data-f=(field) { "–" },
        }
    }
}

/// The pause / resume button of a queue; `from` names the page to come back to.
fn pause_form(state: &DashState, queue: &str, paused: bool, from: &str) -> Markup {
    let (path, label) = if paused {
        ("/queues/resume", "Resume")
    } else {
        ("/queues/pause", "Pause")
    };
    html! {
        form method="post" action=(state.url(path)) {
            (csrf(state))
            input type="hidden" name="queue" value=(queue);
            input type="hidden" name="from" value=(from);
            button type="submit" name="do" value=(label.to_lowercase()) { (label) " " (queue) }
        }
    }
}

/// `GET /queues`: one row per queue.
pub(super) async fn list(State(state): State<Shared>, Query(q): Query<Msg>) -> Res {
    let admin = admin(&state);
    let queues = admin.open_state_counts().await?;
    let settings = admin.queue_settings().await?;
    let latency = admin.latency(HOUR).await?;
    let settings: HashMap<&str, &QueueSettings> =
        settings.iter().map(|s| (s.queue.as_str(), s)).collect();
    let latency: HashMap<&str, &LatencyRow> = latency
        .iter()
        .filter(|r| r.kind.is_none())
        .map(|r| (r.queue.as_str(), r))
        .collect();
    let actions = !state.read_only;
    let body = html! {
        h1 { "Queues" }
        (notice(q.msg.as_deref()))
        table #queues data-live {
            caption { "Jobs by state (each count opens its search), and the last hour" }
            thead { tr {
                th scope="col" { "queue" }
                @for s in STATES { th.num scope="col" { (s.as_str()) } }
                th.num scope="col" { "oldest ready" }
                th.num scope="col" title="attempts completed per minute over the last hour" { "completed/min" }
                th.num scope="col" title="of the jobs that finished in the last hour, the share that failed" { "failed %" }
                th.num scope="col" title="run time of the attempts of the last hour" { "p95 run" }
                th.num scope="col" title="from ready to the handler's start, last hour" { "p95 pickup" }
                th scope="col" { "state" }
                th scope="col" { "limits" }
                @if actions { th scope="col" { "action" } }
            } }
            tbody {
                @if queues.is_empty() { tr { td colspan="17" .muted { "no queues yet" } } }
                @for qs in &queues {
                    @let set = settings.get(qs.queue.as_str());
                    @let paused = set.is_some_and(|s| s.paused);
                    @let row = latency.get(qs.queue.as_str()).copied();
                    @let (per_min, failed_share) = throughput(row);
                    tr data-queue=(qs.queue) {
                        th scope="row" { a href=(queue_link(&state, &qs.queue)) { (qs.queue) } }
                        @for s in STATES { (count_cell(&state, &qs.queue, &qs.states, s)) }
                        td.num data-f="oldest-ready" { (oldest(qs)) }
                        td.num data-f="completed-per-min" { (per_min) }
                        td.num data-f="failed-share" { (failed_share) }
                        (pct_cell("run-p95", row.and_then(|r| r.run.p95_us)))
                        (pct_cell("pickup-p95", row.and_then(|r| r.pickup.p95_us)))
                        td data-q=(qs.queue) data-f="paused" { (if paused { "paused" } else { "running" }) }
                        td data-f="limits" { (limits_text(&set.map(|s| s.limits).unwrap_or_default())) }
                        @if actions { td { (pause_form(&state, &qs.queue, paused, "queues")) } }
                    }
                }
            }
        }
        p.muted { "A paused queue keeps its jobs; workers stop claiming from it (running jobs finish). Throughput, failures and percentiles come from the workers' per-minute histograms (within 9.1 %)." }
    };
    Ok(render(&page(&state, "Queues", "queues", &body)))
}

/// The oldest ready job's age, `–` when none is ready.
fn oldest(qs: &QueueStates) -> String {
    qs.oldest_ready_age_us
        .map_or_else(|| "–".to_owned(), duration_us)
}

/// `GET /queues/pause` and `/queues/resume`: the page of the queue of that name (the routes'
/// POSTs pause and resume).
pub(super) async fn show_named(state: State<Shared>, uri: Uri, q: Query<Msg>) -> Res {
    let name = uri.path().rsplit('/').next().unwrap_or_default().to_owned();
    show(state, Path(name), q).await
}

/// `GET /queues/{q}`.
pub(super) async fn show(
    State(state): State<Shared>,
    Path(queue): Path<String>,
    Query(q): Query<Msg>,
) -> Res {
    mysqlq::validate_queue_name(&queue)?;
    let admin = admin(&state);
    let counts = admin.open_state_counts().await?;
    let settings = admin.queue_settings().await?;
    let history = admin.queue_history(&queue).await?;
    let latency: Vec<LatencyRow> = admin
        .latency(HOUR)
        .await?
        .into_iter()
        .filter(|r| r.queue == queue)
        .collect();
    let workers = admin.workers().await?;
    let serving: Vec<_> = workers
        .workers
        .iter()
        .filter_map(|w| {
            w.queues
                .iter()
                .find(|wq| wq.queue == queue)
                .map(|wq| (w, wq))
        })
        .collect();
    let qs = counts.iter().find(|c| c.queue == queue);
    if qs.is_none() && latency.is_empty() && history.depth.is_empty() && serving.is_empty() {
        return Err(Fail(
            StatusCode::NOT_FOUND,
            format!("error: no queue {queue}: no job, worker or setting names it"),
        ));
    }
    let set = settings.iter().find(|s| s.queue == queue);
    let paused = set.is_some_and(|s| s.paused);
    let limits = set.map(|s| s.limits).unwrap_or_default();
    let states = qs.map(|c| c.states).unwrap_or_default();
    let body = html! {
        h1 { "Queue " (queue) " " span.state #queue-state { (if paused { "paused" } else { "running" }) } }
        (notice(q.msg.as_deref()))
        table #queue-states data-live {
            caption { "Jobs by state (each count opens its search)" }
            thead { tr {
                @for s in STATES { th.num scope="col" { (s.as_str()) } }
                th.num scope="col" { "oldest ready" }
            } }
            tbody { tr data-queue=(queue) {
                @for s in STATES { (count_cell(&state, &queue, &states, s)) }
                td.num { (qs.map_or_else(|| "–".to_owned(), oldest)) }
            } }
        }
        @if !state.read_only { div.actions { (pause_form(&state, &queue, paused, "queue")) } }
        h2 { "Depth" }
        (depth_chart(&history.depth))
        h2 { "Completed and failed per minute" }
        (throughput_chart(&history.throughput))
        h2 { "Run time and pickup latency, last hour" }
        (latency_table(&latency))
        h2 { "Limits" }
        (limits_section(&state, &queue, &limits))
        h2 { "Workers serving " (queue) }
        table #queue-workers data-live {
            caption { "Each live worker's concurrency for " (queue) " (read only)" }
            thead { tr {
                th scope="col" { "worker" } th scope="col" { "host" }
                th.num scope="col" { "concurrency for " (queue) } th.num scope="col" { "worker slots" }
                th scope="col" { "last report" }
            } }
            tbody {
                @if serving.is_empty() { tr { td colspan="5" .muted { "no live worker serves this queue" } } }
                @for (w, wq) in &serving {
                    tr data-worker=(w.worker_id) {
                        td { a href=(state.url(&format!("/workers#worker-{}", enc(&w.worker_id)))) { (w.worker_id) } }
                        td { (w.host) }
                        td.num data-f="queue-concurrency" {
                            @match wq.concurrency { Some(n) => (n), None => span.muted { "shares the worker's slots" } }
                        }
                        td.num { (w.concurrency) }
                        td {
                            (ago_us(w.last_seen_age_us))
                            @if w.stopped_at.is_some() { " (stopped)" } @else if w.stale { " (stale)" }
                        }
                    }
                }
            }
        }
        p.muted #concurrency-note {
            "A worker's concurrency cannot change while it runs: start it again with "
            code { "work --queues " (queue) "=N" } " (its limit for this queue) or "
            code { "--concurrency N" } " (its slots). The limits above apply to every worker at once, from its next claim."
        }
    };
    Ok(render(&page(
        &state,
        &format!("Queue {queue}"),
        "queues",
        &body,
    )))
}

/// The stacked depth chart of the leader's minutes.
fn depth_chart(rows: &[mysqlq::admin::DepthRow]) -> Markup {
    let mut columns: Vec<Column> = Vec::new();
    for r in rows {
        if columns.last().is_none_or(|c| c.minute != r.minute) {
            columns.push(Column {
                minutes_ago: r.minutes_ago,
                minute: r.minute,
                values: vec![0; STATES.len()],
            });
        }
        if let (Some(c), Some(i)) = (
            columns.last_mut(),
            STATES.iter().position(|s| *s == r.state),
        ) {
            c.values[i] = r.n;
        }
    }
    let series: Vec<Series<'_>> = STATES
        .iter()
        .map(|s| Series {
            class: s.as_str(),
            label: s.as_str(),
        })
        .collect();
    html! {
        (stacked("depth-chart", "Jobs by state", &series, &columns))
        p.muted { "Counted by the leader worker once a minute; a gap is a minute no leader counted." }
    }
}

/// Completed and failed attempts per minute, stacked.
fn throughput_chart(rows: &[mysqlq::admin::ThroughputRow]) -> Markup {
    let columns: Vec<Column> = rows
        .iter()
        .map(|r| Column {
            minutes_ago: r.minutes_ago,
            minute: r.minute,
            values: vec![r.completed, r.failed],
        })
        .collect();
    let series = [
        Series {
            class: "completed",
            label: "completed",
        },
        Series {
            class: "failed",
            label: "failed",
        },
    ];
    stacked(
        "throughput-chart",
        "Attempts completed and failed",
        &series,
        &columns,
    )
}

/// Run-time and pickup percentiles, the queue's row first, then each kind.
fn latency_table(rows: &[LatencyRow]) -> Markup {
    let cells = |prefix: &str, p: &Percentiles| {
        html! {
            (pct_cell(&format!("{prefix}-p50"), p.p50_us))
            (pct_cell(&format!("{prefix}-p95"), p.p95_us))
            (pct_cell(&format!("{prefix}-p99"), p.p99_us))
        }
    };
    html! {
        table #latency data-live {
            caption { "Percentiles from log-scale histograms: each within 9.1 % of the exact value" }
            thead {
                tr {
                    th scope="col" rowspan="2" { "kind" }
                    th.num scope="col" rowspan="2" { "completed" }
                    th.num scope="col" rowspan="2" { "retried" }
                    th.num scope="col" rowspan="2" { "failed" }
                    th scope="colgroup" colspan="3" { "run time" }
                    th scope="colgroup" colspan="3" { "pickup (ready → start)" }
                }
                tr {
                    @for _ in 0..2 { th.num scope="col" { "p50" } th.num scope="col" { "p95" } th.num scope="col" { "p99" } }
                }
            }
            tbody {
                @if rows.is_empty() { tr { td colspan="10" .muted { "no attempt in the last hour" } } }
                @for r in rows {
                    tr data-kind=(r.kind.as_deref().unwrap_or("*")) {
                        th scope="row" { @match &r.kind { Some(k) => (k), None => em { "all kinds" } } }
                        td.num { (r.counts.completed) }
                        td.num { (r.counts.retried) }
                        td.num { (r.counts.failed) }
                        (cells("run", &r.run))
                        (cells("pickup", &r.pickup))
                    }
                }
            }
        }
    }
}

/// The queue's limits and, unless read-only, the form that sets them.
fn limits_section(state: &DashState, queue: &str, limits: &QueueLimits) -> Markup {
    let rate = limits.rate.map(|r| r.to_string()).unwrap_or_default();
    let global = limits.global.map(|g| g.to_string()).unwrap_or_default();
    html! {
        dl.facts #limits {
            dt { "rate" } dd #limit-rate { (limits.rate.map_or_else(|| "none".to_owned(), |r| r.to_string())) }
            dt { "global" } dd #limit-global { (limits.global.map_or_else(|| "none".to_owned(), |g| g.to_string())) }
        }
        @if !state.read_only {
            form method="post" action=(state.url(&format!("/queues/{}/limits", enc(queue)))) #limits-form {
                (csrf(state))
                label for="rate" { "Rate (starts per period across every worker, e.g. 100/s; empty: none)" }
                " " input #rate name="rate" value=(rate) placeholder="100/s" maxlength="32";
                " "
                label for="global" { "Global limit (jobs running at once across every worker; empty: none)" }
                " " input #global type="number" name="global" min="1" value=(global);
                " "
                button type="submit" #save-limits { "Save limits" }
            }
            p.muted { "Every worker obeys the stored limits from its next claim; the change is in the audit trail as " code { "limits" } "." }
        }
    }
}

/// A form field's value, trimmed.
fn field(body: &str, name: &str) -> Option<String> {
    form_urlencoded::parse(body.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.trim().to_owned())
}

/// The limits a form asks for: empty or `none` clears each.
fn form_limits(body: &str) -> Result<QueueLimits, Fail> {
    let bad = |m: String| Fail(StatusCode::BAD_REQUEST, format!("error: {m}"));
    let rate = match field(body, "rate").as_deref() {
        None | Some("" | "none") => None,
        Some(r) => Some(r.parse::<Rate>().map_err(|e| bad(e.to_string()))?),
    };
    let global = match field(body, "global").as_deref() {
        None | Some("" | "none") => None,
        Some(g) => Some(g.parse::<u32>().ok().filter(|&n| n > 0).ok_or_else(|| {
            bad(format!(
                "global limit `{g}`: write a whole number of jobs above 0, or leave it empty"
            ))
        })?),
    };
    Ok(QueueLimits { rate, global })
}

/// `POST /queues/{q}/limits`: sets the queue's rate and global limit
/// (`Admin::set_queue_limits`, audited as `limits`).
pub(super) async fn set_limits(
    State(state): State<Shared>,
    Path(queue): Path<String>,
    body: String,
) -> Res {
    mysqlq::validate_queue_name(&queue)?;
    let limits = form_limits(&body)?;
    admin(&state).set_queue_limits(&queue, limits).await?;
    let msg = format!("limits of {queue}: {}", limits_text(&limits));
    Ok(Redirect::to(&format!("{}?msg={}", queue_link(&state, &queue), enc(&msg))).into_response())
}

async fn set_paused(state: &DashState, body: &str, paused: bool) -> Res {
    let queue = field(body, "queue")
        .ok_or_else(|| Fail(StatusCode::BAD_REQUEST, "error: no queue given".to_owned()))?;
    let admin = admin(state);
    if paused {
        admin.pause(&queue).await?;
    } else {
        admin.resume(&queue).await?;
    }
    let msg = format!(
        "{} queue {queue}",
        if paused { "paused" } else { "resumed" }
    );
    let back = if field(body, "from").as_deref() == Some("queue") {
        queue_link(state, &queue)
    } else {
        state.url("/queues")
    };
    Ok(Redirect::to(&format!("{back}?msg={}", enc(&msg))).into_response())
}

/// `POST /queues/pause`.
pub(super) async fn queue_pause(State(state): State<Shared>, body: String) -> Res {
    set_paused(&state, &body, true).await
}

/// `POST /queues/resume`.
pub(super) async fn queue_resume(State(state): State<Shared>, body: String) -> Res {
    set_paused(&state, &body, false).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limits_form_reads_empty_as_none_and_refuses_nonsense() {
        let l = form_limits("rate=100%2Fs&global=5&mysqlq_csrf=x").unwrap();
        assert_eq!(l.rate.map(|r| r.to_string()).as_deref(), Some("100/s"));
        assert_eq!(l.global, Some(5));
        assert_eq!(
            form_limits("rate=&global=").unwrap(),
            QueueLimits::default()
        );
        assert_eq!(form_limits("rate=none").unwrap(), QueueLimits::default());
        for bad in ["global=0", "global=-1", "global=x", "rate=5", "rate=0%2Fs"] {
            assert_eq!(
                form_limits(bad).unwrap_err().0,
                StatusCode::BAD_REQUEST,
                "{bad}"
            );
        }
        assert_eq!(limits_text(&QueueLimits::default()), "none");
        assert_eq!(limits_text(&l), "rate 100/s · global 5");
    }
}
