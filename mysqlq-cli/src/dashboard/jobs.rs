//! `GET /jobs`: the job search (`?q=`, syntax in `mysqlq::filter`), state tabs, keyset pages in
//! the order of the index the states choose, and a notice when a page reached its read cap.
//! The old `?state=&queue=&kind=` links still work: they are read as the equivalent search.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use maud::{Markup, html};
use std::collections::HashMap;

use mysqlq::admin::{Capped, Cursor, OpState, QueueStates, SearchPage, SearchRow, Timestamp, Walk};
use mysqlq::filter::Filter;
use serde::Deserialize;

use super::actions::cancellable;
use super::bulk;
use super::pages::{Res, admin, render};
use super::time::time_or_dash;
use super::view::{csrf, enc, notice, page};
use super::{Shared, State as DashState};

/// Jobs per page.
const JOBS_PAGE: u32 = 50;

/// The tabs above the list: a label and the search it stands for.
const TABS: [(&str, &str); 10] = [
    ("all", ""),
    ("ready", "state:ready"),
    ("rate-limited", "state:rate-limited"),
    ("scheduled", "state:scheduled"),
    ("retrying", "state:retrying"),
    ("waiting", "state:waiting"),
    ("running", "state:running"),
    ("completed", "state:completed"),
    ("failed", "state:failed"),
    ("cancelled", "state:cancelled"),
];

/// `GET /jobs` parameters.
#[derive(Debug, Default, Deserialize)]
pub(super) struct JobsQuery {
    q: Option<String>,
    c: Option<String>,
    state: Option<String>,
    queue: Option<String>,
    kind: Option<String>,
    msg: Option<String>,
}

/// Quotes a value for the search syntax when it needs it.
fn quoted(v: &str) -> String {
    if !v.is_empty()
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':' | b'/'))
    {
        v.to_owned()
    } else {
        format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""))
    }
}

/// The search text of a request: `q`, or the old `state`/`queue`/`kind` parameters.
fn search_text(q: &JobsQuery) -> String {
    if let Some(text) = q.q.as_deref() {
        return text.trim().to_owned();
    }
    let mut terms = Vec::new();
    for (name, v) in [("state", &q.state), ("queue", &q.queue), ("kind", &q.kind)] {
        if let Some(v) = v.as_deref().map(str::trim).filter(|v| !v.is_empty()) {
            terms.push(format!("{name}:{}", quoted(v)));
        }
    }
    terms.join(" ")
}

/// The column a walk orders by, as the list shows it.
fn time_column(walk: Walk) -> &'static str {
    match walk {
        Walk::Due => "due",
        Walk::Finished => "finished",
        _ => "created",
    }
}

/// A row's time in the walk's column, relative to the page's database clock.
fn time_of(walk: Walk, r: &SearchRow, now: &Timestamp) -> Markup {
    let t = match walk {
        Walk::Due => Some(&r.available_at),
        Walk::Finished => r.finished_at.as_ref(),
        _ => Some(&r.created_at),
    };
    time_or_dash(t, now)
}

/// A payload's first 80 characters.
fn head(text: &str) -> String {
    let mut out: String = text.chars().take(80).collect();
    if text.chars().nth(80).is_some() {
        out.push('…');
    }
    out
}

/// Jobs per operator state over the queues a search names (all when it names none): the
/// unfinished states exactly and failed up to 100,000; completed and cancelled are not counted
/// (a refreshing page cannot afford to count a million finished rows).
fn tab_counts(counts: &[QueueStates], filter: Option<&Filter>) -> HashMap<OpState, Capped> {
    let mut out: HashMap<OpState, Capped> = HashMap::new();
    let wanted =
        |q: &str| filter.is_none_or(|f| f.queues.is_empty() || f.queues.iter().any(|w| w == q));
    for q in counts.iter().filter(|q| wanted(&q.queue)) {
        for st in OpState::ALL {
            if let Some(c) = q
                .states
                .get(st)
                .filter(|_| st != OpState::Completed && st != OpState::Cancelled)
            {
                let e = out.entry(st).or_insert(Capped::exact(0));
                *e = Capped {
                    n: e.n + c.n,
                    capped: e.capped || c.capped,
                };
            }
        }
    }
    out
}

