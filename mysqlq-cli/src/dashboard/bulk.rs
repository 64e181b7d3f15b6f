//! Acting on many jobs from the dashboard: "all jobs matching this search" or a selection, with
//! a confirmation that shows the exact count first (bound to it by an HMAC, valid 10 minutes,
//! used once), then `Admin::act` in the background with a live progress page and a Stop
//! button (`/actions/{id}`); `/actions` lists the audit trail. Run now for one job.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect};
use hmac::{Hmac, KeyInit, Mac};
use maud::html;
use mysqlq::JobId;
use mysqlq::admin::{Action, AuditQuery, AuditRecord, Counted, Target};
use mysqlq::filter::Filter;
use sha2::Sha256;

use super::guard::current_csrf;
use super::pages::{Fail, Res, actor, admin, render};
use super::time::{db_now, shown, time};
use super::view::{csrf, enc, page};
use super::{Shared, State as DashState};

/// How long a confirmation stays valid.
const CONFIRM_TTL: Duration = Duration::from_secs(600);
/// Jobs listed on a confirmation as a sample.
const SAMPLE: u32 = 20;
/// A running action whose trail has not moved for this long is shown as interrupted.
const STALE: Duration = Duration::from_secs(60);

/// Bulk actions running in this process, by audit id: their stop flags.
#[derive(Debug, Default)]
pub(super) struct Running(Mutex<HashMap<u64, Arc<AtomicBool>>>);

impl Running {
    fn flag(&self, audit: u64) -> Option<Arc<AtomicBool>> {
        self.0.lock().ok()?.get(&audit).cloned()
    }
}

fn bad(msg: impl Into<String>) -> Fail {
    Fail(StatusCode::BAD_REQUEST, format!("error: {}", msg.into()))
}

fn action_of(name: &str) -> Result<Action, Fail> {
    Ok(match name {
        "run_now" => Action::RunNow,
        "retry" => Action::Retry,
        "cancel" => Action::Cancel,
        "delete" => Action::Delete,
        _ => {
            return Err(bad(format!(
                "`{name}` is not an action; one of run_now, retry, cancel, delete"
            )));
        }
    })
}

/// The button's words for an action on `n` jobs.
fn verb(a: Action) -> &'static str {
    match a {
        Action::RunNow => "Run now",
        Action::Retry => "Retry",
        Action::Cancel => "Cancel",
        _ => "Delete",
    }
}

/// `filter` narrowed to the states `action` can change ([`Action::narrow`]).
pub(super) fn narrow(filter: &Filter, action: Action) -> Option<Filter> {
    action.narrow(filter)
}

/// The actions offered for a search: those that can change some of its states.
pub(super) const ACTIONS: [(&str, Action); 4] = [
    ("run_now", Action::RunNow),
    ("retry", Action::Retry),
    ("cancel", Action::Cancel),
    ("delete", Action::Delete),
];

/// The words of an action's button.
pub(super) fn verb_of(a: Action) -> &'static str {
    verb(a)
}

