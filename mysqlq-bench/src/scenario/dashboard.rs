//! The dashboard scenario (issue 32, `docs/design/dashboard.md` §11): the dashboard's pages over
//! a million jobs ([`crate::scenario::dashboard_data`]), timed in-process.
//!
//! The router is `mysqlq_cli::dashboard::router(pool, DashboardOptions::new())` on a pool of
//! [`POOL`] connections; each page is one `tower::ServiceExt::oneshot` call with `Host:
//! 127.0.0.1`, timed from the call until its body is read whole: the server's side, rendering
//! included, no network. [`WARMUPS`] untimed calls, then [`RUNS`] timed ones → p50, p95 and max
//! (nearest rank). The pages: the overview, `/queues`, `/jobs`, one search per walk and filter
//! kind (§3.2), a page 50 "Older →" links deep, the job page of a 100 KiB payload, and the live
//! poll of the ready list — once as a new session (rendered each time) and once within one
//! session (the shared rendering). `/queues/emails` and `/workers` are timed where the
//! dashboard has them; a page that answers 404 is listed as skipped. Then two confirmation
//! counts through `Admin::count_matching`, uncapped, one untimed run and three timed (median);
//! a count the server stops at its time limit is reported with its message.
//!
//! Reported, not checked: every page's p95 against [`TARGET_MS`] (the issue's target for list
//! and search pages) and each count against the count's 10 s limit. Checked: every timed page
//! answered 200, and the data set holds the jobs of its shape.

use std::time::Instant;

use axum::body::Body;
use axum::http::Request;
use mysqlq::admin::{Admin, COUNT_TIMEOUT_SECONDS};
use mysqlq::filter::Filter;
use mysqlq_cli::dashboard::{DashboardOptions, router};
use serde_json::{Value, json};
use tower::ServiceExt as _;

use crate::bench::Bench;
use crate::db;
use crate::error::BenchError;
use crate::report::{median, percentile, round_to};
use crate::scenario::dashboard_data::{
    self as data, DataSet, KINDS, RARE_KIND, RARE_QUEUE, Shape, TENANT, WORKERS,
};
use crate::table::Table;

/// Untimed calls before a page's timed ones.
pub(crate) const WARMUPS: usize = 3;
/// Timed calls per page.
pub(crate) const RUNS: usize = 20;
/// The issue's target for a list or search page's p95, server side, in milliseconds.
pub(crate) const TARGET_MS: f64 = 200.0;
/// Connections of the dashboard's pool (the CLI's `dashboard` command uses 8).
const POOL: u32 = 8;
/// "Older →" links followed for the deep page.
const DEEP: usize = 50;
/// Timed runs of a confirmation count (after one untimed).
const COUNT_RUNS: usize = 3;
/// The `Host` of every request (an IP address: allowed by the dashboard's guard).
const HOST: &str = "127.0.0.1";
/// Largest body read.
const MAX_BODY: usize = 64 * 1024 * 1024;

/// One timed page.
#[derive(Debug, Clone)]
pub(crate) struct PageRun {
    /// What the page is (the search, or what makes it special).
    pub(crate) label: String,
    /// The path requested.
    pub(crate) path: String,
    /// Each timed call, ms, sorted.
    pub(crate) ms: Vec<f64>,
    /// The status of the last call.
    pub(crate) status: u16,
    /// Job rows on the page (`None`: not a job list).
    pub(crate) rows: Option<usize>,
    /// `"entries"` or `"rows"` when the page stopped at its read cap, else `"none"`.
    pub(crate) cap: &'static str,
    /// Bytes of the body.
    pub(crate) bytes: usize,
}

impl PageRun {
    fn p(&self, q: f64) -> f64 {
        round_to(percentile(&self.ms, q), 2)
    }

    fn max(&self) -> f64 {
        round_to(self.ms.last().copied().unwrap_or(0.0), 2)
    }

    fn within_target(&self) -> bool {
        self.p(95.0) <= TARGET_MS
    }
}

/// One confirmation count.
#[derive(Debug, Clone)]
pub(crate) struct ConfirmRun {
    pub(crate) filter: String,
    /// Each timed run, ms (a refused run counts until the refusal).
    pub(crate) ms: Vec<f64>,
    /// The count of the last run that finished (`None`: none did).
    pub(crate) count: Option<u64>,
    /// Runs refused (over the count's time limit), with the message; run 0 is the untimed one.
    pub(crate) errors: Vec<String>,
}

