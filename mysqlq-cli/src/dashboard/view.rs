//! The page layout and shared pieces (compiled `maud` templates: every value is escaped).

use maud::{DOCTYPE, Markup, html};
use mysqlq::admin::{MinutePoint, QueueStats};

use super::State;
use super::guard::{CSRF_FIELD, current_csrf};

/// The whole page around `body`.
pub(super) fn page(state: &State, title: &str, active: &str, body: &Markup) -> Markup {
    let nav = [
        ("overview", "/", "Overview"),
        ("jobs", "/jobs", "Jobs"),
        ("failed", "/failed", "Failed"),
        ("queues", "/queues", "Queues"),
        ("workflows", "/workflows", "Workflows"),
        ("workers", "/workers", "Workers"),
        ("actions", "/actions", "Actions"),
    ];
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · mysqlq" }
                link rel="stylesheet" href=(state.url("/static/dashboard.css"));
                script src=(state.url("/static/dashboard.js")) defer {}
            }
            body data-api=(state.url("/api/overview")) {
                header {
                    strong.brand { "mysqlq" }
                    nav {
                        @for (key, path, label) in nav {
                            a href=(state.url(path)) class=[(key == active).then_some("active")] { (label) }
                        }
                    }
                    @if state.read_only { span.badge { "read-only" } }
                    span #live.muted {}
                }
                main { (body) }
            }
        }
    }
}

/// The hidden CSRF field of every form: the token of the session being answered.
pub(super) fn csrf(_state: &State) -> Markup {
    html! { input type="hidden" name=(CSRF_FIELD) value=(current_csrf()); }
}

/// A notice from the last action (`?msg=`).
pub(super) fn notice(msg: Option<&str>) -> Markup {
    html! { @if let Some(m) = msg { p.notice role="status" { (m) } } }
}

/// Seconds as `1h 2m`, `3m 4s`, `5s`.
pub(super) fn age(secs: Option<i64>) -> String {
    match secs {
        None => "–".to_owned(),
        Some(s) if s < 60 => format!("{s}s"),
        Some(s) if s < 3600 => format!("{}m {}s", s / 60, s % 60),
        Some(s) => format!("{}h {}m", s / 3600, (s % 3600) / 60),
    }
}

/// The per-queue table; cells carry `data-q`/`data-f` so the script can refresh them.
pub(super) fn queue_table(state: &State, queues: &[QueueStats], actions: bool) -> Markup {
    html! {
        table #queues {
            thead { tr {
                th { "queue" } th.num { "ready" } th.num { "running" } th.num { "scheduled" }
                th.num { "failed" } th.num { "oldest ready" }
                th.num title="ready, but waiting for a rate limit, a global limit or a 429 hold" { "rate-limited" }
                th { "state" }
                @if actions { th { "action" } }
            } }
            tbody {
                @if queues.is_empty() { tr { td colspan="9" .muted { "no queues yet" } } }
                @for q in queues {
                    tr data-queue=(q.queue) {
                        td { a href=(format!("{}?queue={}", state.url("/jobs"), enc(&q.queue))) { (q.queue) } }
                        td.num data-q=(q.queue) data-f="ready" { (q.ready) }
                        td.num data-q=(q.queue) data-f="processing" { (q.processing) }
                        td.num data-q=(q.queue) data-f="scheduled" { (q.scheduled) }
                        td.num data-q=(q.queue) data-f="failed" { (q.failed) }
                        td.num data-q=(q.queue) data-f="oldest" { (age(q.oldest_ready_age_seconds)) }
                        td.num data-q=(q.queue) data-f="rate_limited" { (q.rate_limited) }
                        td data-q=(q.queue) data-f="paused" { (if q.paused { "paused" } else { "running" }) }
                        @if actions {
                            td {
                                @let (path, label) = if q.paused { ("/queues/resume", "Resume") } else { ("/queues/pause", "Pause") };
                                form method="post" action=(state.url(path)) {
                                    (csrf(state))
                                    input type="hidden" name="queue" value=(q.queue);
                                    button type="submit" name="do" value=(label.to_lowercase()) { (label) " " (q.queue) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Percent-encodes a query value.
pub(super) fn enc(v: &str) -> String {
    form_urlencoded::byte_serialize(v.as_bytes()).collect()
}

/// Completions (green) and failures (red) per minute over the last hour, as inline SVG.
pub(super) fn chart(points: &[MinutePoint]) -> Markup {
    let mut done = [0u64; 60];
    let mut failed = [0u64; 60];
    for p in points {
        let i = 59 - usize::try_from(p.minutes_ago.min(59)).unwrap_or(59);
        done[i] += p.completions;
        failed[i] += p.failures;
    }
    let max = done
        .iter()
        .chain(&failed)
        .copied()
        .max()
        .unwrap_or(0)
        .max(1);
    let (w, h, left, top) = (600u32, 120u32, 40u32, 10u32);
    let line = |series: &[u64; 60]| -> String {
        let mut s = String::new();
        for (i, v) in series.iter().enumerate() {
            let x = u64::from(left) + u64::try_from(i).unwrap_or(0) * u64::from(w - left) / 59;
            let y = u64::from(top) + (u64::from(h - top) * (max - (*v).min(max))) / max;
            s.push_str(&format!("{x},{y} "));
        }
        s
    };
    let total_done: u64 = done.iter().sum();
    let total_failed: u64 = failed.iter().sum();
    html! {
        figure.chart {
            svg viewBox=(format!("0 0 {} {}", w + 5, h + 20)) role="img"
                aria-label=(format!("completions and failures per minute over the last hour: {total_done} completed, {total_failed} failed")) {
                line x1=(left) y1=(h) x2=(w) y2=(h) stroke="#999" {}
                line x1=(left) y1=(top) x2=(left) y2=(h) stroke="#999" {}
                text x="2" y=(top + 8) font-size="10" fill="#555" { (max) }
                text x="2" y=(h) font-size="10" fill="#555" { "0" }
                text x=(left) y=(h + 14) font-size="10" fill="#555" { "-60 min" }
                text x=(w - 20) y=(h + 14) font-size="10" fill="#555" { "now" }
                polyline points=(line(&done)) fill="none" stroke="#2a8a3e" stroke-width="2" {}
                polyline points=(line(&failed)) fill="none" stroke="#c0392b" stroke-width="2" {}
            }
            figcaption {
                span.ok { "■ completed " (total_done) } " · " span.bad { "■ failed " (total_failed) }
                " per minute, last hour (refreshes on reload)"
            }
        }
    }
}
