//! The dashboard's details in headless Chromium (browser test 7 of docs/design/dashboard.md):
//! our accessibility checks (`tests/harness/a11y.js`) on every page in the light and the dark
//! palette (switched with CDP's `Emulation.setEmulatedMedia` through chromedriver), the
//! keyboard shortcuts, times with their zone and relative part on the database clock, folded
//! payloads and the copyable CLI commands. Screenshots of each page and palette land in
//! `tests/artifacts/a11y-*.png`.
//!
//! Chromium is required, never skipped: `apt-get install -y chromium chromium-driver`.

use std::net::SocketAddr;

use fantoccini::Locator;
use mysqlq::workflow::Workflow;
use mysqlq_cli::dashboard::{DashboardOptions, router};
use mysqlq_tests::TestDb;
use mysqlq_tests::browser::Browser;
use mysqlq_tests::jobs::Noop;
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// Our rules, run with WebDriver's execute; the value is the list of violations.
const A11Y: &str = include_str!("harness/a11y.js");

/// The dashboard served on a free loopback port until the test ends.
async fn serve(db: &TestDb) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = router(db.pool.clone(), DashboardOptions::new());
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (addr, task)
}

/// Jobs in several states, a failed one with a 10 KiB string in its payload, a long error and
/// an attempt; a job due in 7027; a workflow; a minute of throughput for the chart. Returns
/// the failed job's id and the workflow's.
async fn fixtures(db: &TestDb) -> (u64, u64) {
    for n in 0..3 {
        Noop { n }.enqueue(&db.pool).await.unwrap();
    }
    let note = "x".repeat(10 * 1024);
    let payload = json!({"order_id": 42, "note": note, "tags": ["a", "b"]}).to_string();
    let error = format!(
        "upstream returned 503: {}",
        "the mail server said no. ".repeat(12)
    );
    let failed = sqlx::query(
        "INSERT INTO job_queue (queue_name, kind, payload, status, attempts, max_attempts, \
         last_error, created_at, finished_at, meta) VALUES ('test', 'noop', ?, 'failed', 4, 4, ?, \
         UTC_TIMESTAMP(6) - INTERVAL 3 MINUTE, UTC_TIMESTAMP(6) - INTERVAL 90 SECOND, \
         JSON_OBJECT('tenant', 'acme', 'progress', 40))",
    )
    .bind(&payload)
    .bind(&error)
    .execute(&db.pool)
    .await
    .unwrap()
    .last_insert_id();
    db.exec(&format!(
        "INSERT INTO mysqlq_job_attempt \
         (job_id, attempt, outcome, worker, started_at, finished_at, error, error_bytes) VALUES \
         ({failed}, 3, 'retry', 'w1', UTC_TIMESTAMP(6) - INTERVAL 5 MINUTE, \
          UTC_TIMESTAMP(6) - INTERVAL 4 MINUTE, 'timeout', 7)"
    ))
    .await;
    db.exec("INSERT INTO job_queue (queue_name, kind, payload, status, available_at) VALUES ('test', 'noop', '{\"far\": true}', 'pending', '7027-12-31 00:00:00')").await;
    db.exec("INSERT INTO job_queue (queue_name, kind, payload, status, finished_at) VALUES ('other', 'noop', '{\"n\": 1}', 'completed', UTC_TIMESTAMP(6) - INTERVAL 2 HOUR)").await;
    db.exec("INSERT INTO mysqlq_stats_minute (minute, worker_id, completions, failures) VALUES (DATE_FORMAT(UTC_TIMESTAMP() - INTERVAL 2 MINUTE, '%Y-%m-%d %H:%i:00'), 'w1', 17, 2)").await;
    db.exec("INSERT INTO mysqlq_depth_minute (minute, queue_name, state, n) VALUES (DATE_FORMAT(UTC_TIMESTAMP() - INTERVAL 3 MINUTE, '%Y-%m-%d %H:%i:00'), 'test', 'ready', 4), (DATE_FORMAT(UTC_TIMESTAMP() - INTERVAL 3 MINUTE, '%Y-%m-%d %H:%i:00'), 'test', 'failed', 1)").await;
    db.exec("INSERT INTO mysqlq_worker (worker_id, host, pid, queues, concurrency, running, started_at, last_seen_at, config) VALUES ('w1', 'host-1', 42, 'test', 8, 0, UTC_TIMESTAMP(6) - INTERVAL 1 HOUR, UTC_TIMESTAMP(6), '{\"queues\": {\"test\": {\"concurrency\": 4}}, \"concurrency\": 8, \"lease_ms\": 30000, \"version\": \"0.1.0\", \"redis\": false}')").await;
    let wf = Workflow::new("checkout")
        .step("charge", Noop { n: 1 })
        .unwrap()
        .step_after("ship", Noop { n: 2 }, ["charge"])
        .unwrap()
        .enqueue(&db.pool)
        .await
        .unwrap();
    (failed, wf.0)
}

