//! The handlers: one per page, action and endpoint.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use maud::{Markup, html};
use mysqlq::JobId;
use mysqlq::admin::{
    Admin, AuditQuery, JobState, OpState, PageRow, RowFacts, Selection, Timestamp,
};
use serde::Deserialize;

use super::actions::{attempts_table, audit_table, cancel_facts, confirm_first, job_actions};
use super::time::{db_now, time, time_or_dash};
use super::view::{age, chart, csrf, enc, notice, page, queue_table};
use super::{Shared, State as DashState, cli_cmd, json};

/// Most failed jobs listed on the failed page.
const FAILED_PAGE: u32 = 200;

/// An error answer: plain text (never HTML), so nothing in it can run.
#[derive(Debug)]
pub(super) struct Fail(pub(super) StatusCode, pub(super) String);

impl IntoResponse for Fail {
    fn into_response(self) -> Response {
        (
            self.0,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("{}\n", self.1),
        )
            .into_response()
    }
}

impl From<mysqlq::Error> for Fail {
    fn from(e: mysqlq::Error) -> Self {
        match e {
            mysqlq::Error::Invalid { .. } => Self(StatusCode::BAD_REQUEST, format!("error: {e}")),
            _ => Self(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("error: {}", crate::error::chain(&e)),
            ),
        }
    }
}

pub(super) type Res = Result<Response, Fail>;

/// The operator API over the dashboard's pool, its actions recorded under the request's
/// operator ([`super::DashboardOptions::actor_from`], a named token) or the dashboard's user.
pub(super) fn admin(state: &DashState) -> Admin {
    Admin::new(state.pool.clone()).by(actor(state))
}

/// Who the request acts as: the hook's or token's name, else the dashboard's user.
pub(super) fn actor(state: &DashState) -> String {
    super::guard::current_actor().unwrap_or_else(|| state.user.clone())
}

pub(super) fn render(m: &Markup) -> Response {
    Html(m.clone().into_string()).into_response()
}

/// Empty query values mean "no filter".
fn some(v: Option<&String>) -> Option<&str> {
    v.map(|s| s.trim()).filter(|s| !s.is_empty())
}

/// `?msg=` after an action.
#[derive(Debug, Deserialize)]
pub(super) struct MsgQuery {
    msg: Option<String>,
    queue: Option<String>,
}

/// `GET /`: per-queue counts and the chart.
pub(super) async fn overview(State(state): State<Shared>) -> Res {
    let admin = admin(&state);
    let queues = admin.queues().await?;
    let points = admin.chart().await?;
    let body = html! {
        h1 { "Overview" }
        (queue_table(&state, &queues, false))
        (streams_section(&state, &queues).await)
        h2 { "Throughput" }
        (chart(&points))
    };
    Ok(render(&page(&state, "Overview", "overview", &body)))
}

/// The Redis streams section (feature `redis`), empty without it.
async fn streams_section(state: &DashState, queues: &[mysqlq::admin::QueueStats]) -> Markup {
    #[cfg(feature = "redis")]
    {
        let names: Vec<String> = queues.iter().map(|q| q.queue.clone()).collect();
        super::streams::section(state, &names).await
    }
    #[cfg(not(feature = "redis"))]
    {
        let _ = (state, queues);
        html! {}
    }
}

/// `GET /api/overview`: the numbers the script refreshes.
pub(super) async fn api_overview(State(state): State<Shared>) -> Res {
    let admin = admin(&state);
    let queues = admin.queues().await?;
    let points = admin.chart().await?;
    let queues: Vec<serde_json::Value> = queues
        .iter()
        .map(|q| {
            serde_json::json!({
                "queue": q.queue, "ready": q.ready, "processing": q.processing,
                "scheduled": q.scheduled, "failed": q.failed, "paused": q.paused,
                "rate_limited": q.rate_limited,
                "oldest_ready_age_seconds": q.oldest_ready_age_seconds,
                "oldest": age(q.oldest_ready_age_seconds),
            })
        })
        .collect();
    Ok(Json(serde_json::json!({ "queues": queues, "chart": points })).into_response())
}

/// `?msg=` on the job page.
#[derive(Debug, Deserialize)]
pub(super) struct JobQuery {
    msg: Option<String>,
}

