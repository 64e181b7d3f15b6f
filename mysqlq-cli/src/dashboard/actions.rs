//! Cancel and delete (the jobs list and the job page), the confirmation bulk actions show
//! first, and the attempt history and operator actions of the job page.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use mysqlq::JobId;
use mysqlq::admin::{Attempt, AuditRecord, Job, JobSelection, JobState, Timestamp};

use super::pages::{Fail, admin, form_ids};
use super::time::{time, time_or_dash};
use super::view::{csrf, enc, page};
use super::{Shared, State as DashState};

/// `true` for the states an operator can cancel.
pub(super) fn cancellable(state: JobState) -> bool {
    matches!(
        state,
        JobState::Waiting | JobState::Pending | JobState::Processing
    )
}

/// Back to the job page (one job, from there) or the jobs list, with a message.
fn back(state: &DashState, ids: &[JobId], from_job: bool, msg: &str) -> Response {
    let target = match (from_job, ids) {
        (true, [one]) => state.url(&format!("/jobs/{}", one.0)),
        _ => state.url("/jobs"),
    };
    Redirect::to(&format!("{target}?msg={}", enc(msg))).into_response()
}

/// The optional `reason` field of a cancel form.
fn reason(body: &str) -> Option<String> {
    form_urlencoded::parse(body.as_bytes())
        .find(|(k, _)| k == "reason")
        .map(|(_, v)| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// `POST /jobs/cancel`: cancels the waiting or running jobs selected (`only`, or the ticked
/// `id`s), with an optional `reason`.
pub(super) async fn jobs_cancel(
    State(state): State<Shared>,
    body: String,
) -> Result<Response, Fail> {
    let (ids, from_job) = form_ids(&body)?;
    if let Some(ask) = confirm_first(&state, "/jobs/cancel", "Cancel", &ids, &body) {
        return Ok(ask);
    }
    let reason = reason(&body);
    let r = admin(&state)
        .cancel(
            JobSelection::Ids(&ids),
            &super::pages::actor(&state),
            reason.as_deref(),
            |_| {},
        )
        .await?;
    let mut msg = format!("cancelled {}", r.cancelled);
    if !r.running.is_empty() {
        msg.push_str(&format!(
            " ({} running: their workers stop them at the next heartbeat)",
            r.running.len()
        ));
    }
    if !r.not_cancellable.is_empty() {
        msg.push_str(&format!(
            "; {} were not waiting or running",
            r.not_cancellable.len()
        ));
    }
    Ok(back(&state, &ids, from_job, &msg))
}

/// `POST /jobs/delete`: deletes the selected jobs that are not running.
pub(super) async fn jobs_delete(
    State(state): State<Shared>,
    body: String,
) -> Result<Response, Fail> {
    let (ids, _) = form_ids(&body)?;
    if let Some(ask) = confirm_first(&state, "/jobs/delete", "Delete", &ids, &body) {
        return Ok(ask);
    }
    let r = admin(&state).delete(&ids).await?;
    if r.deleted == 0 && !r.running.is_empty() {
        return Err(Fail(
            StatusCode::CONFLICT,
            "error: a running job cannot be deleted; cancel it first".to_owned(),
        ));
    }
    let mut msg = format!("deleted {}", r.deleted);
    if !r.running.is_empty() {
        msg.push_str(&format!(
            "; {} running, not deleted (cancel them first)",
            r.running.len()
        ));
    }
    if !r.unknown.is_empty() {
        msg.push_str(&format!("; {} did not exist", r.unknown.len()));
    }
    // A deleted job has no page to go back to.
    Ok(back(&state, &ids, false, &msg))
}

/// The cancel and delete forms of a job's page.
pub(super) fn job_actions(state: &DashState, j: &Job) -> Markup {
    let id = j.id.0;
    html! {
        @if !state.read_only {
            div.actions {
                @if j.state == JobState::Pending && j.available_at > j.read_at {
                    form method="post" action=(state.url("/jobs/run-now")) {
                        (csrf(state))
                        input type="hidden" name="only" value=(id);
                        button type="submit" #run-now { "Run now" }
                    }
                }
                @if cancellable(j.state) {
                    form method="post" action=(state.url("/jobs/cancel")) {
                        (csrf(state))
                        input type="hidden" name="only" value=(id);
                        input type="hidden" name="from" value="job";
                        label { "reason " input name="reason" maxlength="1024" placeholder="optional"; }
                        " "
                        button type="submit" #cancel { "Cancel job" }
                    }
                }
                @if j.state != JobState::Processing {
                    form method="post" action=(state.url("/jobs/delete")) {
                        (csrf(state))
                        input type="hidden" name="only" value=(id);
                        button type="submit" #delete { "Delete job" }
                    }
                }
            }
        }
    }
}

/// Who cancelled the job, when and why.
pub(super) fn cancel_facts(j: &Job) -> Markup {
    html! {
        @if let Some(by) = &j.cancelled_by {
            dt { "cancelled by" } dd #cancelled-by { (by) }
            dt { "cancelled at" } dd { (time_or_dash(j.cancelled_at.as_ref(), &j.read_at)) }
            dt { "cancel reason" } dd #cancel-reason { (j.cancel_reason.as_deref().unwrap_or("–")) }
        }
    }
}

/// The attempts that did not complete, newest first.
pub(super) fn attempts_table(attempts: &[Attempt], now: &Timestamp) -> Markup {
    html! {
        h2 { "Attempts" }
        @if attempts.is_empty() {
            p.muted #attempts-none { "no failed attempts recorded" }
        } @else {
            table #attempt-history {
                caption { "Attempts that did not complete, newest first" }
                thead { tr {
                    th.num scope="col" { "attempt" } th scope="col" { "outcome" } th scope="col" { "worker" }
                    th scope="col" { "started" } th scope="col" { "ended" } th scope="col" { "error" }
                } }
                tbody {
                    @for a in attempts {
                        tr {
                            td.num { (a.attempt) }
                            td { (a.outcome.as_str()) }
                            td { (a.worker.as_deref().unwrap_or("–")) }
                            td { @match &a.started_at { Some(t) => (time(t, now)), None => "– (worker died)" } }
                            td { (time(&a.finished_at, now)) }
                            td.error {
                                pre { (a.error) }
                                @if a.truncated {
                                    span.muted { "(cut to 8 KiB of " (a.error_bytes) " bytes)" }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A bulk action (more than one job) posted without `confirmed=1`: the page that says how many
/// jobs it would change and posts the same form again, confirmed. `None` when it may go ahead.
pub(super) fn confirm_first(
    state: &DashState,
    path: &str,
    verb: &str,
    ids: &[JobId],
    body: &str,
) -> Option<Response> {
    let confirmed =
        form_urlencoded::parse(body.as_bytes()).any(|(k, v)| k == "confirmed" && v == "1");
    if ids.len() < 2 || confirmed {
        return None;
    }
    let reason = reason(body);
    let what = format!("{verb} {} jobs", ids.len());
    let shown = ids
        .iter()
        .take(50)
        .map(|id| id.0.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let more = ids.len().saturating_sub(50);
    let body = html! {
        h1 { "Confirm: " (what) "?" }
        p #confirm-count { (what) ": " (shown) @if more > 0 { " and " (more) " more" } "." }
        @if let Some(r) = &reason { p { "Reason: " (r) } }
        form method="post" action=(state.url(path)) #confirm-form {
            (csrf(state))
            @for id in ids { input type="hidden" name="id" value=(id.0); }
            @if let Some(r) = &reason { input type="hidden" name="reason" value=(r); }
            input type="hidden" name="confirmed" value="1";
            button type="submit" #confirm { (what) }
            " "
            a href=(state.url(if path.starts_with("/failed") { "/failed" } else { "/jobs" })) { "Back" }
        }
    };
    Some(axum::response::Html(page(state, "Confirm", "", &body).into_string()).into_response())
}

/// The operator actions that changed the job, newest first (the audit trail).
pub(super) fn audit_table(actions: &[AuditRecord], now: &Timestamp) -> Markup {
    html! {
        h2 { "Operator actions" }
        @if actions.is_empty() {
            p.muted #audit-none { "no operator action recorded" }
        } @else {
            table #audit {
                caption { "Operator actions on this job, newest first" }
                thead { tr {
                    th scope="col" { "when" } th scope="col" { "action" } th scope="col" { "by" }
                    th scope="col" { "reason" } th.num scope="col" { "jobs" }
                } }
                tbody {
                    @for a in actions {
                        tr {
                            td { (time(&a.at, now)) }
                            td { (a.action) }
                            td { (a.actor) }
                            td { (a.reason.as_deref().unwrap_or("–")) }
                            td.num { (a.jobs) }
                        }
                    }
                }
            }
        }
    }
}