/// What the dashboard scenario measured.
#[derive(Debug, Clone, Default)]
pub(crate) struct DashboardRun {
    pub(crate) rows: u64,
    pub(crate) data: DataSet,
    /// `job_queue`'s indexes, bytes.
    pub(crate) index_bytes: Vec<(String, i64)>,
    pub(crate) pages: Vec<PageRun>,
    /// Pages the dashboard does not have here: `(path, status)`.
    pub(crate) skipped: Vec<(String, u16)>,
    pub(crate) confirm: Vec<ConfirmRun>,
    /// `/proc/loadavg`'s 1, 5 and 15 minute averages before the timing and after it.
    pub(crate) load_before: Option<[f64; 3]>,
    pub(crate) load_after: Option<[f64; 3]>,
    /// The whole timing (pages and counts), seconds.
    pub(crate) timing_s: f64,
}

fn load_averages() -> Option<[f64; 3]> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut it = text.split_whitespace().map(str::parse::<f64>);
    Some([it.next()?.ok()?, it.next()?.ok()?, it.next()?.ok()?])
}

/// `v` percent-encoded for a query string (everything but unreserved characters).
fn enc(v: &str) -> String {
    v.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// `/jobs?q=<q>`.
fn search(q: &str) -> String {
    format!("/jobs?q={}", enc(q))
}

/// The "Older →" / "Due later →" link of a jobs page, unescaped.
fn next_link(body: &str) -> Option<String> {
    let rest = body.split("id=\"next\" href=\"").nth(1)?;
    Some(rest.split('"').next()?.replace("&amp;", "&"))
}

/// A response: status, body, ms from the call until the body was read.
struct Answer {
    status: u16,
    body: String,
    ms: f64,
}

async fn call(app: &axum::Router, path: &str, headers: &[(&str, &str)]) -> Answer {
    let mut req = Request::builder().uri(path).header("Host", HOST);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = match req.body(Body::empty()) {
        Ok(r) => r,
        Err(_) => {
            return Answer {
                status: 0,
                body: String::new(),
                ms: 0.0,
            };
        }
    };
    let app = app.clone();
    let began = Instant::now();
    let resp = match app.oneshot(req).await {
        Ok(r) => r,
        Err(e) => match e {},
    };
    let status = resp.status().as_u16();
    let bytes = axum::body::to_bytes(resp.into_body(), MAX_BODY)
        .await
        .unwrap_or_default();
    let ms = began.elapsed().as_secs_f64() * 1000.0;
    Answer {
        status,
        body: String::from_utf8_lossy(&bytes).into_owned(),
        ms,
    }
}

/// The session cookie (`name=value`) a page set, if any: for the shared live rendering.
async fn session_cookie(app: &axum::Router, path: &str) -> Option<String> {
    let mut req = Request::builder().uri(path).header("Host", HOST);
    req = req.header("X-Mysqlq-Live", "1");
    let resp = app
        .clone()
        .oneshot(req.body(Body::empty()).ok()?)
        .await
        .ok()?;
    resp.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|c| c.split(';').next())
        .find(|kv| kv.starts_with("mysqlq_session="))
        .map(str::to_owned)
}

