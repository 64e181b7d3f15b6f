//! The page layout and shared pieces (compiled `maud` templates: every value is escaped).

use maud::{DOCTYPE, Markup, html};
use mysqlq::admin::{MinutePoint, QueueStats};

use super::State;
use super::guard::{CSRF_FIELD, current_csrf};

/// The whole page around `body`: a skip link, the header with the main navigation, one
/// `<main id="content">`, and the keyboard shortcuts' help dialog (opened by the script).
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
                meta name="color-scheme" content="light dark";
                title { (title) " · mysqlq" }
                link rel="stylesheet" href=(state.url("/static/dashboard.css"));
                script src=(state.url("/static/dashboard.js")) defer {}
                script src=(state.url("/static/live.js")) defer {}
            }
            body data-api=(state.url("/api/overview")) {
                a.skip href="#content" { "Skip to content" }
                header {
                    strong.brand { "mysqlq" }
                    nav aria-label="Main" {
                        @for (key, path, label) in nav {
                            a href=(state.url(path)) class=[(key == active).then_some("active")]
                                aria-current=[(key == active).then_some("page")] { (label) }
                        }
                    }
                    @if state.read_only { span.badge { "read-only" } }
                    span #live {}
                    span #live-status role="status" aria-live="polite" {}
                    button #live-pause type="button" aria-pressed="false" hidden { "Pause live" }
                    button #kbd-open type="button" hidden aria-label="Keyboard shortcuts" aria-haspopup="dialog" { "?" }
                    noscript { span.muted { "static page — refresh: " a href="?" { "off" } " · " a href="?refresh=5" { "5 s" } " · " a href="?refresh=30" { "30 s" } } }
                }
                main #content { (body) }
                (shortcuts_help())
            }
        }
    }
}

/// The shortcuts `static/dashboard.js` handles, in a dialog it opens on `?`.
fn shortcuts_help() -> Markup {
    let keys = [
        ("/", "search jobs (on the jobs page)"),
        ("j", "next row of the jobs list"),
        ("k", "previous row"),
        ("x", "select or unselect the row"),
        ("Enter", "open the row's job"),
        ("?", "this help"),
    ];
    html! {
        dialog #kbd-help aria-labelledby="kbd-help-title" {
            h2 #kbd-help-title { "Keyboard shortcuts" }
            table.keys {
                caption { "Keys are ignored while you type in a field, and with Ctrl, Alt or Meta." }
                thead { tr { th scope="col" { "key" } th scope="col" { "does" } } }
                tbody {
                    @for (key, what) in keys { tr { td { kbd { (key) } } td { (what) } } }
                }
            }
            form method="dialog" { button type="submit" { "Close" } }
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
        table #queues data-live {
            caption { "Jobs per queue" }
            thead { tr {
                th scope="col" { "queue" } th.num scope="col" { "ready" } th.num scope="col" { "running" }
                th.num scope="col" { "scheduled" } th.num scope="col" { "failed" }
                th.num scope="col" { "oldest ready" }
                th.num scope="col" title="ready, but waiting for a rate limit, a global limit or a 429 hold" { "rate-limited" }
                th scope="col" { "state" }
                @if actions { th scope="col" { "action" } }
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

/// Completions and failures per minute over the last hour, as inline SVG drawn with CSS
/// classes (its colours follow the light or dark palette), labelled, with the same figures as
/// a table in a `<details>`.
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
        figure.chart #chart data-live {
            svg viewBox=(format!("0 0 {} {}", w + 5, h + 20)) role="img"
                aria-label=(format!("completions and failures per minute over the last hour: {total_done} completed, {total_failed} failed; the most in one minute {max}")) {
                line.axis x1=(left) y1=(h) x2=(w) y2=(h) {}
                line.axis x1=(left) y1=(top) x2=(left) y2=(h) {}
                text.tick x="2" y=(top + 8) { (max) }
                text.tick x="2" y=(h) { "0" }
                text.tick x=(left) y=(h + 14) { "-60 min" }
                text.tick x=(w - 20) y=(h + 14) { "now" }
                polyline.series.ok points=(line(&done)) {}
                polyline.series.bad points=(line(&failed)) {}
            }
            figcaption {
                span.ok { "■ completed " (total_done) } " · " span.bad { "■ failed " (total_failed) }
                " per minute, last hour (refreshes on reload)"
            }
            details.chart-table {
                summary { "The chart as a table" }
                table #chart-table {
                    caption { "Completions and failures per minute, last hour (minutes with neither left out)" }
                    thead { tr { th scope="col" { "minute" } th.num scope="col" { "completed" } th.num scope="col" { "failed" } } }
                    tbody {
                        @if total_done + total_failed == 0 { tr { td colspan="3" .muted { "none in the last hour" } } }
                        @for i in 0..60usize {
                            @if done[i] + failed[i] > 0 {
                                tr {
                                    td { @if i == 59 { "this minute" } @else { (59 - i) " min ago" } }
                                    td.num { (done[i]) }
                                    td.num { (failed[i]) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
