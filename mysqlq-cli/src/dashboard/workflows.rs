//! Workflows and batches: the list, and one workflow's page with its graph drawn as SVG (a
//! column per depth, each step a link to its job, coloured by state), its steps, and cancel /
//! retry of the whole workflow.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect};
use maud::{Markup, html};
use mysqlq::admin::{WorkflowDetail, WorkflowQuery, WorkflowStep};
use serde::Deserialize;

use super::pages::{Fail, Res, admin, render};
use super::time::{db_now, time};
use super::view::{csrf, enc, notice, page};
use super::{Shared, State as DashState, cli_cmd};

/// Workflows per page of the list.
const PAGE: u32 = 50;
/// Steps of one fan-out name drawn one by one; more are drawn as one node with their counts.
const FAN_NODES: usize = 12;

#[derive(Debug, Deserialize)]
pub(super) struct ListQuery {
    state: Option<String>,
    before: Option<u64>,
    msg: Option<String>,
}

/// `GET /workflows`: newest first, keyset pages (`?before=`), `?state=`.
pub(super) async fn list(State(state): State<Shared>, Query(q): Query<ListQuery>) -> Res {
    let filter = q.state.as_deref().filter(|s| !s.is_empty());
    let rows = admin(&state)
        .workflows(&WorkflowQuery {
            state: filter,
            before: q.before,
            limit: PAGE,
            ..WorkflowQuery::default()
        })
        .await?;
    let now = db_now(&state.pool).await?;
    let body = html! {
        h1 { "Workflows and batches" }
        (notice(q.msg.as_deref()))
        form method="get" action=(state.url("/workflows")) {
            label { "state " select name="state" {
                option value="" { "any" }
                @for s in ["running", "completed", "failed", "cancelled"] {
                    option value=(s) selected[filter == Some(s)] { (s) }
                }
            } }
            " " button type="submit" { "Filter" }
        }
        table #workflows {
            caption { "Workflows and batches, newest first" }
            thead { tr {
                th.num scope="col" { "id" } th scope="col" { "kind" } th scope="col" { "name" }
                th scope="col" { "state" } th scope="col" { "created" }
                th.num scope="col" { "steps" } th scope="col" { "by state" }
            } }
            tbody {
                @if rows.is_empty() { tr { td colspan="7" .muted { "no workflows" } } }
                @for w in &rows {
                    tr {
                        td.num { a href=(state.url(&format!("/workflows/{}", w.id))) { (w.id) } }
                        td { (w.kind) }
                        td { (w.name) }
                        td { span class=(format!("state {}", w.state)) { (w.state) } }
                        td { (time(&w.created_at, &now)) }
                        td.num { (w.steps.total()) }
                        td { (counts(&w.steps)) }
                    }
                }
            }
        }
        @if rows.len() == PAGE as usize {
            @if let Some(last) = rows.last() {
                p { a href=(format!("{}?before={}&state={}", state.url("/workflows"), last.id, enc(filter.unwrap_or("")))) { "older →" } }
            }
        }
    };
    Ok(render(&page(&state, "Workflows", "workflows", &body)))
}

fn counts(c: &mysqlq::admin::StepCounts) -> String {
    c.summary()
}

#[derive(Debug, Deserialize)]
pub(super) struct MsgQuery {
    msg: Option<String>,
}

/// `GET /workflows/{id}`.
pub(super) async fn show(
    State(state): State<Shared>,
    Path(id): Path<u64>,
    Query(q): Query<MsgQuery>,
) -> Res {
    let Some(d) = admin(&state).workflow(id).await? else {
        return Err(Fail(
            StatusCode::NOT_FOUND,
            format!("error: no workflow {id}"),
        ));
    };
    let w = &d.workflow;
    let names = step_names(&d);
    let open = w.steps.waiting + w.steps.pending + w.steps.processing;
    let body = html! {
        h1 { (w.kind) " " (id) " “" (w.name) "” " span class=(format!("state {}", w.state)) { (w.state) } }
        (notice(q.msg.as_deref()))
        p { (w.steps.total()) " steps: " (counts(&w.steps)) }
        (graph(&state, &d))
        @if !state.read_only {
            div.actions {
                @if open > 0 {
                    form method="post" action=(state.url(&format!("/workflows/{id}/cancel"))) {
                        (csrf(&state))
                        label { "reason " input type="text" name="reason" maxlength="1024" placeholder="optional"; }
                        " "
                        button type="submit" { "Cancel " (open) " open steps" }
                    }
                }
                @if w.steps.failed > 0 {
                    form method="post" action=(state.url(&format!("/workflows/{id}/retry"))) {
                        (csrf(&state))
                        button type="submit" { "Retry " (w.steps.failed) " failed steps" }
                    }
                }
            }
            (cli_cmd::block(&cli_cmd::workflow(id, open, w.steps.failed, &state.user)))
        }
        h2 { "Steps" }
        table #steps {
            caption { "The workflow's steps" }
            thead { tr {
                th scope="col" { "step" } th.num scope="col" { "job" } th scope="col" { "kind" }
                th scope="col" { "state" } th.num scope="col" { "attempts" } th scope="col" { "after" }
                th scope="col" { "note" }
            } }
            tbody {
                @for s in &d.steps {
                    tr {
                        td { (names[&s.job.0]) }
                        td.num { a href=(state.url(&format!("/jobs/{}", s.job.0))) { (s.job.0) } }
                        td { (s.kind.as_deref().unwrap_or("–")) }
                        td { span class=(format!("state {}", s.state)) { (s.state) } }
                        td.num { (s.attempts) "/" (s.max_attempts) }
                        td { @for (i, (dep, edge)) in s.deps.iter().enumerate() {
                            @if i > 0 { ", " }
                            (names.get(&dep.0).cloned().unwrap_or_else(|| dep.to_string()))
                            @if edge == "broken" { " (broken)" }
                        } }
                        td { (note(s)) }
                    }
                }
            }
        }
    };
    Ok(render(&page(
        &state,
        &format!("Workflow {id}"),
        "workflows",
        &body,
    )))
}