/// Times `path`: warm-ups, then the timed runs.
async fn time_page(
    app: &axum::Router,
    label: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> PageRun {
    for _ in 0..WARMUPS {
        let _ = call(app, path, headers).await;
    }
    let mut ms = Vec::with_capacity(RUNS);
    let mut last = None;
    for _ in 0..RUNS {
        let a = call(app, path, headers).await;
        ms.push(a.ms);
        last = Some(a);
    }
    ms.sort_by(f64::total_cmp);
    let last = last.unwrap_or(Answer {
        status: 0,
        body: String::new(),
        ms: 0.0,
    });
    let is_list = path.starts_with("/jobs?") || path == "/jobs";
    let cap = if !last.body.contains("id=\"window\"") {
        "none"
    } else if last.body.contains("index entries of this walk") {
        "entries"
    } else {
        "rows"
    };
    PageRun {
        label: label.to_owned(),
        path: path.to_owned(),
        ms,
        status: last.status,
        rows: is_list.then(|| last.body.matches("<tr data-id=").count()),
        cap,
        bytes: last.body.len(),
    }
}

impl Bench<'_> {
    /// Builds the data set of `rows` jobs and times the dashboard over it.
    pub(crate) async fn dashboard(&mut self, rows: u32) -> Result<DashboardRun, BenchError> {
        let rows = u64::from(rows);
        self.phase(
            "dashboard: writing the data set",
            u32::try_from(rows).unwrap_or(u32::MAX),
        );
        let mut out = DashboardRun {
            rows,
            ..DashboardRun::default()
        };
        {
            let mut conn = db::acquire(&self.setup).await?;
            let bar = self.bar.clone();
            out.data = data::build(&mut conn, rows, |n| bar.set_position(n)).await?;
            out.index_bytes = data::index_bytes(&mut conn).await;
            let counts = data::status_counts(&mut conn).await?;
            self.check_shape(&out.data.shape, &counts);
        }
        let pool = self.scratch.pool(POOL).await?;
        let app = router(pool.clone(), DashboardOptions::new());
        let d = &out.data;
        let pages = page_list(d);
        self.phase(
            "dashboard: timing pages",
            u32::try_from(pages.len() + 3).unwrap_or(0),
        );
        out.load_before = load_averages();
        let began = Instant::now();
        for (label, path) in [("queue emails", "/queues/emails"), ("workers", "/workers")] {
            let a = call(&app, path, &[]).await;
            if a.status == 404 {
                out.skipped.push((path.to_owned(), a.status));
            } else {
                out.pages.push(time_page(&app, label, path, &[]).await);
            }
            self.bar.inc(1);
        }
        for (label, path) in &pages {
            out.pages.push(time_page(&app, label, path, &[]).await);
            self.bar.inc(1);
        }
        // 50 pages deep: follow the "Older →" link of the completed list 50 times.
        let mut path = search("state:completed");
        let mut depth = 0;
        while depth < DEEP {
            match next_link(&call(&app, &path, &[]).await.body) {
                Some(next) => {
                    path = next;
                    depth += 1;
                }
                None => break,
            }
        }
        out.pages.push(
            time_page(
                &app,
                &format!("state:completed, {depth} pages deep by cursor"),
                &path,
                &[],
            )
            .await,
        );
        self.bar.inc(1);
        let ready = search("state:ready");
        out.pages.push(
            time_page(
                &app,
                "live poll of state:ready, a new session each (rendered)",
                &ready,
                &[("X-Mysqlq-Live", "1")],
            )
            .await,
        );
        if let Some(cookie) = session_cookie(&app, &ready).await {
            out.pages.push(
                time_page(
                    &app,
                    "live poll of state:ready, one session (shared rendering)",
                    &ready,
                    &[("X-Mysqlq-Live", "1"), ("Cookie", cookie.as_str())],
                )
                .await,
            );
        }
        self.bar.inc(1);
        let admin = Admin::new(pool.clone());
        for q in [
            format!("state:retrying kind:{}", KINDS[0]),
            format!("state:completed meta.tenant:{TENANT}"),
        ] {
            let filter = Filter::parse(&q).map_err(|e| {
                BenchError::new(format!("the bench's search `{q}`: {e}"), "fix the bench")
            })?;
            let mut run = ConfirmRun {
                filter: q,
                ms: Vec::new(),
                count: None,
                errors: Vec::new(),
            };
            for i in 0..=COUNT_RUNS {
                let t = Instant::now();
                let c = admin.count_matching(&filter).await;
                let ms = t.elapsed().as_secs_f64() * 1000.0;
                if i > 0 {
                    run.ms.push(ms);
                }
                match c {
                    Ok(c) => run.count = Some(c.count),
                    // Over the server's time limit: a result, not a failure of the bench.
                    Err(e) => run.errors.push(format!("run {i}: {e}")),
                }
            }
            out.confirm.push(run);
        }
        self.bar.inc(1);
        out.timing_s = began.elapsed().as_secs_f64();
        out.load_after = load_averages();
        pool.close().await;
        let bad: Vec<String> = out
            .pages
            .iter()
            .filter(|p| p.status != 200)
            .map(|p| format!("{} answered {}", p.path, p.status))
            .collect();
        let detail = format!(
            "{} pages timed, {} skipped (404)",
            out.pages.len(),
            out.skipped.len()
        );
        self.check(
            "dashboard: every timed page answered 200".to_owned(),
            if bad.is_empty() {
                Ok(detail)
            } else {
                Err(format!("{detail}; {}", bad.join(", ")))
            },
        );
        Ok(out)
    }

    /// Checks the stored statuses against the shape (the rate-limited and running rows are
    /// `pending` and `processing`; one more completed job carries the big payload).
    fn check_shape(&mut self, s: &Shape, counts: &[(String, i64)]) {
        let want = [
            (
                "pending",
                s.ready + s.rate_limited + s.scheduled + s.retrying,
            ),
            ("processing", s.running),
            ("completed", s.completed + 1),
            ("failed", s.failed),
            ("cancelled", s.cancelled),
            ("waiting", s.waiting),
        ];
        let got = |name: &str| {
            counts
                .iter()
                .find(|(n, _)| n == name)
                .map_or(0, |(_, c)| u64::try_from(*c).unwrap_or(0))
        };
        let detail = want
            .iter()
            .map(|(n, w)| format!("{n} {} of {w}", got(n)))
            .collect::<Vec<_>>()
            .join(", ");
        let ok = want.iter().all(|(n, w)| got(n) == *w);
        self.check(
            "dashboard: data set".to_owned(),
            if ok { Ok(detail) } else { Err(detail) },
        );
    }
}