fn field(body: &str, name: &str) -> Option<String> {
    form_urlencoded::parse(body.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// The HMAC that binds a confirmation to its caller, action, search, count, horizon and time.
fn confirm_mac(state: &DashState, action: &str, q: &str, n: u64, h: u64, at: u64) -> String {
    let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(&state.csrf_key) else {
        return String::new();
    };
    let text = format!("confirm:{}:{action}:{q}:{n}:{h}:{at}", current_csrf());
    mac.update(text.as_bytes());
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// POSIX single quotes.
fn sh(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `POST /jobs/confirm`: `action` and `q` (every job the search matches): counts them exactly
/// and shows the count, a sample, the CLI command and the confirm button.
pub(super) async fn confirm(State(state): State<Shared>, body: String) -> Res {
    let name = field(&body, "action").unwrap_or_default();
    let action = action_of(&name)?;
    let q = field(&body, "q").unwrap_or_default();
    let asked = Filter::parse(&q).map_err(|e| bad(e.to_string()))?;
    if asked.is_empty() {
        return Err(bad(
            "acting on every job needs a search; narrow it (a state, a queue, a kind…)",
        ));
    }
    let Some(filter) = narrow(&asked, action) else {
        return Err(bad(format!(
            "{} applies to none of the states searched; search for {} jobs",
            verb(action),
            action
                .states()
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    };
    let admin = admin(&state);
    let counted = admin.count_matching(&filter).await?;
    let sample = admin.search(&filter, None, SAMPLE).await?;
    let canonical = filter.to_string();
    let at = unix_now();
    let mac = confirm_mac(
        &state,
        &name,
        &canonical,
        counted.count,
        counted.horizon,
        at,
    );
    let what = format!("{} {} jobs", verb(action), counted.count);
    let cli = format!(
        "mysqlq-cli jobs {} --filter {} --max {} --by {}",
        name.replace('_', "-"),
        sh(&canonical),
        counted.count,
        sh(&actor(&state))
    );
    let body = html! {
        h1 { "Confirm: " (what) "?" }
        p #confirm-count {
            (verb(action)) " " strong #confirm-n { (counted.count) } " jobs matching "
            code { (canonical) } " (counted now, ids up to " (counted.horizon) "). "
            "At most that many change; a job that no longer matches when its turn comes is left."
        }
        @if counted.count == 0 {
            p.muted { "No job matches: nothing to do. " a href=(format!("{}?q={}", state.url("/jobs"), enc(&canonical))) { "Back to the search" } }
        } @else {
            h2 { "First " (sample.rows.len()) " of them" }
            ul #confirm-sample { @for r in &sample.rows { li { a href=(state.url(&format!("/jobs/{}", r.id.0))) { (r.id.0) } " " (r.state.as_str()) " " (r.kind.as_deref().unwrap_or("–")) } } }
            form method="post" action=(state.url("/jobs/act")) #confirm-form {
                (csrf(&state))
                input type="hidden" name="action" value=(name);
                input type="hidden" name="q" value=(canonical);
                input type="hidden" name="n" value=(counted.count);
                input type="hidden" name="h" value=(counted.horizon);
                input type="hidden" name="at" value=(at);
                input type="hidden" name="confirm" value=(mac);
                label { "Reason (optional) " input type="text" name="reason" maxlength="1024"; }
                " "
                button type="submit" #confirm { (what) }
                " "
                a href=(format!("{}?q={}", state.url("/jobs"), enc(&canonical))) { "Back" }
            }
            p { "The same from a shell: " code #cli-command { (cli) } }
        }
    };
    Ok(render(&page(&state, "Confirm", "jobs", &body)))
}

fn parse_u64(body: &str, name: &str) -> Result<u64, Fail> {
    field(body, name)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| {
            bad(format!(
                "the form lacks `{name}`; confirm again from the jobs page"
            ))
        })
}

/// `POST /jobs/act`: a confirmed action on every job of a search: checks the confirmation,
/// starts `Admin::act` in the background and shows its progress page.
pub(super) async fn act(State(state): State<Shared>, body: String) -> Res {
    let name = field(&body, "action").unwrap_or_default();
    let action = action_of(&name)?;
    let q = field(&body, "q").unwrap_or_default();
    let (n, h, at) = (
        parse_u64(&body, "n")?,
        parse_u64(&body, "h")?,
        parse_u64(&body, "at")?,
    );
    let given = field(&body, "confirm").unwrap_or_default();
    let want = confirm_mac(&state, &name, &q, n, h, at);
    if want.is_empty() || given.len() != want.len() || given != want {
        return Err(Fail(
            StatusCode::FORBIDDEN,
            "forbidden: this confirmation does not match what was counted; confirm again".into(),
        ));
    }
    if unix_now().saturating_sub(at) > CONFIRM_TTL.as_secs() {
        return Err(Fail(
            StatusCode::CONFLICT,
            "error: this confirmation is older than 10 minutes; count again from the jobs page"
                .into(),
        ));
    }
    if !state
        .used_confirms
        .lock()
        .map(|mut used| used.insert(given.clone()))
        .unwrap_or(false)
    {
        return Err(Fail(
            StatusCode::CONFLICT,
            "error: this confirmation was used already; the action is in the audit trail (/actions)"
                .into(),
        ));
    }
    let filter = Filter::parse(&q).map_err(|e| bad(e.to_string()))?;
    let mut admin = admin(&state);
    if let Some(r) = field(&body, "reason").filter(|r| !r.trim().is_empty()) {
        admin = admin.because(r.trim());
    }
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = tokio::sync::oneshot::channel::<u64>();
    let shared = Arc::clone(&state);
    let flag = Arc::clone(&stop);
    tokio::spawn(async move {
        let mut tx = Some(tx);
        let confirmed = Counted {
            count: n,
            horizon: h,
        };
        let target = Target::Matching {
            filter: &filter,
            confirmed,
        };
        let mut audit = None;
        let r = admin
            .act(action, target, Some(&flag), |r| {
                if let Some(tx) = tx.take() {
                    audit = Some(r.audit);
                    if let Ok(mut m) = shared.running.0.lock() {
                        m.insert(r.audit, Arc::clone(&flag));
                    }
                    let _ = tx.send(r.audit);
                }
            })
            .await;
        // A failure is on record: the action's state in the trail is `failed`.
        drop(r);
        if let (Some(a), Ok(mut m)) = (audit, shared.running.0.lock()) {
            m.remove(&a);
        }
    });
    let audit = rx.await.map_err(|_| {
        Fail(
            StatusCode::INTERNAL_SERVER_ERROR,
            "error: the action did not start; see the dashboard's log".into(),
        )
    })?;
    Ok(Redirect::to(&state.url(&format!("/actions/{audit}"))).into_response())
}

/// One action of the trail by id.
async fn record(state: &DashState, id: u64) -> Result<AuditRecord, Fail> {
    admin(state)
        .audit(&AuditQuery {
            before: Some(id.saturating_add(1)),
            limit: 1,
            ..AuditQuery::default()
        })
        .await?
        .into_iter()
        .find(|a| a.id == id)
        .ok_or_else(|| Fail(StatusCode::NOT_FOUND, format!("error: no action {id}")))
}

/// The state of an action as the page says it.
fn state_text(state: &DashState, a: &AuditRecord, now: mysqlq::admin::Timestamp) -> String {
    match a.state.as_deref() {
        Some("running") if state.running.flag(a.id).is_none() => {
            let quiet = a
                .progress_at
                .and_then(|p| (now - p).to_std().ok())
                .unwrap_or_default();
            if quiet > STALE {
                format!(
                    "interrupted (no progress since {})",
                    a.progress_at.map_or_else(String::new, |p| shown(&p))
                )
            } else {
                "running (in another dashboard process)".to_owned()
            }
        }
        Some(s) => s.to_owned(),
        None => "done".to_owned(),
    }
}

/// `GET /actions/{id}`: an action's progress and outcome; refreshes itself while it runs.
pub(super) async fn show(State(state): State<Shared>, Path(id): Path<u64>) -> Res {
    let a = record(&state, id).await?;
    let now = db_now(&state.pool).await?;
    let text = state_text(&state, &a, now);
    let running = state.running.flag(id).is_some();
    let body = html! {
        h1 { "Action " (a.id) ": " (a.action) }
        @if running { noscript { meta http-equiv="refresh" content="2"; } }
        div #action-live data-live {
        dl #action {
            dt { "by" } dd #action-actor { (a.actor) }
            dt { "began" } dd { (time(&a.at, &now)) }
            dt { "what" } dd { (a.detail.as_deref().unwrap_or("–")) }
            @if let Some(r) = &a.reason { dt { "reason" } dd { (r) } }
            dt { "state" } dd #action-state role="status" { (text) }
            dt { "jobs changed" } dd #action-jobs { (a.jobs) @if let Some(e) = a.expected { " of at most " (e) } }
        }
        @if let Some(e) = a.expected.filter(|e| *e > 0) {
            progress #action-progress max=(e) value=(a.jobs.min(e)) aria-label="jobs changed" { (a.jobs) }
        }
        @if running && !state.read_only {
            form method="post" action=(state.url(&format!("/actions/{id}/stop"))) {
                (csrf(&state))
                button type="submit" #stop { "Stop" }
            }
        }
        }
        p { a href=(state.url("/actions")) { "All actions" } }
    };
    Ok(render(&page(&state, "Action", "actions", &body)))
}

/// `POST /actions/{id}/stop`: stops a running action between two chunks.
pub(super) async fn stop(State(state): State<Shared>, Path(id): Path<u64>) -> Res {
    let Some(flag) = state.running.flag(id) else {
        return Err(Fail(
            StatusCode::CONFLICT,
            format!("error: action {id} is not running in this dashboard"),
        ));
    };
    flag.store(true, Ordering::SeqCst);
    Ok(Redirect::to(&state.url(&format!("/actions/{id}"))).into_response())
}

/// `GET /actions`: the audit trail, newest first.
pub(super) async fn list(State(state): State<Shared>) -> Res {
    let actions = admin(&state)
        .audit(&AuditQuery {
            limit: 100,
            ..AuditQuery::default()
        })
        .await?;
    let now = db_now(&state.pool).await?;
    let body = html! {
        h1 { "Actions" }
        table #actions {
            caption.muted { "Operator actions, newest first (the last 100)" }
            thead { tr {
                th.num scope="col" { "id" } th scope="col" { "when" } th scope="col" { "action" }
                th scope="col" { "by" } th scope="col" { "what" } th.num scope="col" { "jobs" } th scope="col" { "state" }
            } }
            tbody {
                @if actions.is_empty() { tr { td colspan="7" .muted { "no operator action recorded" } } }
                @for a in &actions {
                    tr {
                        td.num { a href=(state.url(&format!("/actions/{}", a.id))) { (a.id) } }
                        td { (time(&a.at, &now)) }
                        td { (a.action) }
                        td { (a.actor) }
                        td { (a.detail.as_deref().unwrap_or("–")) }
                        td.num { (a.jobs) @if let Some(e) = a.expected { " / " (e) } }
                        td { (state_text(&state, a, now)) }
                    }
                }
            }
        }
    };
    Ok(render(&page(&state, "Actions", "actions", &body)))
}

/// `POST /jobs/run-now`: one job (`only=`) becomes due now, if it is scheduled or retrying.
pub(super) async fn run_now(State(state): State<Shared>, body: String) -> Res {
    let id: u64 = field(&body, "only")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| bad("no job named; post `only=<id>`"))?;
    let ids = [JobId(id)];
    let r = admin(&state)
        .act(Action::RunNow, Target::Ids(&ids), None, |_| {})
        .await?;
    let msg = if r.changed == 1 {
        "ran now: due at once (keys, limits and a 429 hold still apply)".to_owned()
    } else {
        "not run now: only scheduled and retrying jobs can be".to_owned()
    };
    Ok(Redirect::to(&format!(
        "{}?msg={}",
        state.url(&format!("/jobs/{id}")),
        enc(&msg)
    ))
    .into_response())
}

/// `POST /jobs/selected`: `action` on the ticked `id`s (at most 500): several first get a
/// confirmation naming the count; then `Admin::act` on those ids, and back to the list with
/// what changed and what was left (not in a state the action applies to).
pub(super) async fn selected(State(state): State<Shared>, body: String) -> Res {
    let name = field(&body, "action").unwrap_or_default();
    let action = action_of(&name)?;
    let (ids, _) = super::pages::form_ids(&body)?;
    if ids.len() > mysqlq::admin::MAX_PAGE_ROWS {
        return Err(bad(format!(
            "{} jobs ticked; act on at most {} at once, or on all matching a search",
            ids.len(),
            mysqlq::admin::MAX_PAGE_ROWS
        )));
    }
    let confirmed =
        form_urlencoded::parse(body.as_bytes()).any(|(k, v)| k == "confirmed" && v == "1");
    if ids.len() > 1 && !confirmed {
        let what = format!("{} {} selected jobs", verb(action), ids.len());
        let states = action
            .states()
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let page_body = html! {
            h1 { "Confirm: " (what) "?" }
            p #confirm-count { (what) ": " (ids.iter().map(|i| i.0.to_string()).collect::<Vec<_>>().join(", ")) ". Those not " (states) " when their turn comes are left." }
            form method="post" action=(state.url("/jobs/selected")) #confirm-form {
                (csrf(&state))
                input type="hidden" name="action" value=(name);
                @for id in &ids { input type="hidden" name="id" value=(id.0); }
                input type="hidden" name="confirmed" value="1";
                button type="submit" #confirm { (what) }
                " "
                a href=(state.url("/jobs")) { "Back" }
            }
        };
        return Ok(render(&page(&state, "Confirm", "jobs", &page_body)));
    }
    let r = admin(&state)
        .act(action, Target::Ids(&ids), None, |_| {})
        .await?;
    let msg = format!(
        "{}: {} changed, {} left (not in a state {} applies to)",
        verb(action),
        r.changed,
        r.left,
        verb(action).to_lowercase()
    );
    Ok(Redirect::to(&format!("{}?msg={}", state.url("/jobs"), enc(&msg))).into_response())
}