fn note(s: &WorkflowStep) -> String {
    let mut n: Vec<String> = Vec::new();
    if s.ignore_failed {
        n.push("ignores failed".to_owned());
    }
    if s.ignore_cancelled {
        n.push("ignores cancelled".to_owned());
    }
    if let Some(r) = &s.cancel_reason {
        n.push(r.clone());
    }
    n.join("; ")
}

/// `name`, or `name#ordinal` for a step of a fan-out.
fn step_names(d: &WorkflowDetail) -> HashMap<u64, String> {
    let mut per_name: HashMap<&str, usize> = HashMap::new();
    for s in &d.steps {
        *per_name.entry(s.name.as_str()).or_default() += 1;
    }
    d.steps
        .iter()
        .map(|s| {
            let n = if per_name[s.name.as_str()] > 1 {
                format!("{}#{}", s.name, s.ordinal)
            } else {
                s.name.clone()
            };
            (s.job.0, n)
        })
        .collect()
}

/// One drawn node: a step, or a fan-out's steps collapsed into one.
struct Node {
    label: String,
    job: u64,
    state: String,
    depth: usize,
    deps: Vec<usize>,
}

/// The graph: steps in columns by their longest path from a root, edges as lines (broken ones
/// dashed red). A name with more than [`FAN_NODES`] steps is one node showing its counts.
fn graph(state: &DashState, d: &WorkflowDetail) -> Markup {
    let names = step_names(d);
    let mut per_name: HashMap<&str, Vec<&WorkflowStep>> = HashMap::new();
    for s in &d.steps {
        per_name.entry(s.name.as_str()).or_default().push(s);
    }
    // Node of each job.
    let mut nodes: Vec<Node> = Vec::new();
    let mut node_of: HashMap<u64, usize> = HashMap::new();
    let mut by_id: Vec<&WorkflowStep> = d.steps.iter().collect();
    by_id.sort_by_key(|s| s.job.0);
    for s in &by_id {
        if node_of.contains_key(&s.job.0) {
            continue;
        }
        let group = &per_name[s.name.as_str()];
        if group.len() > FAN_NODES {
            let mut states: HashMap<&str, usize> = HashMap::new();
            for g in group {
                *states.entry(g.state.as_str()).or_default() += 1;
            }
            let mut summary: Vec<String> = states.iter().map(|(k, v)| format!("{k} {v}")).collect();
            summary.sort();
            let worst = [
                "failed",
                "processing",
                "pending",
                "waiting",
                "cancelled",
                "completed",
            ]
            .into_iter()
            .find(|k| states.contains_key(k))
            .unwrap_or("completed");
            let i = nodes.len();
            nodes.push(Node {
                label: format!("{} ×{} ({})", s.name, group.len(), summary.join(", ")),
                job: s.job.0,
                state: worst.to_owned(),
                depth: 0,
                deps: Vec::new(),
            });
            for g in group {
                node_of.insert(g.job.0, i);
            }
        } else {
            node_of.insert(s.job.0, nodes.len());
            nodes.push(Node {
                label: names[&s.job.0].clone(),
                job: s.job.0,
                state: s.state.clone(),
                depth: 0,
                deps: Vec::new(),
            });
        }
    }
    let mut broken: Vec<(usize, usize)> = Vec::new();
    for s in &d.steps {
        let to = node_of[&s.job.0];
        for (dep, edge) in &s.deps {
            if let Some(&from) = node_of.get(&dep.0)
                && from != to
                && !nodes[to].deps.contains(&from)
            {
                nodes[to].deps.push(from);
                if edge == "broken" {
                    broken.push((from, to));
                }
            }
        }
    }
    // Depth: longest path from a root (dependencies have lower ids, so one pass in id order).
    let mut order: Vec<usize> = (0..nodes.len()).collect();
    order.sort_by_key(|&i| nodes[i].job);
    for &i in &order {
        let depth = nodes[i]
            .deps
            .iter()
            .map(|&p| nodes[p].depth + 1)
            .max()
            .unwrap_or(0);
        nodes[i].depth = depth;
    }
    let columns = nodes.iter().map(|n| n.depth).max().map_or(0, |m| m + 1);
    let mut rows_in: Vec<usize> = vec![0; columns];
    let mut pos: Vec<(u32, u32)> = vec![(0, 0); nodes.len()];
    let (nw, nh, gx, gy, pad) = (170u32, 34u32, 60u32, 14u32, 10u32);
    for &i in &order {
        let c = nodes[i].depth;
        let r = rows_in[c];
        rows_in[c] += 1;
        let x = pad + u32::try_from(c).unwrap_or(0) * (nw + gx);
        let y = pad + u32::try_from(r).unwrap_or(0) * (nh + gy);
        pos[i] = (x, y);
    }
    let height = pad * 2
        + u32::try_from(rows_in.iter().copied().max().unwrap_or(1)).unwrap_or(1) * (nh + gy);
    let width = pad * 2 + u32::try_from(columns.max(1)).unwrap_or(1) * (nw + gx);
    html! {
        figure.graph {
            svg #workflow-graph viewBox=(format!("0 0 {width} {height}")) width=(width) height=(height) role="group"
                aria-label=(format!("the workflow's {} steps and their dependencies (the steps' table below lists them)", d.steps.len())) {
                @for (to, n) in nodes.iter().enumerate() {
                    @for &from in &n.deps {
                        @let (x1, y1) = (pos[from].0 + nw, pos[from].1 + nh / 2);
                        @let (x2, y2) = (pos[to].0, pos[to].1 + nh / 2);
                        @if broken.contains(&(from, to)) {
                            line x1=(x1) y1=(y1) x2=(x2) y2=(y2) class="edge broken" {}
                        } @else {
                            line x1=(x1) y1=(y1) x2=(x2) y2=(y2) class="edge" {}
                        }
                    }
                }
                @for (i, n) in nodes.iter().enumerate() {
                    a href=(state.url(&format!("/jobs/{}", n.job))) class="step" {
                        rect x=(pos[i].0) y=(pos[i].1) width=(nw) height=(nh) rx="5"
                            class=(format!("node {}", n.state)) data-state=(n.state) {}
                        text x=(pos[i].0 + 8) y=(pos[i].1 + 21) class=(format!("label {}", n.state)) {
                            (truncate(&n.label, 26))
                        }
                        title { (n.label) " — " (n.state) }
                    }
                }
            }
            figcaption {
                "Each step is a link to its job, coloured by its state: "
                @for s in ["waiting", "pending", "processing", "completed", "failed", "cancelled"] {
                    span class=(format!("state {s}")) { (s) } " "
                }
                "· a dashed line: the dependency whose failure cancelled a step."
            }
        }
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(n - 1).collect::<String>())
    }
}

