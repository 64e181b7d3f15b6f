//! The web dashboard (`mysqlq_cli::dashboard::router`, `mysqlq-cli dashboard`) against the real
//! server: every page and action (CSRF, token, read-only, escaping) called in-process with
//! `tower::ServiceExt::oneshot`, the plans of its queries, the CLI's server over a socket
//! (hyper's client), and end to end in headless Chromium driven through WebDriver (fantoccini
//! and chromedriver).
//!
//! Chromium is required, never skipped: `apt-get install -y chromium chromium-driver`.
//! Screenshots land in `tests/artifacts/`. The 1,000,000-row timing is an ignored test:
//! `cargo test --release -p mysqlq-tests --test dashboard -- --ignored --nocapture`.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use axum::Router;
use fantoccini::Locator;
use mysqlq::store::{admin, dashboard};

use mysqlq_cli::dashboard::{DashboardOptions, router};
use mysqlq_tests::TestDb;
use mysqlq_tests::browser::Browser;
use mysqlq_tests::http::{Resp, http, request, send};
use mysqlq_tests::jobs::Noop;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpListener;

/// The CSRF field's value in a page.
fn form_token(body: &str) -> Option<String> {
    let rest = body.split(r#"name="mysqlq_csrf" value=""#).nth(1)?;
    Some(rest.split('"').next()?.to_owned())
}

/// The dashboard router, called in-process, and served on a free loopback port for the browser.
struct Dash {
    app: Router,
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Dash {
    async fn start(db: &TestDb, options: DashboardOptions) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = router(db.pool.clone(), options);
        let served = app.clone();
        let task = tokio::spawn(async move {
            axum::serve(listener, served).await.unwrap();
        });
        Self { app, addr, task }
    }

    /// A request to the router, in-process.
    async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<(&str, &str)>,
    ) -> Resp {
        let req = request(self.addr, method, path, headers, body);
        send(&self.app, req).await
    }

    async fn get(&self, path: &str) -> Resp {
        self.send("GET", path, &[], None).await
    }

    /// GETs `path` and returns the page with the session cookie (`name=value`) and the CSRF
    /// token its forms carry (empty when the page has no form).
    async fn csrf(&self, path: &str) -> (Resp, String, String) {
        let r = self.get(path).await;
        let cookie = r.cookie("mysqlq_session").expect("a session cookie");
        let token = form_token(&r.body).unwrap_or_default();
        assert!(
            !token.is_empty() || !r.body.contains("<form method=\"post\""),
            "forms carry the CSRF field"
        );
        (r, cookie, token)
    }

    async fn post(&self, path: &str, cookie: Option<&str>, form: &str) -> Resp {
        let mut headers = Vec::new();
        if let Some(c) = cookie {
            headers.push(("Cookie", c));
        }
        self.send(
            "POST",
            path,
            &headers,
            Some(("application/x-www-form-urlencoded", form)),
        )
        .await
    }
}

impl Drop for Dash {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---------------------------------------------------------------------------------------------
// fixtures

/// A failed `noop` row of queue `queue` with `error`, as the worker leaves it.
async fn insert_failed(db: &TestDb, queue: &str, payload: &str, error: &str) -> u64 {
    sqlx::query(
        "INSERT INTO job_queue (queue_name, kind, payload, status, attempts, max_attempts, \
         last_error, finished_at) VALUES (?, 'noop', ?, 'failed', 4, 4, ?, UTC_TIMESTAMP(6))",
    )
    .bind(queue)
    .bind(payload)
    .bind(error)
    .execute(&db.pool)
    .await
    .expect("insert failed job")
    .last_insert_id()
}

async fn enqueue_noops(db: &TestDb, n: u64) -> Vec<u64> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(Noop { n: i }.enqueue(&db.pool).await.unwrap().id().0);
    }
    ids
}

const XSS_PAYLOAD: &str = r#"{"note": "<script>document.title='pwned';window.pwned=1</script>"}"#;
const XSS_ERROR: &str = "<img src=x onerror=\"window.pwned=2\"> broke";

// ---------------------------------------------------------------------------------------------
// HTTP tests