/// `GET /jobs/{id}`: payload, attempts, timeline, last error and lease.
pub(super) async fn job(
    State(state): State<Shared>,
    Path(id): Path<u64>,
    Query(q): Query<JobQuery>,
) -> Res {
    let Some(j) = admin(&state).job(JobId(id)).await? else {
        return Err(Fail(StatusCode::NOT_FOUND, format!("error: no job {id}")));
    };
    let attempts = admin(&state).attempts(JobId(id)).await?;
    let actions = admin(&state)
        .audit(&AuditQuery {
            job: Some(JobId(id)),
            limit: 100,
            ..AuditQuery::default()
        })
        .await?;
    let now = j.read_at;
    let progress = j
        .meta
        .as_ref()
        .and_then(|m| m.get("progress"))
        .and_then(serde_json::Value::as_f64);
    let mut timeline: Vec<(&str, Timestamp)> = vec![("created", j.created_at)];
    if let Some(t) = j.first_claimed_at {
        timeline.push(("first claimed", t));
    }
    timeline.push(("runnable at (available_at)", j.available_at));
    if let Some(t) = j.lease_expires_at {
        timeline.push(("lease expires", t));
    }
    if let Some(t) = j.finished_at {
        timeline.push(("finished", t));
    }
    timeline.push(("last change (updated_at)", j.updated_at));
    timeline.sort_by_key(|a| a.1);
    let title = format!("Job {id}");
    let row = PageRow {
        id: j.id,
        queue: &j.queue,
        rate_key: j.rate_key.as_deref(),
        status: j.state,
        available_at: j.available_at,
    };
    let limited = admin(&state)
        .limited_rows(&[row], j.read_at)
        .await?
        .contains(&j.id);
    let facts = RowFacts {
        status: j.state,
        available_at: j.available_at,
        attempts: j.attempts,
        relayed: j
            .locked_by
            .as_deref()
            .is_some_and(|l| l.starts_with("redis-relay:")),
        limited,
    };
    let op = OpState::classify(&facts, j.read_at);
    let body = html! {
        (notice(q.msg.as_deref()))
        div #job-live data-live {
        h1 { "Job " (id) " " span #job-state class=(format!("state {op}")) { (op.as_str()) } }
        dl.facts {
            dt { "queue" } dd { (j.queue) }
            dt { "kind" } dd { (j.kind.as_deref().unwrap_or("–")) }
            dt { "attempts" } dd #attempts { (j.attempts) " of " (j.max_attempts) }
            dt { "priority" } dd { (j.priority) }
            dt { "lease owner (locked_by)" } dd { (j.locked_by.as_deref().unwrap_or("–")) }
            dt { "lease expires" } dd { (time_or_dash(j.lease_expires_at.as_ref(), &now)) }
            @if let Some(k) = &j.dedupe_key { dt { "dedupe key" } dd { (k) } }
            @if let Some(k) = &j.ordering_key { dt { "ordering key" } dd { (k) } }
            @if let Some(k) = &j.concurrency_key { dt { "concurrency key" } dd { (k) } }
            @if let Some(k) = &j.rate_key { dt { "rate key" } dd { (k) " (" (j.rate_limit.as_deref().unwrap_or("no limit")) ")" } }
            (cancel_facts(&j))
        }
        h2 { "Timeline" }
        p.muted { "“ago” and “in” are measured on the database's clock: " (time(&now, &now)) }
        ol.timeline #timeline {
            @for (label, at) in &timeline { li { (time(at, &now)) " " (label) } }
        }
        }
        h2 { "Payload" }
        (json::document("payload", &j.payload, &state.url(&format!("/jobs/{id}/payload.json"))))
        @if let Some(meta) = &j.meta {
            h2 { "Meta" }
            @if let Some(p) = progress { p #progress { "progress " (format!("{p:.0}")) " %" } }
            div.json #meta { (json::value(meta)) }
        }
        h2 { "Last error" }
        div.json #last-error { @match &j.last_error { Some(e) => (json::text(e)), None => "–" } }
        (attempts_table(&attempts, &now))
        (audit_table(&actions, &now))
        (job_actions(&state, &j))
        @if j.state == JobState::Failed && !state.read_only {
            div.actions {
                form method="post" action=(state.url("/failed/retry")) {
                    (csrf(&state))
                    input type="hidden" name="only" value=(id);
                    input type="hidden" name="from" value="job";
                    button type="submit" #retry { "Retry" }
                }
                form method="post" action=(state.url("/failed/discard")) {
                    (csrf(&state))
                    input type="hidden" name="only" value=(id);
                    button type="submit" #discard { "Discard" }
                }
            }
        }
        @if !state.read_only { (cli_cmd::block(&cli_cmd::job(j.id, j.state, &state.user))) }
    };
    Ok(render(&page(&state, &title, "jobs", &body)))
}