fn reason(body: &str) -> Option<String> {
    form_urlencoded::parse(body.as_bytes())
        .find(|(k, _)| k == "reason")
        .map(|(_, v)| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// `POST /workflows/{id}/cancel`: every open step, recorded under the dashboard's user.
pub(super) async fn cancel(State(state): State<Shared>, Path(id): Path<u64>, body: String) -> Res {
    let reason = reason(&body);
    let r = admin(&state)
        .cancel_workflow(id, &super::pages::actor(&state), reason.as_deref())
        .await?;
    let msg = format!("cancelled {} steps", r.cancelled);
    Ok(Redirect::to(&format!(
        "{}?msg={}",
        state.url(&format!("/workflows/{id}")),
        enc(&msg)
    ))
    .into_response())
}

/// `POST /workflows/{id}/retry`: the failed steps; the steps they cancelled wait again.
pub(super) async fn retry(State(state): State<Shared>, Path(id): Path<u64>) -> Res {
    let r = admin(&state).retry_workflow(id).await?;
    let mut msg = format!(
        "retried {} failed steps; {} cancelled steps wait again",
        r.retried, r.revived
    );
    if !r.not_revived.is_empty() {
        msg.push_str(&format!(
            "; {} stay cancelled (their dedupe key is held by another job)",
            r.not_revived.len()
        ));
    }
    Ok(Redirect::to(&format!(
        "{}?msg={}",
        state.url(&format!("/workflows/{id}")),
        enc(&msg)
    ))
    .into_response())
}