#[tokio::test]
async fn every_page_renders_what_the_database_holds() {
    let db = TestDb::new().await;
    let pending = enqueue_noops(&db, 3).await;
    let failed = insert_failed(&db, "test", r#"{"n": 5}"#, "upstream returned 503").await;
    db.exec("INSERT INTO job_queue (queue_name, kind, payload, status, finished_at) VALUES ('other', 'noop', '{\"n\": 1}', 'completed', UTC_TIMESTAMP(6))").await;
    db.exec("INSERT INTO mysqlq_stats_minute (minute, worker_id, completions, failures) VALUES (DATE_FORMAT(UTC_TIMESTAMP() - INTERVAL 2 MINUTE, '%Y-%m-%d %H:%i:00'), 'w1', 17, 2)").await;
    let d = Dash::start(&db, DashboardOptions::new()).await;

    let r = d.get("/").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.header("content-security-policy")
            .unwrap()
            .contains("script-src 'self'")
    );
    assert!(
        r.body
            .contains(r#"<td class="num" data-q="test" data-f="ready">3</td>"#),
        "{}",
        r.body
    );
    assert!(
        r.body
            .contains(r#"<td class="num" data-q="test" data-f="failed">1</td>"#)
    );
    assert!(r.body.contains("<svg"), "chart is inline SVG");
    assert!(r.body.contains("completed 17"), "chart totals: {}", r.body);
    assert!(r.body.contains("failed 2"));

    let api: Value = serde_json::from_str(&d.get("/api/overview").await.body).unwrap();
    let test_q = api["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["queue"] == "test")
        .unwrap();
    assert_eq!(test_q["ready"], 3);
    assert_eq!(test_q["failed"], 1);
    assert_eq!(api["chart"][0]["completions"], 17);

    let r = d.get("/jobs").await;
    assert_eq!(r.status, 200);
    for id in pending.iter().chain([&failed]) {
        assert!(r.body.contains(&format!("/jobs/{id}\"")), "{}", r.body);
    }
    let r = d.get("/jobs?state=pending&queue=test&kind=noop").await;
    assert_eq!(r.status, 200);
    assert!(r.body.contains(&format!("/jobs/{}\"", pending[0])));
    assert!(!r.body.contains(&format!("/jobs/{failed}\"")));
    let r = d.get("/jobs?state=failed").await;
    assert!(r.body.contains(&format!("/jobs/{failed}\"")));
    assert!(!r.body.contains(&format!("/jobs/{}\"", pending[0])));
    let r = d.get("/jobs?queue=other").await;
    assert!(r.body.contains("<td>other</td>"), "{}", r.body);
    assert!(!r.body.contains(&format!("/jobs/{}\"", pending[0])));
    let r = d.get("/jobs?state=bogus").await;
    assert_eq!(r.status, 400);
    assert!(r.body.contains("unknown state `bogus`"), "{}", r.body);
    let r = d.get("/jobs?q=tenant:acme").await;
    assert_eq!(r.status, 400);
    assert!(
        r.body.contains("did you mean `meta.tenant:acme`?"),
        "{}",
        r.body
    );
    assert_eq!(d.get("/jobs?c=abc").await.status, 400);
    let r = d.get("/jobs?q=state:pending%20queue:test").await;
    assert!(r.body.contains(&format!("/jobs/{}\"", pending[0])));
    assert!(!r.body.contains(&format!("/jobs/{failed}\"")));

    let r = d.get(&format!("/jobs/{failed}")).await;
    assert_eq!(r.status, 200);
    assert!(
        r.body.contains("{\n  &quot;n&quot;: 5\n}"),
        "pretty payload: {}",
        r.body
    );
    assert!(r.body.contains("upstream returned 503"));
    assert!(r.body.contains(">4 of 4<"), "attempts");
    for label in ["created", "runnable at", "finished", "last change"] {
        assert!(r.body.contains(label), "timeline lacks {label}");
    }
    assert!(r.body.contains(r#"id="retry""#));
    assert_eq!(d.get("/jobs/999999").await.status, 404);

    // The attempt history: none recorded yet; then two (newest first), a retry the reaper
    // recorded for a dead worker (no start) and a failure whose error was cut to 8 KiB.
    assert!(r.body.contains(r#"id="attempts-none""#), "{}", r.body);
    db.exec(&format!(
        "INSERT INTO mysqlq_job_attempt \
         (job_id, attempt, outcome, worker, started_at, finished_at, error, error_bytes) VALUES \
         ({failed}, 3, 'retry', 'w-dead', NULL, UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE, \
          'lease expired while held by w-dead', 34), \
         ({failed}, 4, 'fail', 'w-<b>2</b>', UTC_TIMESTAMP(6) - INTERVAL 2 SECOND, \
          UTC_TIMESTAMP(6), 'upstream <503> …[truncated]', 20000)"
    ))
    .await;
    let r = d.get(&format!("/jobs/{failed}")).await;
    let at = r.body.find(r#"id="attempt-history""#);
    let history = &r.body[at.unwrap_or_else(|| panic!("no attempt history: {}", r.body))..];
    assert!(!r.body.contains(r#"id="attempts-none""#));
    let newest = history
        .find(r#"<td class="num">4</td>"#)
        .expect("attempt 4");
    let older = history
        .find(r#"<td class="num">3</td>"#)
        .expect("attempt 3");
    assert!(newest < older, "newest attempt first: {history}");
    for want in [
        "<td>fail</td>",
        "<td>retry</td>",
        "– (worker died)",
        "lease expired while held by w-dead",
        "w-&lt;b&gt;2&lt;/b&gt;",
        "upstream &lt;503&gt;",
        "(cut to 8 KiB of 20000 bytes)",
    ] {
        assert!(
            history.contains(want),
            "the history lacks {want}: {history}"
        );
    }
    assert_eq!(
        history.matches("(cut to 8 KiB").count(),
        1,
        "only the cut error says so"
    );

    let r = d.get("/failed").await;
    assert_eq!(r.status, 200);
    assert!(r.body.contains(&format!(r#"data-id="{failed}""#)));
    assert!(r.body.contains("1 failed"));
    let r = d.get("/queues").await;
    assert!(r.body.contains("Pause test"), "{}", r.body);
    assert!(r.body.contains("Pause other"));

    let js = d.get("/static/dashboard.js").await;
    assert_eq!(js.status, 200);
    assert!(js.header("content-type").unwrap().contains("javascript"));
    assert!(js.body.contains("/api/overview") || js.body.contains("data-api"));
    assert_eq!(d.get("/static/dashboard.css").await.status, 200);
    assert_eq!(d.get("/nope").await.status, 404);
}

#[tokio::test]
async fn job_pages_are_keyset_pages_that_cover_every_job_once() {
    let db = TestDb::new().await;
    db.exec("INSERT INTO job_queue (queue_name, kind, payload) SELECT IF(seq % 3 = 0, 'other', 'test'), 'noop', JSON_OBJECT('n', seq) FROM seq_1_to_120").await;
    let d = Dash::start(&db, DashboardOptions::new()).await;
    for (filter, want) in [("state=pending", 120), ("queue=other", 40), ("", 120)] {
        let mut seen = Vec::new();
        let mut path = format!("/jobs?{filter}");
        loop {
            let r = d.get(&path).await;
            assert_eq!(r.status, 200);
            let ids: Vec<u64> = r
                .body
                .match_indices("<a href=\"/jobs/")
                .map(|(i, _)| {
                    let rest = &r.body[i + 15..];
                    rest[..rest.find('"').unwrap()].parse().unwrap()
                })
                .collect();
            assert!(ids.len() <= 50);
            if filter == "state=pending" {
                // Due first: one INSERT gave them one due time, so by id.
                assert!(ids.windows(2).all(|w| w[0] < w[1]), "due first");
            } else {
                assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first");
            }
            seen.extend(ids);
            match r.body.find("id=\"next\" href=\"") {
                Some(i) => {
                    let rest = &r.body[i + 16..];
                    path = rest[..rest.find('"').unwrap()].replace("&amp;", "&");
                    assert!(path.contains("c="), "{path}");
                }
                None => break,
            }
        }
        let mut unique = seen.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), seen.len(), "{filter}: no job twice");
        assert_eq!(seen.len(), want, "{filter}: every job once");
    }
}

#[tokio::test]
async fn actions_need_the_csrf_token_and_then_work() {
    let db = TestDb::new().await;
    let a = insert_failed(&db, "test", "{}", "e").await;
    let b = insert_failed(&db, "test", "{}", "e").await;
    let c = insert_failed(&db, "test", "{}", "e").await;
    let d = Dash::start(&db, DashboardOptions::new()).await;
    let (_, cookie, token) = d.csrf("/failed").await;
    assert!(
        d.get("/failed").await.set_cookies()[0].contains("SameSite=Strict"),
        "the session cookie is SameSite=Strict"
    );

    // Refused: no token at all, cookie without field, field without cookie, wrong field.
    let form = format!("only={a}&mysqlq_csrf={token}");
    for (cookie_h, body) in [
        (None, format!("only={a}")),
        (Some(cookie.as_str()), format!("only={a}")),
        (None, form.clone()),
        (
            Some(cookie.as_str()),
            format!("only={a}&mysqlq_csrf=forged"),
        ),
        (
            Some("mysqlq_session=forgedforgedforged"),
            format!("only={a}&mysqlq_csrf=forged"),
        ),
        (Some("mysqlq_session=forgedforgedforged"), form.clone()),
    ] {
        let r = d.post("/failed/retry", cookie_h, &body).await;
        assert_eq!(r.status, 403, "{cookie_h:?} {body}: {}", r.body);
        assert!(r.body.contains("CSRF"), "{}", r.body);
    }
    // The bulk and progress routes are behind the same check.
    for path in [
        "/jobs/confirm",
        "/jobs/act",
        "/jobs/run-now",
        "/actions/1/stop",
    ] {
        let body = format!("action=retry&q=state:failed&only={a}");
        let r = d.post(path, Some(&cookie), &body).await;
        assert_eq!(r.status, 403, "{path}: {}", r.body);
        assert!(r.body.contains("CSRF"), "{}", r.body);
        let forged = format!("{body}&mysqlq_csrf=forged");
        assert_eq!(
            d.post(path, Some(&cookie), &forged).await.status,
            403,
            "{path}"
        );
    }
    assert_eq!(db.status(a).await.as_deref(), Some("failed"));

    // Retry one.
    let r = d.post("/failed/retry", Some(&cookie), &form).await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert!(r.header("location").unwrap().contains("msg=retried+1"));
    assert_eq!(db.status(a).await.as_deref(), Some("pending"));
    let page = d.get(r.header("location").unwrap()).await;
    assert!(page.body.contains("retried 1"), "the notice shows");

    // Discard many (checked boxes): a confirmation with the count first, nothing changed;
    // then the confirmed form. Then retry from the job page.
    let r = d
        .post(
            "/failed/discard",
            Some(&cookie),
            &format!("id={b}&id={a}&mysqlq_csrf={token}"),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.body.contains(&format!("Discard 2 jobs: {b}, {a}"))
            && r.body.contains(r#"name="confirmed" value="1""#),
        "{}",
        r.body
    );
    assert_eq!(
        db.status(b).await.as_deref(),
        Some("failed"),
        "nothing changed yet"
    );
    let r = d
        .post(
            "/failed/discard",
            Some(&cookie),
            &format!("id={b}&id={a}&confirmed=1&mysqlq_csrf={token}"),
        )
        .await;
    assert_eq!(r.status, 303);
    assert!(
        r.header("location")
            .unwrap()
            .contains("msg=discarded+1%3B+1+were+not+failed"),
        "{:?}",
        r.header("location")
    );
    assert_eq!(db.status(b).await, None);
    assert_eq!(db.status(a).await.as_deref(), Some("pending"));
    let r = d
        .post(
            "/failed/retry",
            Some(&cookie),
            &format!("only={c}&from=job&mysqlq_csrf={token}"),
        )
        .await;
    assert!(
        r.header("location")
            .unwrap()
            .starts_with(&format!("/jobs/{c}?"))
    );
    assert_eq!(db.status(c).await.as_deref(), Some("pending"));
    // The job page names the retry, by the dashboard's user, in its operator actions.
    let page = d.get(&format!("/jobs/{c}")).await;
    let trail = &page.body[page
        .body
        .find(r#"id="audit""#)
        .expect("the operator actions table")..];
    assert!(
        trail.contains("<td>retry</td><td>dashboard</td>"),
        "{}",
        page.body
    );
    let r = d
        .post(
            "/failed/retry",
            Some(&cookie),
            &format!("mysqlq_csrf={token}"),
        )
        .await;
    assert_eq!(r.status, 400, "nothing selected");

    // Pause and resume.
    let paused = "SELECT CAST(IFNULL(MAX(paused), -1) AS SIGNED) FROM mysqlq_queue WHERE queue_name = 'test'";
    let r = d
        .post(
            "/queues/pause",
            Some(&cookie),
            &format!("queue=test&mysqlq_csrf={token}"),
        )
        .await;
    assert_eq!(r.status, 303);
    assert_eq!(db.scalar(paused).await, 1);
    assert!(d.get("/queues").await.body.contains("Resume test"));
    let r = d
        .post("/queues/pause", None, "queue=test&mysqlq_csrf=x")
        .await;
    assert_eq!(r.status, 403);
    d.post(
        "/queues/resume",
        Some(&cookie),
        &format!("queue=test&mysqlq_csrf={token}"),
    )
    .await;
    assert_eq!(db.scalar(paused).await, -1, "a resumed queue keeps no row");
    let r = d
        .post(
            "/queues/pause",
            Some(&cookie),
            &format!("queue=bad%20name!&mysqlq_csrf={token}"),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
}

#[tokio::test]
async fn read_only_hides_and_refuses_actions() {
    let db = TestDb::new().await;
    let a = insert_failed(&db, "test", "{}", "e").await;
    let d = Dash::start(&db, DashboardOptions::new().read_only(true)).await;
    let (r, cookie, token) = d.csrf("/failed").await;
    assert!(r.body.contains(&format!(r#"data-id="{a}""#)));
    assert!(!r.body.contains("Retry"), "{}", r.body);
    assert!(!r.body.contains("<form method=\"post\""));
    assert!(r.body.contains("read-only"));
    let r = d.get("/queues").await;
    assert!(r.body.contains("data-queue=\"test\""));
    assert!(!r.body.contains("/queues/pause"), "no pause form");
    assert!(
        !d.get(&format!("/jobs/{a}"))
            .await
            .body
            .contains("id=\"retry\"")
    );
    let r = d.get("/queues/test").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.body.contains(r#"id="limit-rate">none<"#),
        "the limits show"
    );
    assert!(!r.body.contains("limits-form") && !r.body.contains("Save limits"));
    assert!(!r.body.contains("/queues/pause") && !r.body.contains("<form method=\"post\""));
    assert_eq!(d.get("/workers").await.status, 200);
    for (path, form) in [
        ("/failed/retry", format!("only={a}&mysqlq_csrf={token}")),
        ("/failed/discard", format!("only={a}&mysqlq_csrf={token}")),
        ("/queues/pause", format!("queue=test&mysqlq_csrf={token}")),
        (
            "/queues/test/limits",
            format!("rate=1%2Fs&global=1&mysqlq_csrf={token}"),
        ),
        (
            "/jobs/confirm",
            format!("action=retry&q=state:failed&mysqlq_csrf={token}"),
        ),
        (
            "/jobs/act",
            format!("action=retry&q=state:failed&mysqlq_csrf={token}"),
        ),
        ("/jobs/run-now", format!("only={a}&mysqlq_csrf={token}")),
        (
            "/jobs/selected",
            format!("action=retry&id={a}&mysqlq_csrf={token}"),
        ),
        ("/actions/1/stop", format!("mysqlq_csrf={token}")),
    ] {
        let r = d.post(path, Some(&cookie), &form).await;
        assert_eq!(r.status, 403, "{path}");
        assert!(r.body.contains("read-only"));
    }
    assert_eq!(db.status(a).await.as_deref(), Some("failed"));
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM mysqlq_queue").await,
        0,
        "nothing paused"
    );
}

#[tokio::test]
async fn the_token_guards_every_route() {
    let db = TestDb::new().await;
    let d = Dash::start(&db, DashboardOptions::new().token("s3cret-token")).await;
    for path in [
        "/",
        "/jobs",
        "/failed",
        "/queues",
        "/api/overview",
        "/static/dashboard.js",
        "/jobs/1",
        "/jobs?q=state:failed",
        "/actions",
        "/actions/1",
        "/jobs/1/payload.json",
        "/queues/test",
        "/workers",
    ] {
        let r = d.get(path).await;
        assert_eq!(r.status, 401, "{path}");
        assert!(!r.body.contains("s3cret"));
        let r = d
            .send("GET", path, &[("Authorization", "Bearer wrong")], None)
            .await;
        assert_eq!(r.status, 401, "{path} with a wrong token");
        // A live poll of the page is the same GET behind the same guard.
        let r = d.send("GET", path, &[("X-Mysqlq-Live", "1")], None).await;
        assert_eq!(r.status, 401, "{path} polled live without the token");
    }
    let r = d
        .send(
            "GET",
            "/queues",
            &[("Authorization", "Bearer s3cret-token")],
            None,
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(d.get("/jobs?token=nope").await.status, 401);
    // ?token= once: a cookie, and a redirect that drops the token from the address.
    let r = d.get("/jobs?state=pending&token=s3cret-token").await;
    assert_eq!(r.status, 303);
    assert_eq!(r.header("location"), Some("/jobs?state=pending"));
    let tok = r.cookie("mysqlq_token").expect("token cookie");
    assert!(
        r.set_cookies()
            .iter()
            .any(|c| c.starts_with("mysqlq_token=") && c.contains("HttpOnly"))
    );
    let r = d
        .send("GET", "/jobs?state=pending", &[("Cookie", &tok)], None)
        .await;
    assert_eq!(r.status, 200);
    // POSTs need the token too, before CSRF is even looked at.
    let r = d.post("/queues/pause", None, "queue=test").await;
    assert_eq!(r.status, 401);
    let r = d.post("/queues/test/limits", None, "global=1").await;
    assert_eq!(r.status, 401);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM mysqlq_queue").await,
        0,
        "no limit set"
    );
}

#[tokio::test]
async fn other_host_names_are_refused_against_dns_rebinding() {
    let db = TestDb::new().await;
    let id = insert_failed(&db, "test", r#"{"secret": "payload"}"#, "e").await;
    let d = Dash::start(&db, DashboardOptions::new()).await;
    let port = d.addr.port();
    let job = format!("/jobs/{id}");
    for host in [
        format!("attacker.example:{port}"),
        format!("127.0.0.1.attacker.example:{port}"),
        "attacker.example".to_owned(),
    ] {
        let r = d.send("GET", &job, &[("Host", &host)], None).await;
        assert_eq!(r.status, 403, "{host}");
        assert!(!r.body.contains("payload"), "{}", r.body);
        assert!(r.body.contains("--allowed-host"), "{}", r.body);
        assert!(r.set_cookies().is_empty(), "no cookie for {host}");
    }
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("LocalHost:{port}"),
        format!("[::1]:{port}"),
    ] {
        let r = d.send("GET", &job, &[("Host", &host)], None).await;
        assert_eq!(r.status, 200, "{host}");
    }
    // Names the operator allowed are served.
    let d = Dash::start(
        &db,
        DashboardOptions::new().allowed_host("Admin.Example.com"),
    )
    .await;
    let r = d
        .send("GET", &job, &[("Host", "admin.example.com:443")], None)
        .await;
    assert_eq!(r.status, 200);
    let r = d
        .send("GET", &job, &[("Host", "other.example.com")], None)
        .await;
    assert_eq!(r.status, 403);
}

#[tokio::test]
async fn posts_from_other_origins_are_refused() {
    let db = TestDb::new().await;
    let a = insert_failed(&db, "test", "{}", "e").await;
    let d = Dash::start(&db, DashboardOptions::new()).await;
    let (_, cookie, token) = d.csrf("/failed").await;
    let form = format!("only={a}&mysqlq_csrf={token}");
    let own = format!("http://{}", d.addr);
    for headers in [
        vec![("Origin", "http://attacker.example")],
        vec![("Origin", "null")],
        vec![("Sec-Fetch-Site", "cross-site")],
        vec![("Sec-Fetch-Site", "same-site")],
        vec![("Origin", own.as_str()), ("Sec-Fetch-Site", "cross-site")],
    ] {
        let mut h = headers.clone();
        h.push(("Cookie", &cookie));
        let r = d
            .send(
                "POST",
                "/failed/retry",
                &h,
                Some(("application/x-www-form-urlencoded", &form)),
            )
            .await;
        assert_eq!(r.status, 403, "{headers:?}: {}", r.body);
        assert!(r.body.contains("Origin"), "{}", r.body);
    }
    assert_eq!(db.status(a).await.as_deref(), Some("failed"));
    // The dashboard's own page posting to itself, as Chromium does it: `Sec-Fetch-Site`
    // decides, whatever `Origin` says (`null` under some referrer policies).
    let r = d
        .send(
            "POST",
            "/failed/retry",
            &[
                ("Origin", "null"),
                ("Sec-Fetch-Site", "same-origin"),
                ("Cookie", &cookie),
            ],
            Some(("application/x-www-form-urlencoded", &form)),
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(db.status(a).await.as_deref(), Some("pending"));

    // Behind a reverse proxy that rewrites `Host`, the origin a browser without
    // `Sec-Fetch-Site` sends is the public name: accepted once that name is configured.
    let b = insert_failed(&db, "test", "{}", "e").await;
    let proxied = |d: &Dash, cookie: String, token: String| {
        let (app, addr) = (d.app.clone(), d.addr);
        async move {
            send(
                &app,
                request(
                    addr,
                    "POST",
                    "/failed/retry",
                    &[
                        ("Origin", "https://admin.example.com"),
                        ("X-Forwarded-Host", "admin.example.com"),
                        ("Cookie", &cookie),
                    ],
                    Some((
                        "application/x-www-form-urlencoded",
                        &format!("only={b}&mysqlq_csrf={token}"),
                    )),
                ),
            )
            .await
        }
    };
    let (_, cookie, token) = d.csrf("/failed").await;
    assert_eq!(proxied(&d, cookie, token).await.status, 403);
    let d = Dash::start(
        &db,
        DashboardOptions::new().allowed_host("admin.example.com"),
    )
    .await;
    let (_, cookie, token) = d.csrf("/failed").await;
    assert_eq!(proxied(&d, cookie, token).await.status, 303);
    assert_eq!(db.status(b).await.as_deref(), Some("pending"));
}

#[tokio::test]
async fn csrf_tokens_are_per_session_and_only_for_authenticated_callers() {
    let db = TestDb::new().await;
    let a = insert_failed(&db, "test", "{}", "e").await;
    // Without a token: each browser gets its own session, and its own CSRF token.
    let d = Dash::start(&db, DashboardOptions::new()).await;
    let (_, cookie1, token1) = d.csrf("/failed").await;
    let (_, cookie2, token2) = d.csrf("/failed").await;
    assert_ne!(cookie1, cookie2);
    assert_ne!(token1, token2);
    assert!(!token1.is_empty() && !cookie1.contains(&token1));
    // A session keeps its cookie and token.
    let r = d
        .send("GET", "/failed", &[("Cookie", &cookie1)], None)
        .await;
    assert!(r.set_cookies().is_empty(), "{:?}", r.set_cookies());
    assert_eq!(form_token(&r.body).as_deref(), Some(token1.as_str()));
    // One session's token does not work with another session's cookie.
    let r = d
        .post(
            "/failed/retry",
            Some(&cookie2),
            &format!("only={a}&mysqlq_csrf={token1}"),
        )
        .await;
    assert_eq!(r.status, 403);
    assert_eq!(db.status(a).await.as_deref(), Some("failed"));

    // With a token: nothing is handed to a caller that has not authenticated.
    let d = Dash::start(&db, DashboardOptions::new().token("s3cret-token")).await;
    let r = d.get("/failed").await;
    assert_eq!(r.status, 401);
    assert!(r.set_cookies().is_empty(), "{:?}", r.set_cookies());
    assert!(!r.body.contains("mysqlq_csrf"));
    let bearer = [("Authorization", "Bearer s3cret-token")];
    let r = d.send("GET", "/failed", &bearer, None).await;
    assert_eq!(r.status, 200);
    let token = form_token(&r.body).expect("a CSRF field");
    assert_ne!(
        token, token1,
        "bound to the access token, not one per process"
    );
    let r = d
        .send(
            "POST",
            "/failed/retry",
            &bearer,
            Some((
                "application/x-www-form-urlencoded",
                &format!("only={a}&mysqlq_csrf={token}"),
            )),
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(db.status(a).await.as_deref(), Some("pending"));

    // Behind a TLS-terminating proxy the cookies are Secure.
    let r = d
        .send(
            "GET",
            "/failed?token=s3cret-token",
            &[("X-Forwarded-Proto", "https")],
            None,
        )
        .await;
    assert_eq!(r.status, 303);
    assert!(
        r.set_cookies().iter().all(|c| c.contains("; Secure")),
        "{:?}",
        r.set_cookies()
    );
    let d = Dash::start(&db, DashboardOptions::new()).await;
    let r = d
        .send("GET", "/", &[("X-Forwarded-Proto", "https")], None)
        .await;
    assert!(
        r.set_cookies()[0].contains("; Secure"),
        "{:?}",
        r.set_cookies()
    );
    let r = d.get("/").await;
    assert!(
        !r.set_cookies()[0].contains("Secure"),
        "{:?}",
        r.set_cookies()
    );
}

#[tokio::test]
async fn payloads_and_errors_are_html_escaped() {
    let db = TestDb::new().await;
    let id = insert_failed(&db, "test", XSS_PAYLOAD, XSS_ERROR).await;
    let d = Dash::start(&db, DashboardOptions::new()).await;
    let r = d.get(&format!("/jobs/{id}")).await;
    assert_eq!(r.status, 200);
    assert!(!r.body.contains("<script>document"), "{}", r.body);
    assert!(
        r.body.contains("&lt;script&gt;document.title="),
        "{}",
        r.body
    );
    assert!(!r.body.contains("<img src=x"));
    assert!(r.body.contains("&lt;img src=x onerror="));
    let r = d.get("/failed").await;
    assert!(!r.body.contains("<img src=x"));
    assert!(r.body.contains("&lt;img src=x onerror="));
    // A notice from the address is escaped too.
    let r = d.get("/failed?msg=%3Cscript%3Ealert(1)%3C/script%3E").await;
    assert!(r.body.contains("&lt;script&gt;alert(1)"));
    assert!(!r.body.contains("<script>alert"));
}

#[tokio::test]
async fn a_large_payload_shows_its_head_and_downloads_whole() {
    let db = TestDb::new().await;
    let blob = "<z>".repeat(100_000);
    let payload = json!({"blob": blob, "n": 1}).to_string();
    let id = insert_failed(&db, "test", &payload, "e").await;
    let small = insert_failed(&db, "test", r#"{"n": 2}"#, "e").await;
    let d = Dash::start(&db, DashboardOptions::new()).await;
    let r = d.get(&format!("/jobs/{id}")).await;
    assert_eq!(r.status, 200);
    assert!(
        r.body
            .contains(&format!(r#"href="/jobs/{id}/payload.json" download"#)),
        "{:.2000}",
        r.body
    );
    assert!(
        r.body
            .contains("This document is 293 KiB: its first 16 KiB are shown as stored.")
    );
    assert!(
        r.body.len() < 64 * 1024,
        "the page holds the head only: {} bytes",
        r.body.len()
    );
    assert!(
        r.body.contains("&lt;z&gt;") && !r.body.contains("<z>"),
        "escaped"
    );
    let raw = d.get(&format!("/jobs/{id}/payload.json")).await;
    assert_eq!(raw.status, 200);
    assert_eq!(
        raw.header("content-disposition"),
        Some(format!("attachment; filename=\"job-{id}-payload.json\"").as_str())
    );
    assert_eq!(raw.header("content-type"), Some("application/json"));
    assert!(
        raw.header("content-security-policy").is_some(),
        "behind the guard"
    );
    let stored: Value = serde_json::from_str(&raw.body).unwrap();
    assert_eq!(stored["blob"].as_str().map(str::len), Some(300_000));
    // A small payload has no link: it is shown whole.
    let r = d.get(&format!("/jobs/{small}")).await;
    assert!(!r.body.contains("payload.json"), "{}", r.body);
    assert_eq!(d.get("/jobs/999999/payload.json").await.status, 404);
}

#[tokio::test]
async fn every_dashboard_query_uses_an_index() {
    let db = TestDb::new().await;
    db.exec("INSERT INTO job_queue (queue_name, kind, payload, status, finished_at) SELECT IF(seq % 10 = 0, 'other', 'test'), 'noop', JSON_OBJECT('n', seq), ELT(1 + seq % 4, 'pending', 'completed', 'failed', 'completed'), IF(seq % 4 = 0, NULL, UTC_TIMESTAMP(6)) FROM seq_1_to_5000").await;
    db.exec("ANALYZE TABLE job_queue").await;
    let mut conn = db.connect().await;
    let mut plans: Vec<(String, Vec<admin::PlanRow>)> =
        dashboard::dashboard_explain(&mut conn).await.unwrap();
    // The admin statements the dashboard reuses.
    for (tag, plan) in admin::stats_explain(&mut conn).await.unwrap() {
        if matches!(tag, "stats_queues" | "job_failed_list") {
            plans.push((tag.to_owned(), plan));
        }
    }
    // The queues and workers pages' own statements, each through an index (on tables with rows).
    db.exec(
        "INSERT INTO mysqlq_depth_minute (minute, queue_name, state, n) SELECT \
           DATE_FORMAT(UTC_TIMESTAMP() - INTERVAL seq MINUTE, '%Y-%m-%d %H:%i:00'), \
           IF(seq % 2 = 0, 'test', 'other'), 'ready', seq FROM seq_1_to_300; \
         INSERT INTO mysqlq_run_minute (minute, queue_name, kind, series, bucket, n) SELECT \
           DATE_FORMAT(UTC_TIMESTAMP() - INTERVAL seq MINUTE, '%Y-%m-%d %H:%i:00'), \
           IF(seq % 2 = 0, 'test', 'other'), 'noop', 'completed', 20, seq FROM seq_1_to_300; \
         INSERT INTO mysqlq_queue (queue_name, paused) SELECT CONCAT('q', seq), 1 FROM seq_1_to_50; \
         INSERT INTO mysqlq_worker (worker_id, started_at, last_seen_at) SELECT CONCAT('w', seq), \
           UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) - INTERVAL seq MINUTE FROM seq_1_to_3000; \
         UPDATE mysqlq_leader SET leader_id = 'w1#x', expires_at = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR; \
         ANALYZE TABLE mysqlq_depth_minute, mysqlq_run_minute, mysqlq_queue, mysqlq_worker",
    )
    .await;
    let mut own: Vec<(&str, Vec<admin::PlanRow>)> =
        mysqlq::store::insight_explain(&mut conn, "test")
            .await
            .unwrap();
    own.extend(
        mysqlq::store::workers_page_explain(&mut conn)
            .await
            .unwrap(),
    );
    let tags: Vec<&str> = own.iter().map(|(t, _)| *t).collect();
    assert_eq!(
        tags,
        [
            "depth_minute_read",
            "run_minute_queue",
            "queue_settings_all",
            "workers_live",
            "workers_leader",
            "workers_running",
        ]
    );
    for (tag, plan) in &own {
        let want = match *tag {
            "workers_live" => "idx_worker_seen",
            "workers_running" => "idx_job_recover",
            _ => "PRIMARY",
        };
        assert!(
            plan.iter().any(|row| row.key.as_deref() == Some(want))
                && plan.iter().all(|row| row.access.as_deref() != Some("ALL")),
            "{tag} does not read {want}: {plan:?}"
        );
        assert!(
            plan.iter()
                .all(|row| !row.extra.as_deref().unwrap_or("").contains("filesort")),
            "{tag} sorts: {plan:?}"
        );
    }
    plans.extend(own.into_iter().map(|(t, p)| (t.to_owned(), p)));
    assert!(plans.len() >= 4, "{plans:?}");
    for (name, plan) in &plans {
        for row in plan {
            let on_jobs = matches!(row.table.as_deref(), Some("job_queue" | "j"));
            assert!(
                !(on_jobs && row.access.as_deref() == Some("ALL")),
                "{name} scans job_queue: {plan:?}"
            );
        }
    }
}

#[tokio::test]
async fn the_cli_serves_the_dashboard() {
    let db = TestDb::new().await;
    insert_failed(&db, "test", "{}", "e").await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mysqlq-test-worker"))
        .args(["dashboard", "--addr", "127.0.0.1:0", "--read-only"])
        .env("DATABASE_URL", db.url())
        .env_remove("MYSQLQ_DASHBOARD_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn mysqlq-test-worker dashboard");
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(20), out.next_line())
        .await
        .expect("the dashboard prints its address")
        .unwrap()
        .expect("a line");
    let url = line
        .strip_prefix("dashboard listening on http://")
        .unwrap_or_else(|| panic!("{line}"));
    let addr: SocketAddr = url.trim_end_matches('/').parse().unwrap();
    assert!(addr.ip().is_loopback());
    let r = http(request(addr, "GET", "/failed", &[], None)).await;
    assert_eq!(r.status, 200);
    assert!(r.body.contains("1 failed"));
    assert!(r.body.contains("read-only"));
    child.kill().await.unwrap();
    let help = tokio::process::Command::new(env!("CARGO_BIN_EXE_mysqlq-test-worker"))
        .args(["dashboard", "--help"])
        .output()
        .await
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in ["--addr", "--read-only", "--token", "127.0.0.1:8080"] {
        assert!(help.contains(flag), "{help}");
    }
}

// ---------------------------------------------------------------------------------------------
// the queues and workers pages

/// `/jobs?q=queue:<queue> state:<state>` as the queues pages link it.
fn state_search(queue: &str, state: &str) -> String {
    let q: String = form_urlencoded_serialize(&format!("queue:{queue} state:{state}"));
    format!("/jobs?q={q}")
}

/// A query value percent-encoded as the dashboard writes it (`application/x-www-form-urlencoded`).
fn form_urlencoded_serialize(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'*' | b'-' | b'.' | b'_' => {
                char::from(b).to_string()
            }
            b' ' => "+".to_owned(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The ids of the job links (`/jobs/<id>"`) in a page.
fn linked_ids(body: &str) -> Vec<u64> {
    body.match_indices("href=\"/jobs/")
        .filter_map(|(i, _)| {
            let rest = &body[i + 12..];
            rest[..rest.find('"')?].parse().ok()
        })
        .collect()
}

/// The microseconds the latency tables show for a bucket's estimate.
fn estimate_us(ms: u64) -> u128 {
    mysqlq::latency::estimate(mysqlq::latency::bucket_of(Duration::from_millis(ms))).as_micros()
}

/// A `mysqlq_worker` row: `seen` seconds since its last report, stopped `stopped` seconds ago.
async fn insert_worker(
    db: &TestDb,
    id: &str,
    queues: &str,
    seen: u32,
    stopped: Option<u32>,
    config: &str,
) {
    sqlx::query(
        "INSERT INTO mysqlq_worker (worker_id, host, pid, queues, concurrency, running, \
         started_at, last_seen_at, stopped_at, config) VALUES (?, 'host-a', 42, ?, 8, 3, \
         UTC_TIMESTAMP(6) - INTERVAL 2 HOUR, UTC_TIMESTAMP(6) - INTERVAL ? SECOND, \
         UTC_TIMESTAMP(6) - INTERVAL ? SECOND, ?)",
    )
    .bind(id)
    .bind(queues)
    .bind(seen)
    .bind(stopped)
    .bind(config)
    .execute(&db.pool)
    .await
    .expect("insert a worker row");
}

/// `n` running rows of `queue` held by `holder`, claimed 2 minutes ago, their lease 1 h ahead.
async fn insert_running(db: &TestDb, queue: &str, holder: &str, n: u32) {
    sqlx::query(
        "INSERT INTO job_queue (queue_name, kind, payload, status, attempts, locked_by, \
         claim_token, claimed_at, lease_expires_at) \
         SELECT ?, 'noop', '{}', 'processing', 1, ?, UUID(), UTC_TIMESTAMP(6) - INTERVAL 2 MINUTE, \
           UTC_TIMESTAMP(6) + INTERVAL 1 HOUR FROM seq_1_to_10000 WHERE seq <= ?",
    )
    .bind(queue)
    .bind(holder)
    .bind(n)
    .execute(&db.pool)
    .await
    .expect("insert running rows");
}

#[tokio::test]
async fn the_queues_pages_show_states_the_last_hour_limits_and_workers() {
    let db = TestDb::new().await;
    let ready = enqueue_noops(&db, 3).await;
    let failed = insert_failed(&db, "test", "{}", "e").await;
    db.exec(
        "INSERT INTO job_queue (queue_name, kind, payload, status, attempts, available_at) VALUES \
         ('test', 'noop', '{}', 'pending', 0, UTC_TIMESTAMP(6) + INTERVAL 1 HOUR), \
         ('test', 'noop', '{}', 'pending', 1, UTC_TIMESTAMP(6) + INTERVAL 1 HOUR), \
         ('test', 'noop', '{}', 'waiting', 0, UTC_TIMESTAMP(6)), \
         ('limited', 'noop', '{}', 'pending', 0, UTC_TIMESTAMP(6) - INTERVAL 1 SECOND), \
         ('limited', 'noop', '{}', 'pending', 0, UTC_TIMESTAMP(6) - INTERVAL 1 SECOND)",
    )
    .await;
    insert_running(&db, "test", "w-1", 2).await;
    insert_running(&db, "limited", "w-1", 1).await;
    let rate: mysqlq::Rate = "10/s".parse().unwrap();
    mysqlq::admin::Admin::new(db.pool.clone())
        .set_queue_limits(
            "limited",
            mysqlq::admin::QueueLimits {
                rate: Some(rate),
                global: Some(1),
            },
        )
        .await
        .unwrap();
    let bucket = |ms| mysqlq::latency::bucket_of(Duration::from_millis(ms));
    db.exec(&format!(
        "INSERT INTO mysqlq_run_minute (minute, queue_name, kind, series, bucket, n) VALUES \
         (DATE_FORMAT(UTC_TIMESTAMP() - INTERVAL 1 MINUTE, '%Y-%m-%d %H:%i:00'), 'test', 'noop', 'completed', {b20}, 30), \
         (DATE_FORMAT(UTC_TIMESTAMP() - INTERVAL 1 MINUTE, '%Y-%m-%d %H:%i:00'), 'test', 'noop', 'failed', {b20}, 3), \
         (DATE_FORMAT(UTC_TIMESTAMP() - INTERVAL 1 MINUTE, '%Y-%m-%d %H:%i:00'), 'test', 'noop', 'pickup', {b5}, 33); \
         INSERT INTO mysqlq_depth_minute (minute, queue_name, state, n) VALUES \
         (DATE_FORMAT(UTC_TIMESTAMP() - INTERVAL 2 MINUTE, '%Y-%m-%d %H:%i:00'), 'test', 'ready', 3), \
         (DATE_FORMAT(UTC_TIMESTAMP() - INTERVAL 1 MINUTE, '%Y-%m-%d %H:%i:00'), 'test', 'ready', 5), \
         (DATE_FORMAT(UTC_TIMESTAMP() - INTERVAL 1 MINUTE, '%Y-%m-%d %H:%i:00'), 'test', 'running', 1)",
        b20 = bucket(20),
        b5 = bucket(5),
    ))
    .await;
    insert_worker(
        &db,
        "w-1",
        "test,limited",
        4,
        None,
        r#"{"queues": {"test": {"concurrency": 4}, "limited": {"concurrency": null, "global": 1}}, "concurrency": 8, "lease_ms": 30000, "version": "9.9.9", "redis": false}"#,
    )
    .await;
    let d = Dash::start(&db, DashboardOptions::new()).await;

    // `/queues`: each count is a link to its search.
    let r = d.get("/queues").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let row = |queue: &str| {
        let at = r
            .body
            .find(&format!(r#"<tr data-queue="{queue}">"#))
            .unwrap_or_else(|| panic!("no row of {queue}: {}", r.body));
        let row = &r.body[at..];
        row[..row.find("</tr>").unwrap()].to_owned()
    };
    let test = row("test");
    for (state, n) in [
        ("waiting", 1),
        ("ready", 3),
        ("rate-limited", 0),
        ("scheduled", 1),
        ("retrying", 1),
        ("running", 2),
        ("failed", 1),
    ] {
        let cell = format!(
            r#"<td class="num" data-state="{state}"><a href="{}">{n}</a></td>"#,
            state_search("test", state)
        );
        assert!(test.contains(&cell), "{cell} in {test}");
    }
    let limited = row("limited");
    for (state, n) in [("ready", 0), ("rate-limited", 2), ("running", 1)] {
        let cell = format!(
            r#"<td class="num" data-state="{state}"><a href="{}">{n}</a></td>"#,
            state_search("limited", state)
        );
        assert!(limited.contains(&cell), "{cell} in {limited}");
    }
    assert!(
        limited.contains(r#"data-f="limits">rate 10/s · global 1<"#),
        "{limited}"
    );
    assert!(test.contains(r#"data-f="limits">none<"#), "{test}");
    assert!(
        test.contains(r#"data-f="completed-per-min">0.5<"#),
        "{test}"
    );
    assert!(test.contains(r#"data-f="failed-share">9.1 %<"#), "{test}");
    assert!(
        test.contains(&format!(
            r#"data-f="run-p95" data-us="{}""#,
            estimate_us(20)
        )),
        "{test}"
    );
    assert!(
        test.contains(&format!(
            r#"data-f="pickup-p95" data-us="{}""#,
            estimate_us(5)
        )),
        "{test}"
    );
    assert!(test.contains(r#"data-f="paused">running<"#));
    assert!(test.contains(r#"<a href="/queues/test">test</a>"#));
    assert!(test.contains("Pause test"));
    // The links search what they count.
    let found = linked_ids(&d.get(&state_search("test", "ready")).await.body);
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(ready.iter().all(|id| found.contains(id)) && !found.contains(&failed));
    let found = linked_ids(&d.get(&state_search("test", "failed")).await.body);
    assert_eq!(found, [failed]);
    assert_eq!(
        linked_ids(&d.get(&state_search("limited", "rate-limited")).await.body).len(),
        2
    );

    // `/queues/test`: the depth and throughput charts, percentiles per kind, the workers.
    let r = d.get("/queues/test").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let at = r.body.find(r#"id="depth-chart""#).expect("the depth chart");
    let depth = &r.body[at..at + r.body[at..].find("</figure>").unwrap()];
    for (class, ago, n) in [("ready", 2, 3), ("ready", 1, 5), ("running", 1, 1)] {
        let bar = format!(r#"data-minutes-ago="{ago}" data-n="{n}""#);
        let found = depth.match_indices(&bar).any(|(i, _)| {
            depth[..i]
                .rsplit("<rect ")
                .next()
                .unwrap()
                .contains(&format!("series-{class}"))
        });
        assert!(found, "a {class} bar {bar} in {depth}");
    }
    assert!(
        depth.contains(r#"role="img""#) && depth.contains("aria-label=\"Jobs by state per minute")
    );
    assert!(depth.contains("latest minute: waiting 0, ready 5, rate-limited 0, scheduled 0, retrying 0, running 1, failed 0"), "{depth}");
    assert!(depth.contains("<details>") && depth.contains(r#"<td class="num">5</td>"#));
    assert!(!depth.contains("fill="), "colours come from CSS classes");
    let at = r
        .body
        .find(r#"id="throughput-chart""#)
        .expect("the throughput chart");
    let through = &r.body[at..at + r.body[at..].find("</figure>").unwrap()];
    assert!(
        through.contains(r#"class="series-completed""#) && through.contains(r#"data-n="30""#),
        "{through}"
    );
    assert!(through.contains(r#"class="series-failed""#) && through.contains(r#"data-n="3""#));
    let at = r
        .body
        .find(r#"<tr data-kind="noop">"#)
        .expect("the kind's row");
    let kind = &r.body[at..at + r.body[at..].find("</tr>").unwrap()];
    for (f, ms) in [
        ("run-p50", 20),
        ("run-p99", 20),
        ("pickup-p50", 5),
        ("pickup-p95", 5),
    ] {
        assert!(
            kind.contains(&format!(r#"data-f="{f}" data-us="{}""#, estimate_us(ms))),
            "{f} in {kind}"
        );
    }
    assert!(r.body.contains(r#"<tr data-kind="*">"#));
    let at = r
        .body
        .find(r#"<tr data-worker="w-1">"#)
        .expect("the worker's row");
    let worker = &r.body[at..at + r.body[at..].find("</tr>").unwrap()];
    assert!(
        worker.contains(r#"data-f="queue-concurrency">4<"#),
        "{worker}"
    );
    assert!(r.body.contains("work --queues test=N"), "the flag is named");
    assert!(r.body.contains("cannot change while it runs"));
    assert!(r.body.contains(r#"id="limit-rate">none<"#));
    assert!(r.body.contains(r#"id="limits-form""#) && form_token(&r.body).is_some());
    let r = d.get("/queues/limited").await;
    assert!(r.body.contains(r#"id="limit-rate">10/s<"#), "{}", r.body);
    assert!(r.body.contains(r#"id="limit-global">1<"#));
    assert!(
        r.body.contains(r#"value="10/s""#),
        "the form holds the current rate"
    );
    assert!(
        r.body.contains("shares the worker&#39;s slots")
            || r.body.contains("shares the worker's slots"),
        "{}",
        r.body
    );
    assert_eq!(d.get("/queues/nope").await.status, 404);
    assert_eq!(d.get("/queues/bad%20name").await.status, 400);
}

#[tokio::test]
async fn the_limits_form_writes_and_audits_the_limits() {
    let db = TestDb::new().await;
    enqueue_noops(&db, 1).await;
    let d = Dash::start(&db, DashboardOptions::new()).await;
    let (_, cookie, token) = d.csrf("/queues/test").await;
    let limits = "SELECT CONCAT_WS(' ', IFNULL(rate_limit, '-'), IFNULL(rate_period_us, '-'), \
                  IFNULL(global_limit, '-')) FROM mysqlq_queue WHERE queue_name = 'test'";
    let read = |sql: &'static str| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, String>(sql)
                .fetch_optional(&pool)
                .await
                .unwrap()
        }
    };
    let r = d
        .post(
            "/queues/test/limits",
            Some(&cookie),
            "rate=100%2Fs&global=5",
        )
        .await;
    assert_eq!(r.status, 403, "no CSRF field: {}", r.body);
    assert_eq!(read(limits).await, None);

    let r = d
        .post(
            "/queues/test/limits",
            Some(&cookie),
            &format!("rate=100%2Fs&global=5&mysqlq_csrf={token}"),
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let back = r.header("location").unwrap().to_owned();
    assert!(back.starts_with("/queues/test?msg="), "{back}");
    assert_eq!(read(limits).await.as_deref(), Some("100 1000000 5"));
    let audit = "SELECT CONCAT_WS('|', action, actor, queue_name, detail) FROM mysqlq_audit \
                 ORDER BY id DESC LIMIT 1";
    assert_eq!(
        read(audit).await.as_deref(),
        Some("limits|dashboard|test|rate 100/s, global 5")
    );
    let page = d.get(&back).await;
    assert!(
        page.body.contains("limits of test: rate 100/s · global 5"),
        "{}",
        page.body
    );
    assert!(page.body.contains(r#"id="limit-global">5<"#));

    for bad in ["global=0", "global=many", "rate=fast", "rate=5"] {
        let r = d
            .post(
                "/queues/test/limits",
                Some(&cookie),
                &format!("{bad}&mysqlq_csrf={token}"),
            )
            .await;
        assert_eq!(r.status, 400, "{bad}: {}", r.body);
    }
    assert_eq!(
        read(limits).await.as_deref(),
        Some("100 1000000 5"),
        "unchanged"
    );

    // Empty fields clear the limits.
    let r = d
        .post(
            "/queues/test/limits",
            Some(&cookie),
            &format!("rate=&global=&mysqlq_csrf={token}"),
        )
        .await;
    assert_eq!(r.status, 303);
    assert_eq!(read(limits).await.as_deref(), Some("- - -"));
    assert_eq!(
        read(audit).await.as_deref(),
        Some("limits|dashboard|test|rate none, global none")
    );

    // Pause from the queue's page comes back to it.
    let r = d
        .post(
            "/queues/pause",
            Some(&cookie),
            &format!("queue=test&from=queue&mysqlq_csrf={token}"),
        )
        .await;
    assert!(
        r.header("location")
            .unwrap()
            .starts_with("/queues/test?msg=paused"),
        "{:?}",
        r.header("location")
    );
    assert!(d.get("/queues/test").await.body.contains("Resume test"));
}

#[tokio::test]
async fn the_workers_page_lists_each_worker_its_jobs_and_the_leader() {
    let db = TestDb::new().await;
    let config = r#"{"queues": {"test": {"concurrency": 4}, "other": {"concurrency": null, "rate": "5/s"}}, "concurrency": 8, "lease_ms": 30000, "version": "9.9.9", "redis": false}"#;
    insert_worker(&db, "w-1", "test,other", 4, None, config).await;
    insert_worker(&db, "w-stale", "test", 300, None, config).await;
    insert_worker(&db, "w-stopped", "test", 600, Some(600), config).await;
    insert_worker(&db, "w-gone", "test", 7200, Some(7200), config).await;
    db.exec(
        "UPDATE mysqlq_leader SET leader_id = 'w-1#0af3', elected_at = UTC_TIMESTAMP(6), \
         expires_at = UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE WHERE name = 'maintenance'",
    )
    .await;
    insert_running(&db, "test", "w-1", 55).await;
    insert_running(&db, "test", "redis-relay:w-stale#9e1c", 2).await;
    insert_running(&db, "other", "ghost", 1).await;
    let d = Dash::start(&db, DashboardOptions::new()).await;
    let r = d.get("/workers").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let card = |id: &str| {
        let at = r
            .body
            .find(&format!(r#"data-worker="{id}""#))
            .unwrap_or_else(|| panic!("no card of {id}: {}", r.body));
        let card = &r.body[at..];
        card[..card.find("</section>").unwrap()].to_owned()
    };
    let w1 = card("w-1");
    assert!(w1.contains(r#"<span class="badge leader""#), "{w1}");
    for want in [
        "host-a",
        "<dd>42</dd>",
        "9.9.9",
        "test=4, other (rate 5/s)",
        "3 / 8",
        "4 s ago",
    ] {
        assert!(w1.contains(want), "{want} in {w1}");
    }
    assert!(!w1.contains("stale") && !w1.contains("badge stopped"));
    let ids = linked_ids(&w1);
    assert_eq!(ids.len(), 50, "50 running jobs listed");
    assert!(w1.contains("and 5 more →"), "{w1}");
    assert!(
        w1.contains(r#"href="/jobs?q=state%3Arunning+worker%3Aw-1""#),
        "the rest are a search away: {w1}"
    );
    assert!(
        w1.contains("2m 0s") || w1.contains("2m 1s"),
        "running for: {w1}"
    );
    assert!(
        w1.contains("in 59m") || w1.contains("in 1h 0m"),
        "lease: {w1}"
    );
    assert!(w1.contains(r#"<td class="num">1/5</td>"#), "attempt: {w1}");
    let stale = card("w-stale");
    assert!(
        stale.contains("badge stale") && !stale.contains("badge leader"),
        "{stale}"
    );
    assert!(stale.contains("5 min ago"));
    assert!(card("w-stopped").contains("badge stopped"));
    assert!(!r.body.contains("w-gone"), "stopped over an hour ago");
    let at = r.body.find(r#"id="in-streams""#).expect("the relayed jobs");
    let streams = &r.body[at..];
    assert!(streams.contains("relayed by w-stale: 2"), "{streams}");
    let at = r
        .body
        .find(r#"id="other-holders""#)
        .expect("jobs of unlisted holders");
    assert!(r.body[at..].contains("ghost: 1"));
    // The listed jobs are the worker's, and so are the search's.
    let list = ids
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let held = format!(
        "SELECT COUNT(*) FROM job_queue WHERE id IN ({list}) AND status = 'processing' \
         AND locked_by = 'w-1'"
    );
    assert_eq!(db.scalar(&held).await, 50);
    let found = linked_ids(&d.get("/jobs?q=state%3Arunning+worker%3Aw-1").await.body);
    let list = found
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let held = format!("SELECT COUNT(*) FROM job_queue WHERE id IN ({list}) AND locked_by = 'w-1'");
    assert_eq!(db.scalar(&held).await, 50, "{found:?}");

    // Past 5,000 running jobs: counts per worker only, and the page says so.
    insert_running(&db, "test", "w-1", 4950).await;
    let r = d.get("/workers").await;
    assert_eq!(r.status, 200);
    assert!(
        r.body.contains(r#"id="running-capped""#),
        "{}",
        &r.body[..2000.min(r.body.len())]
    );
    assert!(
        !r.body.contains("running-jobs"),
        "no job listed past the cap"
    );
    assert!(r.body.contains("3 / 8"), "the worker's own count");
}

// ---------------------------------------------------------------------------------------------
// headless Chromium through WebDriver

/// Sum of the worker's claim polls so far (flushed to `mysqlq_stats_minute` every 200 ms).
async fn polls(db: &TestDb) -> i64 {
    db.scalar("SELECT CAST(IFNULL(SUM(polls), 0) AS SIGNED) FROM mysqlq_stats_minute")
        .await
}

#[tokio::test]
async fn in_chromium_a_click_cancels_a_waiting_job_with_its_reason() {
    let db = TestDb::new().await;
    let browser = Browser::start().await;
    let id = enqueue_noops(&db, 1).await[0];
    let d = Dash::start(&db, DashboardOptions::new()).await;
    browser.goto(&format!("http://{}/jobs/{id}", d.addr)).await;
    browser
        .find(r#"input[name="reason"]"#)
        .await
        .send_keys("duplicate order")
        .await
        .expect("type the reason");
    browser.click("#cancel").await;
    browser.wait_contains("p.notice", "cancelled 1").await;
    assert_eq!(db.status(id).await.as_deref(), Some("cancelled"));
    assert_eq!(browser.text("#cancelled-by").await, "dashboard");
    assert_eq!(browser.text("#cancel-reason").await, "duplicate order");
    assert!(
        browser.client.find(Locator::Css("#cancel")).await.is_err(),
        "a cancelled job offers no cancel button"
    );
    browser.quit().await;
}

#[tokio::test]
async fn in_chromium_counts_retry_pause_and_no_script_runs() {
    let db = TestDb::new().await;
    let browser = Browser::start().await;
    enqueue_noops(&db, 3).await;
    let failed = insert_failed(&db, "test", r#"{"n": 41}"#, "upstream returned 503").await;
    let xss = insert_failed(&db, "xss", XSS_PAYLOAD, XSS_ERROR).await;
    let d = Dash::start(&db, DashboardOptions::new()).await;
    let base = format!("http://{}", d.addr);

    // Overview: the counts are the database's, and the script refreshes them live.
    browser.goto(&format!("{base}/")).await;
    let ready = db.scalar("SELECT COUNT(*) FROM job_queue WHERE queue_name = 'test' AND status = 'pending' AND available_at <= UTC_TIMESTAMP(6)").await;
    let ready_cell = r#"td[data-q="test"][data-f="ready"]"#;
    assert_eq!(browser.text(ready_cell).await, ready.to_string());
    assert_eq!(
        browser.text(r#"td[data-q="test"][data-f="failed"]"#).await,
        "1"
    );
    assert_eq!(
        browser.text(r#"td[data-q="test"][data-f="paused"]"#).await,
        "running"
    );
    enqueue_noops(&db, 1).await;
    browser
        .wait_text(
            ready_cell,
            &(ready + 1).to_string(),
            Duration::from_secs(10),
        )
        .await;
    assert!(browser.text("#live").await.starts_with("live"));
    browser.screenshot("dashboard-overview.png").await;

    browser.goto(&format!("{base}/jobs")).await;
    assert!(browser.text("#jobs").await.contains("ready"));
    browser.screenshot("dashboard-jobs.png").await;
    browser.goto(&format!("{base}/jobs/{failed}")).await;
    assert!(browser.text("#payload").await.contains("\"n\": 41"));
    browser.screenshot("dashboard-job.png").await;

    // Retry a failed job by clicking its row's button.
    browser.goto(&format!("{base}/failed")).await;
    browser.screenshot("dashboard-failed.png").await;
    browser
        .click(&format!(r#"tr[data-id="{failed}"] button.retry-one"#))
        .await;
    browser.wait_contains(".notice", "retried 1").await;
    assert_eq!(db.status(failed).await.as_deref(), Some("pending"));

    // A worker drains the queue; pause by clicking; a new job stays pending while the worker
    // keeps polling; resume by clicking and it completes.
    let worker = db.worker().start().await.unwrap();
    db.wait_for(
        "the queue drained",
        "SELECT COUNT(*) = 0 FROM job_queue WHERE queue_name = 'test' AND status IN ('pending', 'processing')",
        Duration::from_secs(20),
    )
    .await;
    browser.goto(&format!("{base}/queues")).await;
    browser
        .click(r#"tr[data-queue="test"] button[value="pause"]"#)
        .await;
    browser.wait_contains(".notice", "paused queue test").await;
    assert_eq!(
        browser.text(r#"td[data-q="test"][data-f="paused"]"#).await,
        "paused"
    );
    browser.screenshot("dashboard-queues-paused.png").await;
    let held = Noop { n: 99 }.enqueue(&db.pool).await.unwrap().id();
    let before = polls(&db).await;
    db.wait_for(
        "the worker polled 5 times after the enqueue",
        &format!(
            "SELECT CAST(IFNULL(SUM(polls), 0) AS SIGNED) >= {} FROM mysqlq_stats_minute",
            before + 5
        ),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(
        db.status(held.0).await.as_deref(),
        Some("pending"),
        "a paused queue is not claimed from"
    );
    browser
        .click(r#"tr[data-queue="test"] button[value="resume"]"#)
        .await;
    browser.wait_contains(".notice", "resumed queue test").await;
    db.wait_for(
        "the held job completed after resume",
        &format!(
            "SELECT COUNT(*) FROM job_queue WHERE id = {} AND status = 'completed'",
            held.0
        ),
        Duration::from_secs(20),
    )
    .await;
    worker.shutdown().await.unwrap();

    // A <script> payload is shown as text and never runs.
    browser.goto(&format!("{base}/jobs/{xss}")).await;
    let title = browser.script("return document.title;").await;
    assert_eq!(title, json!(format!("Job {xss} · mysqlq")));
    assert_eq!(
        browser.script("return typeof window.pwned;").await,
        json!("undefined"),
        "the payload's script ran"
    );
    assert!(
        browser
            .text("#payload")
            .await
            .contains("<script>document.title='pwned';window.pwned=1</script>")
    );
    assert!(browser.text("#last-error").await.contains("<img src=x"));
    browser.screenshot("dashboard-job-script-payload.png").await;
    browser.quit().await;
}

// ---------------------------------------------------------------------------------------------
// timing with a million rows (prints, asserts only that pages answer)

#[tokio::test]
#[ignore = "inserts 1,000,000 rows; run with --release -- --ignored --nocapture"]
async fn page_timings_with_a_million_completed_rows() {
    let db = TestDb::new().await;
    let t = Instant::now();
    db.exec("INSERT INTO job_queue (queue_name, kind, payload, status, attempts, created_at, available_at, first_claimed_at, finished_at) \
        SELECT 'test', 'noop', JSON_OBJECT('n', seq), 'completed', 1, \
          UTC_TIMESTAMP(6) - INTERVAL (1000001 - seq) SECOND, UTC_TIMESTAMP(6) - INTERVAL (1000001 - seq) SECOND, \
          UTC_TIMESTAMP(6) - INTERVAL (1000001 - seq) SECOND, UTC_TIMESTAMP(6) - INTERVAL (1000000 - seq) SECOND \
        FROM seq_1_to_1000000").await;
    db.exec("INSERT INTO job_queue (queue_name, kind, payload, status, attempts, max_attempts, last_error, finished_at) SELECT IF(seq % 2 = 0, 'test', 'other'), 'noop', JSON_OBJECT('n', seq), 'failed', 3, 3, 'boom', UTC_TIMESTAMP(6) FROM seq_1_to_100").await;
    db.exec("INSERT INTO job_queue (queue_name, kind, payload) SELECT IF(seq % 2 = 0, 'test', 'other'), 'noop', JSON_OBJECT('n', seq) FROM seq_1_to_100").await;
    db.exec("ANALYZE TABLE job_queue").await;
    println!("inserted 1,000,200 rows in {:.1?}", t.elapsed());
    assert_eq!(db.scalar("SELECT COUNT(*) FROM job_queue").await, 1_000_200);
    let some_id = db
        .scalar("SELECT CAST(MAX(id) DIV 2 AS SIGNED) FROM job_queue")
        .await;
    let d = Dash::start(&db, DashboardOptions::new()).await;
    let paths = [
        "/".to_owned(),
        "/api/overview".to_owned(),
        "/queues".to_owned(),
        "/failed".to_owned(),
        "/jobs".to_owned(),
        format!("/jobs?c=i.0.{some_id}"),
        "/jobs?state=completed".to_owned(),
        "/jobs?state=failed".to_owned(),
        "/jobs?state=pending".to_owned(),
        "/jobs?state=pending&queue=other".to_owned(),
        "/jobs?state=completed&queue=other".to_owned(),
        "/jobs?queue=other".to_owned(),
        "/jobs?kind=noop&state=failed".to_owned(),
        format!("/jobs/{some_id}"),
    ];
    println!("{:<50} {:>10}", "page", "ms");
    for p in &paths {
        let _ = d.get(p).await; // warm
        let mut best = Duration::MAX;
        for _ in 0..3 {
            let t = Instant::now();
            let r = d.get(p).await;
            best = best.min(t.elapsed());
            assert_eq!(r.status, 200, "{p}: {}", r.body);
            if (p.starts_with("/jobs?state=completed") && !p.contains("queue=")) || p == "/jobs" {
                assert_eq!(r.body.matches("<a href=\"/jobs/").count(), 50, "{p}");
            }
        }
        println!("{p:<50} {:>10.1}", best.as_secs_f64() * 1000.0);
    }
}

#[tokio::test]
async fn the_workflow_page_draws_the_graph_links_each_step_and_cancels_the_workflow() {
    use mysqlq::workflow::Workflow;
    use mysqlq_tests::jobs::Noop;
    let db = TestDb::new().await;
    let id = Workflow::new("checkout")
        .step("charge", Noop { n: 1 })
        .unwrap()
        .step_after("reserve", Noop { n: 2 }, ["charge"])
        .unwrap()
        .step_after("receipt", Noop { n: 3 }, ["charge"])
        .unwrap()
        .step_after("ship", Noop { n: 4 }, ["reserve", "receipt"])
        .unwrap()
        .fan_out("notify", (0..20).map(|n| Noop { n }), ["ship"])
        .unwrap()
        .enqueue(&db.pool)
        .await
        .unwrap();
    let jobs: Vec<u64> = sqlx::query_scalar(
        "SELECT job_id FROM mysqlq_wf_step WHERE name IN ('charge', 'reserve', 'receipt', 'ship')",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let d = Dash::start(&db, DashboardOptions::new()).await;
    let list = d.get("/workflows").await;
    assert_eq!(list.status, 200);
    assert!(
        list.body.contains(&format!("/workflows/{id}")) && list.body.contains("checkout"),
        "{}",
        list.body
    );
    let (page, cookie, token) = d.csrf(&format!("/workflows/{id}")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains(r#"<svg id="workflow-graph""#),
        "{}",
        page.body
    );
    for job in &jobs {
        assert!(
            page.body.contains(&format!(r#"href="/jobs/{job}""#)),
            "a link to job {job}"
        );
    }
    // Four steps drawn one by one, the 20-wide fan-out as one node with its counts.
    assert_eq!(
        page.body.matches(r#"class="step""#).count(),
        5,
        "{}",
        page.body
    );
    assert!(
        page.body.contains("notify ×20 (waiting 20)"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains(r#"data-state="pending""#)
            && page.body.contains(r#"data-state="waiting""#)
    );
    // Cancel the whole workflow from the page: every open step, recorded under the user.
    let r = d
        .post(
            &format!("/workflows/{id}/cancel"),
            Some(&cookie),
            &format!("reason=no+stock&mysqlq_csrf={token}"),
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(db.count("cancelled").await, 24);
    let after = d.get(&format!("/workflows/{id}")).await;
    assert!(after.body.contains("no stock"), "{}", after.body);
    assert_eq!(d.get("/workflows/999999").await.status, 404);
}

/// A hidden field's value in a page.
fn hidden(body: &str, name: &str) -> String {
    let rest = body
        .split(&format!(r#"name="{name}" value=""#))
        .nth(1)
        .unwrap_or_else(|| panic!("no field {name}: {body}"));
    rest.split('"')
        .next()
        .unwrap()
        .replace("&amp;", "&")
        .replace("&quot;", "\"")
}

#[tokio::test]
async fn acting_on_all_matching_confirms_the_exact_count_and_audits_the_token_name() {
    let db = TestDb::new().await;
    db.exec("INSERT INTO job_queue (queue_name, kind, payload, available_at) SELECT 'q', 'k', JSON_OBJECT('n', seq), UTC_TIMESTAMP(6) + INTERVAL 1 HOUR FROM seq_1_to_120").await;
    db.exec("INSERT INTO job_queue (queue_name, kind, payload) SELECT 'q', 'other', JSON_OBJECT('n', seq), FROM seq_1_to_400".replace("), FROM", ") FROM").as_str()).await;
    let d = Dash::start(
        &db,
        DashboardOptions::new().named_token("alice", "s3cret-alice-token"),
    )
    .await;
    let auth = [("Authorization", "Bearer s3cret-alice-token")];
    let q = "state:scheduled kind:k";
    let page = d
        .send(
            "GET",
            &format!("/jobs?q={}", q.replace(' ', "%20")),
            &auth,
            None,
        )
        .await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("id=\"all-run_now\"") && page.body.contains("id=\"all-cancel\""));
    assert!(
        !page.body.contains("id=\"all-retry\""),
        "retry applies to no scheduled job"
    );
    // The tabs count the operator states (unfinished exactly; completed is not counted).
    assert!(
        page.body.contains(r#"data-state="scheduled">120<"#),
        "{}",
        page.body
    );
    assert!(
        page.body.contains(r#"data-state="ready">400<"#),
        "{}",
        page.body
    );
    assert!(!page.body.contains(r#"data-state="completed""#));
    let csrf = form_token(&page.body).unwrap();
    let post = |path: &'static str, form: String| {
        let d = &d;
        async move {
            d.send(
                "POST",
                path,
                &[("Authorization", "Bearer s3cret-alice-token")],
                Some(("application/x-www-form-urlencoded", &form)),
            )
            .await
        }
    };
    let enc = |v: &str| {
        v.bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                    char::from(b).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect::<String>()
    };
    let confirm = post(
        "/jobs/confirm",
        format!("mysqlq_csrf={csrf}&action=cancel&q={}", enc(q)),
    )
    .await;
    assert_eq!(confirm.status, 200, "{}", confirm.body);
    assert!(
        confirm.body.contains("id=\"confirm-n\">120<"),
        "{}",
        confirm.body
    );
    assert!(
        confirm.body.contains("mysqlq-cli jobs cancel --filter &apos;state:scheduled kind:k&apos; --max 120 --by &apos;alice&apos;")
            || confirm.body.contains("mysqlq-cli jobs cancel --filter 'state:scheduled kind:k' --max 120 --by 'alice'"),
        "{}",
        confirm.body
    );
    // Five more jobs (ids below the horizon) enter the search after the count.
    db.exec("UPDATE job_queue SET kind = 'k', available_at = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR WHERE kind = 'other' ORDER BY id LIMIT 5").await;
    let fields = ["action", "q", "n", "h", "at", "confirm"].map(|f| (f, hidden(&confirm.body, f)));
    let form = |over: Option<(&str, &str)>| {
        let mut s = format!("mysqlq_csrf={csrf}&reason=incident%2042");
        for (k, v) in &fields {
            let v = over.filter(|o| o.0 == *k).map_or(v.as_str(), |o| o.1);
            s.push_str(&format!("&{k}={}", enc(v)));
        }
        s
    };
    let forged = post("/jobs/act", form(Some(("n", "125")))).await;
    assert_eq!(
        forged.status, 403,
        "a changed count is refused: {}",
        forged.body
    );
    let acted = post("/jobs/act", form(None)).await;
    assert_eq!(acted.status, 303, "{}", acted.body);
    let location = acted.header("location").unwrap().to_owned();
    assert!(location.starts_with("/actions/"), "{location}");
    let replay = post("/jobs/act", form(None)).await;
    assert_eq!(
        replay.status, 409,
        "a confirmation is used once: {}",
        replay.body
    );
    let audit: u64 = location.trim_start_matches("/actions/").parse().unwrap();
    db.wait_for(
        "the action to finish",
        &format!("SELECT state = 'done' FROM mysqlq_audit WHERE id = {audit}"),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(
        db.count("cancelled").await,
        120,
        "at most the confirmed count"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_queue WHERE status = 'cancelled' AND cancelled_by = 'alice' AND cancel_reason = 'incident 42'").await,
        120
    );
    let row: (String, Option<u64>, u64) =
        sqlx::query_as("SELECT actor, expected, jobs FROM mysqlq_audit WHERE id = ?")
            .bind(audit)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(row, ("alice".to_owned(), Some(120), 120));
    let shown = d.send("GET", &location, &auth, None).await;
    assert!(
        shown.body.contains("id=\"action-actor\">alice<"),
        "{}",
        shown.body
    );
    assert!(
        shown
            .body
            .contains("id=\"action-state\" role=\"status\">done<"),
        "{}",
        shown.body
    );
    let list = d.send("GET", "/actions", &auth, None).await;
    assert!(
        list.body.contains(&format!("/actions/{audit}\"")),
        "{}",
        list.body
    );
    // Run now on one job: scheduled becomes due.
    let one: u64 = db
        .scalar("SELECT CAST(MIN(id) AS SIGNED) FROM job_queue WHERE status = 'pending' AND available_at > UTC_TIMESTAMP(6)")
        .await
        .try_into()
        .unwrap();
    let r = post("/jobs/run-now", format!("mysqlq_csrf={csrf}&only={one}")).await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(
        db.scalar(&format!(
            "SELECT available_at <= UTC_TIMESTAMP(6) FROM job_queue WHERE id = {one}"
        ))
        .await,
        1
    );
}

#[tokio::test]
async fn in_chromium_cancel_all_matching_shows_the_count_and_the_trail_shows_who() {
    let db = TestDb::new().await;
    db.exec("INSERT INTO job_queue (queue_name, kind, payload, available_at) SELECT 'q', IF(seq <= 7, 'k', 'other'), JSON_OBJECT('n', seq), UTC_TIMESTAMP(6) + INTERVAL 1 HOUR FROM seq_1_to_30").await;
    let d = Dash::start(
        &db,
        DashboardOptions::new().named_token("bob", "bob-token-123456"),
    )
    .await;
    let browser = Browser::start().await;
    let base = format!("http://{}", d.addr);
    browser
        .goto(&format!("{base}/jobs?token=bob-token-123456&q=kind:k"))
        .await;
    browser.click("#all-cancel").await;
    assert_eq!(browser.text("#confirm-n").await, "7");
    browser.screenshot("dashboard-confirm.png").await;
    browser.click("#confirm").await;
    browser.wait_contains("#action-state", "done").await;
    assert_eq!(browser.text("#action-actor").await, "bob");
    assert_eq!(db.count("cancelled").await, 7);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_queue WHERE status = 'cancelled' AND kind <> 'k'")
            .await,
        0
    );
    // Run now from a job's page.
    let id = db
        .scalar("SELECT CAST(MIN(id) AS SIGNED) FROM job_queue WHERE kind = 'other'")
        .await;
    browser.goto(&format!("{base}/jobs/{id}")).await;
    browser.click("#run-now").await;
    browser.wait_contains(".notice", "ran now").await;
    assert_eq!(
        db.scalar(&format!(
            "SELECT available_at <= UTC_TIMESTAMP(6) FROM job_queue WHERE id = {id}"
        ))
        .await,
        1
    );
    browser.quit().await;
}

#[tokio::test]
async fn live_polls_answer_304_until_the_page_changes_and_refresh_adds_a_header() {
    let db = TestDb::new().await;
    db.exec("INSERT INTO job_queue (queue_name, kind, payload) VALUES ('q', 'k', '{}')")
        .await;
    let d = Dash::start(&db, DashboardOptions::new()).await;
    let (_, cookie, _) = d.csrf("/jobs?q=state:ready").await;
    let live = |etag: Option<String>| {
        let (d, cookie) = (&d, cookie.clone());
        async move {
            let mut h = vec![("Cookie", cookie.as_str()), ("X-Mysqlq-Live", "1")];
            if let Some(e) = &etag {
                h.push(("If-None-Match", e.as_str()));
            }
            d.send("GET", "/jobs?q=state:ready", &h, None).await
        }
    };
    let first = live(None).await;
    assert_eq!(first.status, 200);
    let etag = first.header("etag").expect("an ETag").to_owned();
    let again = live(Some(etag.clone())).await;
    assert_eq!(again.status, 304, "unchanged: {}", again.body);
    let id = db
        .scalar("SELECT CAST(MAX(id) AS SIGNED) FROM job_queue")
        .await;
    db.exec("INSERT INTO job_queue (queue_name, kind, payload) VALUES ('q', 'k', '{\"new\": 1}')")
        .await;
    // The rendering is shared for at least 250 ms; then the change shows.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = live(Some(etag.clone())).await;
        if r.status == 200 {
            assert!(
                r.body.contains(&format!("/jobs/{}\"", id + 1)),
                "{}",
                r.body
            );
            assert_ne!(r.header("etag"), Some(etag.as_str()));
            break;
        }
        assert_eq!(r.status, 304);
        assert!(Instant::now() < deadline, "the change never showed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Another session never gets this session's rendering (it holds the CSRF token).
    let (other, other_cookie, other_csrf) = d.csrf("/jobs?q=state:ready").await;
    assert_eq!(other.status, 200);
    let r = d
        .send(
            "GET",
            "/jobs?q=state:ready",
            &[("Cookie", other_cookie.as_str()), ("X-Mysqlq-Live", "1")],
            None,
        )
        .await;
    assert_eq!(form_token(&r.body).as_deref(), Some(other_csrf.as_str()));
    // Without JavaScript: ?refresh=N.
    let r = d.get("/jobs?q=state:ready&refresh=5").await;
    assert_eq!(r.header("refresh"), Some("5"));
    assert_eq!(d.get("/jobs?refresh=1").await.header("refresh"), None);
    assert!(d.get("/").await.body.contains("?refresh=5"));
}

#[tokio::test]
async fn in_chromium_a_new_job_appears_without_reload() {
    let db = TestDb::new().await;
    db.exec("INSERT INTO job_queue (queue_name, kind, payload, available_at) VALUES ('q', 'k', '{}', UTC_TIMESTAMP(6) + INTERVAL 1 HOUR)")
        .await;
    let scheduled = db
        .scalar("SELECT CAST(MAX(id) AS SIGNED) FROM job_queue")
        .await;
    let d = Dash::start(&db, DashboardOptions::new()).await;
    let browser = Browser::start().await;
    let base = format!("http://{}", d.addr);
    browser
        .goto(&format!("{base}/jobs?q=state:ready,scheduled"))
        .await;
    browser
        .script("window.__notReloaded = true; return null;")
        .await;
    browser.wait_contains("#live-status", "live").await;
    let t = Instant::now();
    db.exec(
        "INSERT INTO job_queue (queue_name, kind, payload) VALUES ('q', 'k', '{\"fresh\": 1}')",
    )
    .await;
    let id = db
        .scalar("SELECT CAST(MAX(id) AS SIGNED) FROM job_queue")
        .await;
    browser
        .wait_contains(&format!("#jobs tr[data-id=\"{id}\"]"), "ready")
        .await;
    let shown_after = t.elapsed();
    assert_eq!(
        browser
            .script("return window.__notReloaded === true;")
            .await,
        Value::Bool(true),
        "the page was not reloaded"
    );
    println!("a new job showed in the open /jobs page after {shown_after:.2?}");
    assert!(shown_after < Duration::from_secs(5), "{shown_after:?}");
    // A state change shows on the job's own page.
    browser.goto(&format!("{base}/jobs/{scheduled}")).await;
    assert_eq!(browser.text("#job-state").await, "scheduled");
    browser.wait_contains("#live-status", "live").await;
    let t = Instant::now();
    db.exec(&format!(
        "UPDATE job_queue SET available_at = UTC_TIMESTAMP(6) WHERE id = {scheduled}"
    ))
    .await;
    browser.wait_contains("#job-state", "ready").await;
    println!(
        "a state change showed on the job page after {:.2?}",
        t.elapsed()
    );
    // Paused, nothing changes.
    browser.click("#live-pause").await;
    assert_eq!(browser.text("#live-status").await, "live paused");
    browser.quit().await;
}

#[tokio::test]
async fn in_chromium_a_search_by_a_payload_field_finds_exactly_its_job() {
    let db = TestDb::new().await;
    db.exec("INSERT INTO job_queue (queue_name, kind, payload, meta, status, finished_at) SELECT 'q', 'send_email', JSON_OBJECT('order_id', seq, 'note', 'x'), JSON_OBJECT('tenant', IF(seq % 2 = 0, 'acme', 'globex')), IF(seq % 3 = 0, 'completed', 'pending'), IF(seq % 3 = 0, UTC_TIMESTAMP(6), NULL) FROM seq_1_to_300").await;
    let want = db
        .scalar("SELECT CAST(id AS SIGNED) FROM job_queue WHERE JSON_EXTRACT(payload, '$.order_id') = 42")
        .await;
    let d = Dash::start(&db, DashboardOptions::new()).await;
    let browser = Browser::start().await;
    let base = format!("http://{}", d.addr);
    browser.goto(&format!("{base}/jobs")).await;
    browser
        .find("#q")
        .await
        .send_keys("args.order_id:42")
        .await
        .unwrap();
    browser.click("form[role=search] button[type=submit]").await;
    browser
        .wait_contains(&format!("#jobs tr[data-id=\"{want}\"]"), "send_email")
        .await;
    let rows = browser
        .script("return document.querySelectorAll('#jobs tbody tr[data-id]').length;")
        .await;
    assert_eq!(rows, Value::from(1), "exactly the job with order 42");
    browser.screenshot("dashboard-search.png").await;
    // A meta field and a state together; a bad search names its token.
    browser
        .goto(&format!("{base}/jobs?q=meta.tenant:acme%20state:completed"))
        .await;
    let n = browser
        .script("return document.querySelectorAll('#jobs tbody tr[data-id]').length;")
        .await;
    assert_eq!(
        n,
        Value::from(50),
        "a full first page of 50 (of 50 matching)"
    );
    browser.goto(&format!("{base}/jobs?q=tenant:acme")).await;
    assert!(
        browser
            .text("#search-error")
            .await
            .contains("did you mean `meta.tenant:acme`?")
    );
    browser.quit().await;
}

#[tokio::test]
async fn ticked_jobs_run_now_after_a_confirmation_and_the_others_are_left() {
    let db = TestDb::new().await;
    db.exec("INSERT INTO job_queue (queue_name, kind, payload, available_at) SELECT 'q', 'k', JSON_OBJECT('n', seq), UTC_TIMESTAMP(6) + INTERVAL 1 HOUR FROM seq_1_to_2").await;
    let failed = insert_failed(&db, "q", "{}", "e").await;
    let d = Dash::start(&db, DashboardOptions::new()).await;
    let (page, cookie, csrf) = d.csrf("/jobs").await;
    assert!(
        page.body.contains("id=\"selected-run_now\""),
        "{}",
        page.body
    );
    let form = format!("mysqlq_csrf={csrf}&action=run_now&id=1&id=2&id={failed}");
    let ask = d.post("/jobs/selected", Some(&cookie), &form).await;
    assert_eq!(ask.status, 200);
    assert!(ask.body.contains("Run now 3 selected jobs"), "{}", ask.body);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_queue WHERE available_at <= UTC_TIMESTAMP(6) AND status = 'pending'").await,
        0,
        "nothing before the confirmation"
    );
    let done = d
        .post(
            "/jobs/selected",
            Some(&cookie),
            &format!("{form}&confirmed=1"),
        )
        .await;
    assert_eq!(done.status, 303, "{}", done.body);
    let to = done.header("location").unwrap();
    assert!(
        to.contains("2%20changed") || to.contains("2+changed"),
        "{to}"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_queue WHERE available_at <= UTC_TIMESTAMP(6) AND status = 'pending'").await,
        2
    );
    assert_eq!(db.status(failed).await.as_deref(), Some("failed"));
}

/// The microseconds a cell of the queue page's latency table holds (`data-us`).
async fn cell_us(browser: &Browser, css: &str) -> Option<u64> {
    browser
        .find(css)
        .await
        .attr("data-us")
        .await
        .unwrap_or_else(|e| panic!("WebDriver attr of {css} failed: {e}"))
        .map(|v| v.parse().unwrap())
}

/// How many elements match `css` now (no implicit wait for absent ones).
async fn count(browser: &Browser, css: &str) -> u64 {
    let js = format!("return document.querySelectorAll({}).length;", json!(css));
    browser.script(&js).await.as_u64().unwrap()
}

/// §10 browser test 5: a worker runs 20 ms naps on `test` and then 200 ms naps on `slow`;
/// each queue's page shows a run-time p50 within the histograms' 9.1% of the true one — which
/// lies between the nap and the longest run the worker measured for those naps (its exact
/// `max_us`, read before the next queue's naps) —, a pickup p95 and depth points; a global
/// limit set in the form is written and audited; Pause and Resume by click.
#[tokio::test]
async fn in_chromium_the_queues_page_shows_depth_latency_and_limits() {
    use mysqlq::latency::MAX_RELATIVE_ERROR;
    use mysqlq_tests::jobs::Nap;
    let db = TestDb::new().await;
    let browser = Browser::start().await;
    let slow = mysqlq::EnqueueOptions::new().queue("slow");
    for _ in 0..20 {
        Nap { ms: 20 }.enqueue(&db.pool).await.unwrap();
    }
    for _ in 0..10 {
        Nap { ms: 200 }.enqueue_with(&db.pool, &slow).await.unwrap();
    }
    // `slow` waits, paused, until the 20 ms naps are done (its row gives it a depth row).
    let admin = mysqlq::admin::Admin::new(db.pool.clone());
    admin.pause("slow").await.unwrap();
    let worker = db
        .worker()
        .queues(["test", "slow"])
        .concurrency(32)
        .start()
        .await
        .unwrap();
    let longest = |what: &str| {
        let kinds = worker.metrics().kinds();
        let nap = kinds
            .get("nap")
            .unwrap_or_else(|| panic!("no naps ran: {what}"));
        Duration::from_micros(nap.max_us)
    };
    db.wait_for(
        "the 20 ms naps completed",
        "SELECT COUNT(*) = 20 FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(60),
    )
    .await;
    let longest_20 = longest("20 ms");
    db.wait_for(
        "the leader's depth rows of both queues, slow's while paused",
        "SELECT COUNT(DISTINCT queue_name) = 2 FROM mysqlq_depth_minute",
        Duration::from_secs(30),
    )
    .await;
    admin.resume("slow").await.unwrap();
    db.wait_for(
        "every nap completed",
        "SELECT COUNT(*) = 30 FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(60),
    )
    .await;
    let longest_200 = longest("200 ms");
    db.wait_for(
        "every run time flushed",
        "SELECT IFNULL(SUM(n), 0) >= 30 FROM mysqlq_run_minute WHERE series = 'completed'",
        Duration::from_secs(30),
    )
    .await;
    let d = Dash::start(&db, DashboardOptions::new()).await;
    let base = format!("http://{}", d.addr);

    browser.goto(&format!("{base}/queues")).await;
    assert_eq!(
        browser
            .text(r#"tr[data-queue="slow"] td[data-state="failed"]"#)
            .await,
        "0"
    );
    assert!(
        cell_us(&browser, r#"tr[data-queue="slow"] td[data-f="run-p95"]"#)
            .await
            .is_some()
    );
    browser.screenshot("dashboard-queues.png").await;
    for (queue, ms, longest, n) in [
        ("slow", 200, longest_200, "10"),
        ("test", 20, longest_20, "20"),
    ] {
        browser.goto(&format!("{base}/queues/{queue}")).await;
        let row = r#"#latency tr[data-kind="nap"]"#;
        assert_eq!(browser.text(&format!("{row} td:nth-of-type(1)")).await, n);
        let us = cell_us(&browser, &format!(r#"{row} td[data-f="run-p50"]"#))
            .await
            .expect("a run-time p50");
        let (nap, p50) = (Duration::from_millis(ms), Duration::from_micros(us));
        // The true p50 t lies in [nap, longest]; the estimate is within 9.1% of t.
        let (lo, hi) = (
            nap.mul_f64(1.0 - MAX_RELATIVE_ERROR),
            longest.mul_f64(1.0 + MAX_RELATIVE_ERROR),
        );
        println!("{queue}: p50 {p50:?} for naps of {nap:?}, the longest run {longest:?}");
        assert!(
            (lo..=hi).contains(&p50),
            "{queue}: p50 {p50:?} is not within 9.1% of a run between {nap:?} and {longest:?}"
        );
        assert!(
            cell_us(&browser, &format!(r#"{row} td[data-f="pickup-p95"]"#))
                .await
                .is_some(),
            "{queue}: a pickup p95"
        );
        let counted = count(&browser, r#"#depth-chart svg[role="img"] rect.counted"#).await;
        assert!(
            counted >= 1,
            "{queue}: the depth chart has a counted minute"
        );
        let bars = r#"#depth-chart svg[role="img"] rect[class^="series-"]"#;
        if queue == "slow" {
            // Counted while paused with its 10 naps ready.
            assert!(count(&browser, bars).await >= 1, "slow: depth points");
        }
        assert!(
            browser
                .find(r#"#depth-chart svg[role="img"]"#)
                .await
                .attr("aria-label")
                .await
                .unwrap()
                .unwrap()
                .starts_with("Jobs by state per minute")
        );
    }

    // The global limit, set in the form: written, audited, shown.
    browser.goto(&format!("{base}/queues/test")).await;
    let global = browser.find("#global").await;
    global.clear().await.unwrap();
    global.send_keys("3").await.unwrap();
    browser.click("#save-limits").await;
    browser
        .wait_contains(".notice", "limits of test: global 3")
        .await;
    assert_eq!(browser.text("#limit-global").await, "3");
    assert_eq!(
        db.scalar(
            "SELECT CAST(global_limit AS SIGNED) FROM mysqlq_queue WHERE queue_name = 'test'"
        )
        .await,
        3
    );
    assert_eq!(
        db.scalar(
            "SELECT COUNT(*) FROM mysqlq_audit WHERE action = 'limits' AND queue_name = 'test' \
             AND actor = 'dashboard' AND detail = 'rate none, global 3'"
        )
        .await,
        1
    );
    browser.screenshot("dashboard-queue.png").await;

    // Pause and resume by click, back on the queue's page.
    browser.click(r#"button[value="pause"]"#).await;
    browser.wait_contains(".notice", "paused queue test").await;
    assert_eq!(browser.text("#queue-state").await, "paused");
    assert_eq!(
        db.scalar("SELECT CAST(paused AS SIGNED) FROM mysqlq_queue WHERE queue_name = 'test'")
            .await,
        1
    );
    browser.click(r#"button[value="resume"]"#).await;
    browser.wait_contains(".notice", "resumed queue test").await;
    assert_eq!(browser.text("#queue-state").await, "running");
    assert_eq!(
        db.scalar("SELECT CAST(paused AS SIGNED) FROM mysqlq_queue WHERE queue_name = 'test'")
            .await,
        0,
        "resumed; the row stays for its limit"
    );
    worker.shutdown().await.unwrap();
    browser.quit().await;
}

/// §10 browser test 6: two workers with blocking jobs are listed, the first (which leads
/// before the second starts) with the leader badge, their running jobs linked; stopping one
/// marks it stopped within 2 s.
#[tokio::test]
async fn in_chromium_the_workers_page_lists_workers_their_jobs_and_the_leader() {
    use mysqlq_tests::jobs::Nap;
    let db = TestDb::new().await;
    let browser = Browser::start().await;
    let slow = mysqlq::EnqueueOptions::new().queue("slow");
    let mut jobs: Vec<(&str, u64)> = Vec::new();
    for _ in 0..2 {
        jobs.push((
            "alpha-w",
            Nap { ms: 60_000 }.enqueue(&db.pool).await.unwrap().id().0,
        ));
        let id = Nap { ms: 60_000 }
            .enqueue_with(&db.pool, &slow)
            .await
            .unwrap();
        jobs.push(("beta-w", id.id().0));
    }
    let grace = Duration::from_millis(200);
    let alpha = db
        .worker()
        .worker_id("alpha-w")
        .shutdown_timeout(grace)
        .start()
        .await
        .unwrap();
    db.wait_for(
        "alpha-w leads",
        "SELECT COUNT(*) FROM mysqlq_leader WHERE leader_id LIKE 'alpha-w#%' \
         AND expires_at > UTC_TIMESTAMP(6)",
        Duration::from_secs(20),
    )
    .await;
    let beta = db
        .worker()
        .worker_id("beta-w")
        .queues(["slow"])
        .shutdown_timeout(grace)
        .start()
        .await
        .unwrap();
    db.wait_for(
        "the four naps running",
        "SELECT COUNT(*) = 4 FROM job_queue WHERE status = 'processing'",
        Duration::from_secs(20),
    )
    .await;
    let d = Dash::start(&db, DashboardOptions::new()).await;
    let base = format!("http://{}", d.addr);
    browser.goto(&format!("{base}/workers")).await;
    for (worker, id) in &jobs {
        let link = format!(r#"section[data-worker="{worker}"] a[href="/jobs/{id}"]"#);
        assert_eq!(count(&browser, &link).await, 1, "{link}");
    }
    assert_eq!(
        count(&browser, r#"section[data-worker="alpha-w"] .badge.leader"#).await,
        1
    );
    assert_eq!(count(&browser, ".badge.leader").await, 1, "one leader");
    assert_eq!(count(&browser, ".badge.stopped").await, 0);
    let queues = browser
        .text(r#"section[data-worker="beta-w"] dd.queues"#)
        .await;
    assert_eq!(queues, "slow");
    browser.screenshot("dashboard-workers.png").await;
    let (_, first) = jobs[0];
    browser
        .click(&format!(
            r#"section[data-worker="alpha-w"] a[href="/jobs/{first}"]"#
        ))
        .await;
    browser.wait_contains("h1", &format!("Job {first}")).await;

    // Stopping beta-w: its card says so within 2 s of the shutdown.
    beta.shutdown().await.unwrap();
    let stopped_at = Instant::now();
    loop {
        browser.goto(&format!("{base}/workers")).await;
        if count(&browser, r#"section[data-worker="beta-w"] .badge.stopped"#).await == 1 {
            break;
        }
        assert!(
            stopped_at.elapsed() < Duration::from_secs(2),
            "beta-w not shown stopped within 2 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("stopped shown after {:?}", stopped_at.elapsed());
    assert_eq!(
        count(
            &browser,
            r#"section[data-worker="beta-w"] table.running-jobs"#
        )
        .await,
        0,
        "its jobs were handed back"
    );
    assert_eq!(
        count(&browser, r#"section[data-worker="alpha-w"] .badge.leader"#).await,
        1
    );
    browser.screenshot("dashboard-workers-stopped.png").await;
    alpha.shutdown().await.unwrap();
    browser.quit().await;
}