/// `GET /failed`: failed jobs, newest failure first, with retry / discard.
pub(super) async fn failed(State(state): State<Shared>, Query(q): Query<MsgQuery>) -> Res {
    let queue = some(q.queue.as_ref());
    let admin = admin(&state);
    let list = admin.failed(queue, FAILED_PAGE).await?;
    let count = admin.failed_count(queue).await?;
    let now = db_now(&state.pool).await?;
    let actions = !state.read_only;
    let body = html! {
        h1 { "Failed jobs" }
        (notice(q.msg.as_deref()))
        p.muted { (count) " failed" @if let Some(qn) = queue { " in queue " (qn) } "; newest " (list.len()) " shown." }
        form method="post" action=(state.url("/failed/retry")) #failed-form {
            @if actions { (csrf(&state)) }
            table #failed {
                caption { "Failed jobs, newest failure first" }
                thead { tr {
                    @if actions { th scope="col" { "select" } }
                    th.num scope="col" { "id" } th scope="col" { "queue" } th scope="col" { "kind" }
                    th.num scope="col" { "attempts" } th scope="col" { "failed at" }
                    th scope="col" { "last error" }
                    @if actions { th scope="col" { "action" } }
                } }
                tbody {
                    @if list.is_empty() { tr { td colspan="8" .muted { "no failed jobs" } } }
                    @for f in &list {
                        tr data-id=(f.id.0) {
                            @if actions { td { input type="checkbox" name="id" value=(f.id.0) aria-label=(format!("select job {}", f.id.0)); } }
                            td.num { a href=(state.url(&format!("/jobs/{}", f.id.0))) { (f.id.0) } }
                            td { (f.queue) }
                            td { (f.kind.as_deref().unwrap_or("–")) }
                            td.num { (f.attempts) "/" (f.max_attempts) }
                            td { (time_or_dash(f.failed_at.as_ref(), &now)) }
                            td.error { (f.last_error.as_deref().unwrap_or("")) }
                            @if actions {
                                td {
                                    button type="submit" name="only" value=(f.id.0) class="retry-one" { "Retry" }
                                    " "
                                    button type="submit" name="only" value=(f.id.0) class="discard-one"
                                        formaction=(state.url("/failed/discard")) { "Discard" }
                                }
                            }
                        }
                    }
                }
            }
            @if actions && !list.is_empty() {
                p.actions {
                    button type="submit" #retry-selected { "Retry selected" }
                    " "
                    button type="submit" #discard-selected formaction=(state.url("/failed/discard")) { "Discard selected" }
                }
            }
        }
    };
    Ok(render(&page(&state, "Failed", "failed", &body)))
}

/// The ids of a retry / discard form: `only` (one row's button) wins over the checked `id`s.
pub(super) fn form_ids(body: &str) -> Result<(Vec<JobId>, bool), Fail> {
    let mut only = None;
    let mut ids = Vec::new();
    let mut from_job = false;
    for (k, v) in form_urlencoded::parse(body.as_bytes()) {
        let parse = |v: &str| {
            v.parse::<u64>().map(JobId).map_err(|_| {
                Fail(
                    StatusCode::BAD_REQUEST,
                    format!("error: `{v}` is not a job id"),
                )
            })
        };
        match &*k {
            "only" => only = Some(parse(&v)?),
            "id" => ids.push(parse(&v)?),
            "from" => from_job = v == "job",
            _ => {}
        }
    }
    let ids = only.map_or(ids, |id| vec![id]);
    if ids.is_empty() {
        return Err(Fail(
            StatusCode::BAD_REQUEST,
            "error: no job selected; tick the jobs to act on".to_owned(),
        ));
    }
    Ok((ids, from_job))
}

fn after_action(state: &DashState, ids: &[JobId], from_job: bool, msg: &str) -> Response {
    let target = match (from_job, ids) {
        (true, [one]) => state.url(&format!("/jobs/{}", one.0)),
        _ => state.url("/failed"),
    };
    Redirect::to(&format!("{target}?msg={}", enc(msg))).into_response()
}

/// `POST /failed/retry`.
pub(super) async fn failed_retry(State(state): State<Shared>, body: String) -> Res {
    let (ids, from_job) = form_ids(&body)?;
    let r = admin(&state)
        .retry_failed(Selection::Ids(&ids), |_| {})
        .await?;
    let mut msg = format!("retried {}", r.retried);
    if !r.conflicts.is_empty() {
        msg.push_str(&format!(
            "; {} kept: their dedupe key is held by another job",
            r.conflicts.len()
        ));
    }
    if !r.not_failed.is_empty() {
        msg.push_str(&format!("; {} were not failed", r.not_failed.len()));
    }
    Ok(after_action(&state, &ids, from_job, &msg))
}

/// `POST /failed/discard`.
pub(super) async fn failed_discard(State(state): State<Shared>, body: String) -> Res {
    let (ids, _) = form_ids(&body)?;
    if let Some(ask) = confirm_first(&state, "/failed/discard", "Discard", &ids, &body) {
        return Ok(ask);
    }
    let r = admin(&state)
        .discard_failed(Selection::Ids(&ids), |_| {})
        .await?;
    let mut msg = format!("discarded {}", r.discarded);
    if !r.not_failed.is_empty() {
        msg.push_str(&format!("; {} were not failed", r.not_failed.len()));
    }
    Ok(after_action(&state, &ids, false, &msg))
}

/// `GET /static/dashboard.js` (vendored; no build step).
pub(super) async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("../../static/dashboard.js"),
    )
        .into_response()
}

/// `GET /static/live.js`.
pub(super) async fn live_script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("../../static/live.js"),
    )
        .into_response()
}

/// `GET /static/dashboard.css`.
pub(super) async fn stylesheet() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("../../static/dashboard.css"),
    )
        .into_response()
}

/// Anything else.
pub(super) async fn not_found() -> Response {
    Fail(StatusCode::NOT_FOUND, "error: no such page".to_owned()).into_response()
}