/// The search form and its syntax help.
fn search_form(state: &DashState, text: &str) -> Markup {
    html! {
        form.filters role="search" method="get" action=(state.url("/jobs")) {
            label for="q" { "Search jobs" }
            input #q type="search" name="q" value=(text) size="60"
                placeholder="state:retrying kind:send_email args.order_id:42";
            button type="submit" { "Search" }
        }
        details.syntax {
            summary { "Search syntax" }
            table {
                caption { "Qualifiers (terms are ANDed; comma-separated values are ORed)" }
                thead { tr { th scope="col" { "term" } th scope="col" { "matches" } } }
                tbody {
                    tr { td { code { "42" } " or " code { "id:42,43" } } td { "job ids" } }
                    tr { td { code { "state:retrying,failed" } } td { "ready, rate-limited, scheduled, retrying, waiting, running, completed, failed, cancelled; pending, processing" } }
                    tr { td { code { "queue:emails" } " " code { "kind:send_email" } } td { "queue, kind" } }
                    tr { td { code { "args.order_id:42" } " " code { "meta.tenant:acme" } } td { "a payload or meta value (exact, case-sensitive); " code { "args.x:*" } " tests that it exists" } }
                    tr { td { code { "worker:host-1" } " " code { "workflow:7" } } td { "the worker holding it, its workflow" } }
                    tr { td { code { "error:timeout" } } td { "a substring of the last error" } }
                    tr { td { code { "priority:>0" } " " code { "attempts:2..5" } } td { "number ranges" } }
                    tr { td { code { "created:>2h" } " " code { "finished:2026-12-01..2026-12-02" } " " code { "due:<30m" } } td { "time ranges (UTC); " code { ">2h" } " is after two hours ago" } }
                }
            }
        }
    }
}

/// The state tabs, with their counts.
fn search_tabs(
    state: &DashState,
    filter: Option<&Filter>,
    counts: &HashMap<OpState, Capped>,
) -> Markup {
    let current = filter.map(ToString::to_string).unwrap_or_default();
    html! {
        nav.tabs aria-label="States" {
            @for (label, q) in TABS {
                @let n = label.parse::<OpState>().ok().and_then(|s| counts.get(&s));
                a href=(format!("{}?q={}", state.url("/jobs"), enc(q)))
                    aria-current=[(q == current).then_some("page")] {
                    (label) @if let Some(n) = n { " " span.count data-state=(label) { (n) } }
                }
            }
        }
    }
}

/// The notice of a page that stopped at its read cap.
fn window_notice(page_: &SearchPage) -> Markup {
    html! {
        @if let Some(w) = page_.window {
            p.notice role="status" #window {
                @if w.rows {
                    "Searched the next " (w.read) " jobs of this walk (payload, meta, worker, error \
                     and state filters read each row): " (page_.rows.len()) " match. "
                } @else {
                    "Searched the next " (w.read) " index entries of this walk: "
                    (page_.rows.len()) " match. "
                }
                "More may match further on; the link below searches on. Narrow the search with a \
                 state, a queue or kind, or a time range to read less."
            }
        }
    }
}

/// The table of a page's jobs, with the cancel controls when actions are on.
fn jobs_table(state: &DashState, page_: &SearchPage, actions: bool) -> Markup {
    let walk = page_.walk;
    html! {
        table #jobs data-live {
            caption.muted { "Jobs, " (match walk { Walk::Due => "due first", Walk::Finished => "newest finished first", _ => "newest first" }) }
            thead { tr {
                @if actions { th scope="col" { "select" } }
                th.num scope="col" { "id" } th scope="col" { "state" } th scope="col" { "queue" }
                th scope="col" { "kind" } th.num scope="col" { "attempts" }
                th scope="col" { (time_column(walk)) } th scope="col" { "args" }
                @if actions { th scope="col" { "action" } }
            } }
            tbody {
                @if page_.rows.is_empty() { tr { td colspan="9" .muted { "no jobs here" } } }
                @for j in &page_.rows {
                    tr data-id=(j.id.0) data-state=(j.state) {
                        @if actions {
                            td { input type="checkbox" name="id" value=(j.id.0) aria-label=(format!("select job {}", j.id.0)); }
                        }
                        td.num { a href=(state.url(&format!("/jobs/{}", j.id.0))) { (j.id.0) } }
                        td { span class=(format!("state {}", j.state)) { (j.state.as_str()) } }
                        td { (j.queue) }
                        td { (j.kind.as_deref().unwrap_or("–")) }
                        td.num { (j.attempts) "/" (j.max_attempts) }
                        td { (time_of(walk, j, &page_.now)) }
                        td { code.args { (head(&j.payload_head)) } }
                        @if actions {
                            td { @if cancellable(j.status) {
                                button type="submit" name="only" value=(j.id.0) class="cancel-one" { "Cancel" }
                            } }
                        }
                    }
                }
            }
        }
    }
}