/// The pages timed, `(label, path)`, in order (the deep page and the live polls come after).
fn page_list(d: &DataSet) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = vec![
        ("overview".into(), "/".into()),
        ("queues".into(), "/queues".into()),
        ("jobs, no search".into(), "/jobs".into()),
    ];
    let searches = [
        "state:ready".to_owned(),
        "state:scheduled".to_owned(),
        "state:retrying".to_owned(),
        "state:running".to_owned(),
        "state:waiting".to_owned(),
        "state:rate-limited".to_owned(),
        "state:completed".to_owned(),
        "state:failed,cancelled".to_owned(),
        format!("kind:{} state:completed", KINDS[0]),
        format!("kind:{RARE_KIND} state:completed"),
        format!("queue:{RARE_QUEUE} state:ready"),
        "finished:>1h state:completed".to_owned(),
        format!("id:{}", d.mid_id),
        format!("args.order_id:{}", d.mid_order_id),
        format!("state:completed meta.tenant:{TENANT}"),
        format!("worker:{} state:running", WORKERS[2]),
    ];
    for q in searches {
        let path = search(&q);
        v.push((q, path));
    }
    v.push((
        "job page, 100 KiB payload".into(),
        format!("/jobs/{}", d.big_id),
    ));
    v
}

#[allow(clippy::cast_precision_loss)]
fn mib(b: i64) -> f64 {
    round_to(b as f64 / (1024.0 * 1024.0), 1)
}

impl DashboardRun {
    fn over_target(&self) -> Vec<&PageRun> {
        self.pages.iter().filter(|p| !p.within_target()).collect()
    }

    fn confirm_ms(c: &ConfirmRun) -> f64 {
        round_to(median(&c.ms).unwrap_or(0.0), 1)
    }

    pub(crate) fn json(&self) -> Value {
        let d = &self.data;
        let index: serde_json::Map<String, Value> = self
            .index_bytes
            .iter()
            .map(|(n, b)| (n.clone(), json!(mib(*b))))
            .collect();
        let shape: serde_json::Map<String, Value> = d
            .shape
            .groups()
            .iter()
            .map(|(n, c)| ((*n).to_owned(), json!(c)))
            .collect();
        json!({
            "rows": self.rows,
            "data_set": shape,
            "insert_s": round_to(d.insert_s, 1),
            "analyze_s": round_to(d.analyze_s, 1),
            "index_mib": index,
            "index_mib_source": "mysql.innodb_index_stats stat_name = 'size' (pages, after ANALYZE TABLE) × innodb_page_size",
            "warmups": WARMUPS,
            "runs": RUNS,
            "target_p95_ms": TARGET_MS,
            "pages": self.pages.iter().map(|p| json!({
                "label": p.label,
                "path": p.path,
                "p50_ms": p.p(50.0),
                "p95_ms": p.p(95.0),
                "max_ms": p.max(),
                "status": p.status,
                "rows": p.rows,
                "cap": p.cap,
                "bytes": p.bytes,
                "within_target": p.within_target(),
            })).collect::<Vec<_>>(),
            "over_target": self.over_target().iter().map(|p| p.path.clone()).collect::<Vec<_>>(),
            "skipped": self.skipped.iter().map(|(p, s)| json!({"path": p, "status": s})).collect::<Vec<_>>(),
            "confirm": self.confirm.iter().map(|c| json!({
                "filter": c.filter,
                "ms": Self::confirm_ms(c),
                "runs_ms": c.ms.iter().map(|x| round_to(*x, 1)).collect::<Vec<_>>(),
                "count": c.count,
                "errors": c.errors,
                "within_limit": c.errors.is_empty()
                    && Self::confirm_ms(c) <= f64::from(COUNT_TIMEOUT_SECONDS) * 1000.0,
            })).collect::<Vec<_>>(),
            "loadavg_before": self.load_before,
            "loadavg_after": self.load_after,
            "timing_s": round_to(self.timing_s, 1),
        })
    }