/// The violations `a11y.js` finds on the open page.
async fn check(browser: &Browser) -> Vec<String> {
    match browser.script(A11Y).await {
        Value::Array(v) => v
            .iter()
            .map(|s| s.as_str().unwrap_or("?").to_owned())
            .collect(),
        other => panic!("a11y.js returned {other}"),
    }
}

/// The `.kbd-current` row's job id on `/jobs` (`None` without one).
async fn current_row(browser: &Browser) -> Option<String> {
    browser
        .script("var r = document.querySelector('#jobs tr.kbd-current'); return r && r.getAttribute('data-id');")
        .await
        .as_str()
        .map(str::to_owned)
}

#[tokio::test]
async fn in_chromium_dark_mode_keyboard_labels_and_times_pass_our_checks() {
    let db = TestDb::new().await;
    let (failed, wf) = fixtures(&db).await;
    let (addr, server) = serve(&db).await;
    let base = format!("http://{addr}");
    let browser = Browser::start().await;
    let pages = [
        ("overview", "/".to_owned()),
        ("jobs", "/jobs".to_owned()),
        ("jobs-ready", "/jobs?q=state:ready".to_owned()),
        ("job", format!("/jobs/{failed}")),
        ("failed", "/failed".to_owned()),
        ("queues", "/queues".to_owned()),
        ("workflows", "/workflows".to_owned()),
        ("workflow", format!("/workflows/{wf}")),
        ("queue", "/queues/test".to_owned()),
        ("workers", "/workers".to_owned()),
        ("actions", "/actions".to_owned()),
    ];

    // Every page, in both palettes: zero violations. The palettes differ (the body's
    // background is light, then dark), so the dark one is checked, not the light one twice.
    let mut violations = Vec::new();
    let mut backgrounds = Vec::new();
    for dark in [false, true] {
        browser.color_scheme(dark).await;
        let theme = if dark { "dark" } else { "light" };
        for (name, path) in &pages {
            browser.goto(&format!("{base}{path}")).await;
            assert_eq!(
                browser
                    .script("return matchMedia('(prefers-color-scheme: dark)').matches;")
                    .await,
                json!(dark),
                "{path}: the emulated colour scheme"
            );
            for v in check(&browser).await {
                violations.push(format!("{theme} {path}: {v}"));
            }
            browser
                .screenshot(&format!("a11y-{name}-{theme}.png"))
                .await;
        }
        backgrounds.push(
            browser
                .script("return getComputedStyle(document.body).backgroundColor;")
                .await,
        );
    }
    assert!(
        violations.is_empty(),
        "{} violations:\n{}",
        violations.len(),
        violations.join("\n")
    );
    assert_ne!(
        backgrounds[0], backgrounds[1],
        "the dark palette is applied"
    );
    browser.color_scheme(false).await;

    // Times: a zone and a relative part on the database clock, in the past and the future.
    db.exec(&format!(
        "UPDATE job_queue SET created_at = UTC_TIMESTAMP(6) - INTERVAL 3 MINUTE, \
         available_at = UTC_TIMESTAMP(6) - INTERVAL 3 MINUTE WHERE id = {failed}"
    ))
    .await;
    browser.goto(&format!("{base}/jobs/{failed}")).await;
    let times = browser
        .script(
            "return Array.prototype.map.call(document.querySelectorAll('main time'), \
             function (t) { return [t.getAttribute('datetime'), t.getAttribute('title'), t.textContent]; });",
        )
        .await;
    let times = times.as_array().expect("a list of times");
    assert!(times.len() >= 5, "{times:?}");
    for t in times {
        let (datetime, title, text) = (
            t[0].as_str().unwrap_or(""),
            t[1].as_str().unwrap_or(""),
            t[2].as_str().unwrap_or(""),
        );
        assert!(datetime.ends_with('Z') && datetime.len() == 27, "{t}");
        assert!(title.contains(" UTC"), "{t}");
        assert!(
            title.ends_with("(your time)"),
            "the script adds the local time: {t}"
        );
        assert!(text.contains(" UTC · "), "{t}");
        assert!(
            text.ends_with(" ago") || text.contains(" · in ") || text.ends_with(" · now"),
            "{t}"
        );
    }
    let created = browser.text("#timeline li:first-child time").await;
    assert!(created.ends_with(" UTC · 3 min ago"), "{created}");
    browser
        .goto(&format!("{base}/jobs?q=state:scheduled"))
        .await;
    let years = 7027 - db.scalar("SELECT YEAR(UTC_TIMESTAMP())").await;
    let years = format!("{},{:03}", years / 1000, years % 1000);
    let due = browser.text("#jobs tbody time").await;
    assert!(due.ends_with(&format!(" · in {years} years")), "{due}");

    // The 10 KiB string is folded: its summary gives its head and length, the rest is hidden.
    browser.goto(&format!("{base}/jobs/{failed}")).await;
    let fold = browser
        .script(
            "var d = document.querySelector('#payload details.fold'); \
             return d && [d.open, d.querySelector('summary').textContent];",
        )
        .await;
    assert_eq!(fold[0], json!(false), "{fold}");
    let summary = fold[1].as_str().unwrap_or("");
    assert!(summary.contains("10,240 characters"), "{summary}");
    assert!(summary.len() < 200, "{summary}");
    // (`innerText`, not WebDriver's text, which shows a closed `<details>`' content.)
    let shown = "return document.getElementById('payload').innerText.length;";
    let folded = browser.script(shown).await.as_u64().unwrap();
    assert!(
        folded < 1000,
        "the folded string is hidden: {folded} characters shown"
    );
    browser.click("#payload details.fold summary").await;
    let opened = browser.script(shown).await.as_u64().unwrap();
    assert!(
        opened > 10 * 1024,
        "opened, the whole string shows: {opened}"
    );
    assert!(
        browser.text("#payload").await.contains("\"order_id\": 42"),
        "pretty-printed"
    );

    // The commands that do what the buttons do, with their copy buttons (shown by the script).
    assert_eq!(
        browser.text("#cli-retry").await,
        format!("mysqlq-cli failed retry {failed} --by dashboard")
    );
    assert_eq!(
        browser.text("#cli-discard").await,
        format!("mysqlq-cli failed discard {failed} --by dashboard")
    );
    assert_eq!(
        browser
            .script("return document.querySelector('button[data-copy=\"cli-retry\"]').hidden;")
            .await,
        json!(false)
    );
    browser
        .script("document.getElementById('cli-heading').scrollIntoView(); return null;")
        .await;
    browser.screenshot("a11y-job-actions-light.png").await;

    // Shortcuts on /jobs: `/` focuses the search; typed there, j and x are text.
    browser.goto(&format!("{base}/jobs?q=state:ready")).await;
    let rows = browser
        .script(
            "return Array.prototype.map.call(document.querySelectorAll('#jobs tbody tr[data-id]'), \
             function (r) { return r.getAttribute('data-id'); });",
        )
        .await;
    let rows: Vec<String> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    assert!(rows.len() >= 3, "{rows:?}");
    browser.press("/").await;
    assert_eq!(
        browser.script("return document.activeElement.id;").await,
        json!("q"),
        "`/` focuses the search box"
    );
    browser.press("jx").await;
    assert!(
        browser
            .script("return document.getElementById('q').value;")
            .await
            .as_str()
            .unwrap()
            .ends_with("jx"),
        "typed into the search"
    );
    assert_eq!(current_row(&browser).await, None, "j typed, not a shortcut");
    assert_eq!(
        browser
            .script(
                "return document.querySelectorAll('#jobs input[type=checkbox]:checked').length;"
            )
            .await,
        json!(0)
    );
    // Leave the box; then j, j, k, x select the first row.
    browser
        .script("document.activeElement.blur(); return null;")
        .await;
    browser.press("j").await;
    assert_eq!(
        current_row(&browser).await.as_deref(),
        Some(rows[0].as_str())
    );
    browser.press("jk").await;
    assert_eq!(
        current_row(&browser).await.as_deref(),
        Some(rows[0].as_str())
    );
    browser.press("x").await;
    let checked = format!("#jobs tr[data-id=\"{}\"] input[type=checkbox]", rows[0]);
    assert!(
        browser
            .find(&checked)
            .await
            .prop("checked")
            .await
            .unwrap()
            .is_some_and(|v| v == "true"),
        "x ticks the current row"
    );
    // With a modifier, keys are the browser's.
    {
        use fantoccini::actions::{InputSource, KeyAction, KeyActions};
        use fantoccini::key::Key;
        let ctrl = char::from(Key::Control);
        let keys = KeyActions::new("ctrl-j".to_owned())
            .then(KeyAction::Down { value: ctrl })
            .then(KeyAction::Down { value: 'j' })
            .then(KeyAction::Up { value: 'j' })
            .then(KeyAction::Up { value: ctrl });
        browser.client.perform_actions(keys).await.unwrap();
    }
    assert_eq!(
        current_row(&browser).await.as_deref(),
        Some(rows[0].as_str())
    );
    // `?` opens the help dialog, which lists the shortcuts.
    browser.press("?").await;
    assert_eq!(
        browser
            .script("return document.getElementById('kbd-help').open;")
            .await,
        json!(true)
    );
    assert!(browser.text("#kbd-help").await.contains("next row"));
    browser.screenshot("a11y-help-dialog.png").await;
    browser.click("#kbd-help button").await;
    assert_eq!(
        browser
            .script(
                "document.activeElement.blur(); return document.getElementById('kbd-help').open;"
            )
            .await,
        json!(false),
        "Close closes the help"
    );
    // Enter opens the current row's job.
    browser.press("\u{e007}").await;
    browser
        .wait_contains("h1", &format!("Job {}", rows[0]))
        .await;
    assert!(
        browser
            .client
            .find(Locator::Css("main#content"))
            .await
            .is_ok(),
        "one main, the skip link's target"
    );

    browser.quit().await;
    server.abort();
}