/// `GET /jobs`: the search page.
pub(super) async fn jobs(State(state): State<Shared>, Query(q): Query<JobsQuery>) -> Res {
    let text = search_text(&q);
    let filter = match Filter::parse(&text) {
        Ok(f) => f,
        Err(e) => {
            let body = html! {
                h1 { "Jobs" }
                (search_form(&state, &text))
                (search_tabs(&state, None, &HashMap::new()))
                p.error role="alert" #search-error { (e.to_string()) }
            };
            return Ok((
                StatusCode::BAD_REQUEST,
                render(&page(&state, "Jobs", "jobs", &body)),
            )
                .into_response());
        }
    };
    let cursor = match q.c.as_deref().filter(|c| !c.is_empty()) {
        None => None,
        Some(c) => Some(c.parse::<Cursor>()?),
    };
    let page_ = admin(&state).search(&filter, cursor, JOBS_PAGE).await?;
    let counts = tab_counts(&admin(&state).open_state_counts().await?, Some(&filter));
    let canonical = filter.to_string();
    let next = page_.next.map(|c| {
        format!(
            "{}?q={}&c={}",
            state.url("/jobs"),
            enc(&canonical),
            enc(&c.to_string())
        )
    });
    let actions = !state.read_only;
    let cancellable_here = page_.rows.iter().any(|j| cancellable(j.status));
    let body = html! {
        h1 { "Jobs" }
        (notice(q.msg.as_deref()))
        (search_form(&state, &text))
        div #jobs-tabs data-live { (search_tabs(&state, Some(&filter), &counts)) }
        div #jobs-window data-live { (window_notice(&page_)) }
        form method="post" action=(state.url("/jobs/cancel")) #jobs-form {
            @if actions { (csrf(&state)) }
            (jobs_table(&state, &page_, actions))
            @if actions && !page_.rows.is_empty() {
                p.actions {
                    @if cancellable_here { button type="submit" #cancel-selected { "Cancel selected" } " " }
                    @for (name, a) in bulk::ACTIONS {
                        @if name != "cancel" {
                            button type="submit" formaction=(state.url("/jobs/selected")) name="action" value=(name) id=(format!("selected-{name}")) {
                                (bulk::verb_of(a)) " selected"
                            }
                            " "
                        }
                    }
                }
            }
        }
        @if actions && !filter.is_empty() {
            form.bulk method="post" action=(state.url("/jobs/confirm")) #bulk-form {
                (csrf(&state))
                input type="hidden" name="q" value=(canonical);
                span { "Every job matching this search: " }
                @for (name, a) in bulk::ACTIONS {
                    @if bulk::narrow(&filter, a).is_some() {
                        button type="submit" name="action" value=(name) id=(format!("all-{name}")) {
                            (bulk::verb_of(a)) " all matching…"
                        }
                        " "
                    }
                }
            }
        }
        div #jobs-next data-live {
            @if let Some(n) = &next {
                p { a #next href=(n) { (match page_.walk { Walk::Due => "Due later →", _ => "Older →" }) } }
            }
        }
    };
    Ok(render(&page(&state, "Jobs", "jobs", &body)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_parameters_read_as_the_equivalent_search() {
        let q = JobsQuery {
            state: Some("pending".into()),
            queue: Some("my queue".into()),
            kind: Some(String::new()),
            ..JobsQuery::default()
        };
        let text = search_text(&q);
        assert_eq!(text, "state:pending queue:\"my queue\"");
        let f = Filter::parse(&text).unwrap();
        assert_eq!(f.queues, ["my queue"]);
        assert_eq!(f.states.len(), 4);
        assert!(OpState::named("pending").is_ok());
    }
}