    pub(crate) fn human(&self) -> String {
        let d = &self.data;
        let s = &d.shape;
        let load = |l: Option<[f64; 3]>| {
            l.map_or_else(
                || "-".to_owned(),
                |l| format!("{:.2} {:.2} {:.2}", l[0], l[1], l[2]),
            )
        };
        let mut text = format!(
            "\ndashboard: {} jobs ({} completed; ready {}, rate-limited {}, scheduled {}, \
             retrying {}, waiting {}, running {}, failed {}, cancelled {}), written in {:.1} s, \
             ANALYZE {:.1} s\n\
             pages timed in-process (tower oneshot, body read), {WARMUPS} warm-ups then {RUNS} \
             runs each; load average before {} / after {} (a shared machine: compare with care)\n",
            self.rows,
            s.completed,
            s.ready,
            s.rate_limited,
            s.scheduled,
            s.retrying,
            s.waiting,
            s.running,
            s.failed,
            s.cancelled,
            d.insert_s,
            d.analyze_s,
            load(self.load_before),
            load(self.load_after),
        );
        let mut t = Table::new(&[
            "PAGE",
            ">P50 MS",
            ">P95 MS",
            ">MAX MS",
            ">STATUS",
            ">ROWS",
            "CAP",
            "P95 ≤ 200 MS",
        ]);
        for p in &self.pages {
            t.row(vec![
                p.label.clone(),
                format!("{:.1}", p.p(50.0)),
                format!("{:.1}", p.p(95.0)),
                format!("{:.1}", p.max()),
                p.status.to_string(),
                p.rows.map_or_else(String::new, |r| r.to_string()),
                p.cap.to_owned(),
                if p.within_target() { "yes" } else { "NO" }.to_owned(),
            ]);
        }
        text.push_str(&t.render());
        for (p, st) in &self.skipped {
            text.push_str(&format!("skipped {p}: answered {st} (no such page here)\n"));
        }
        let mut c = Table::new(&["CONFIRMATION COUNT", ">MS (MEDIAN)", ">RUNS MS", ">COUNT"]);
        for r in &self.confirm {
            c.row(vec![
                r.filter.clone(),
                format!("{:.1}", Self::confirm_ms(r)),
                r.ms.iter()
                    .map(|x| format!("{x:.0}"))
                    .collect::<Vec<_>>()
                    .join(" "),
                r.count.map_or_else(|| "-".to_owned(), |n| n.to_string()),
            ]);
        }
        for r in &self.confirm {
            for e in &r.errors {
                text.push_str(&format!("count `{}` refused: {e}\n", r.filter));
            }
        }
        text.push('\n');
        text.push_str(&c.render());
        let idx: Vec<String> = self
            .index_bytes
            .iter()
            .map(|(n, b)| format!("{n} {:.1}", mib(*b)))
            .collect();
        text.push_str(&format!(
            "\njob_queue indexes, MiB (mysql.innodb_index_stats size × page size): {}\n",
            idx.join(", ")
        ));
        let over = self.over_target();
        if over.is_empty() {
            text.push_str("every page's p95 is within 200 ms\n");
        } else {
            text.push_str(&format!(
                "over 200 ms at p95: {}\n",
                over.iter()
                    .map(|p| p.label.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn searches_are_encoded_and_next_links_read() {
        assert_eq!(
            search("state:failed,cancelled meta.tenant:acme7"),
            "/jobs?q=state%3Afailed%2Ccancelled%20meta.tenant%3Aacme7"
        );
        let body =
            r#"<p><a id="next" href="/jobs?q=state%3Acompleted&amp;c=f.1.2">Older →</a></p>"#;
        assert_eq!(
            next_link(body).as_deref(),
            Some("/jobs?q=state%3Acompleted&c=f.1.2")
        );
    }
}
