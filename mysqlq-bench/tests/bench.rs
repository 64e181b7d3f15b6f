//! `mysqlq-bench` in a real process against the real server: the JSON shape, the exactly-once verification,
//! positive numbers, and the scratch database dropped afterwards. No timing thresholds: the
//! targets are measured and reported in BENCHMARKS.md, not asserted.

use std::process::{Command, Stdio};

use mysqlq_tests::TestDb;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_mysqlq-bench");

const KEYS: [&str; 7] = [
    "enqueue_single_per_s",
    "enqueue_bulk_per_s",
    "drain_per_s",
    "pickup_same_process_p50_ms",
    "pickup_same_process_p99_ms",
    "pickup_cross_process_p50_ms",
    "pickup_cross_process_p99_ms",
];

fn positive(v: &Value, what: &str) -> f64 {
    let x = v
        .as_f64()
        .unwrap_or_else(|| panic!("{what} is not a number: {v}"));
    assert!(x.is_finite() && x >= 0.0, "{what} = {x}");
    x
}

#[tokio::test(flavor = "multi_thread")]
async fn bench_json_reports_both_sides_and_verifies_exactly_once() {
    let db = TestDb::new().await;
    let out = Command::new(BIN)
        .args([
            "--json",
            "--jobs",
            "500",
            "--concurrency",
            "8",
            "--periodic-seconds",
            "3",
            "--rate-secs",
            "3",
            "--rate-plain-secs",
            "2",
            "--rate-plain-jobs",
            "3000",
            "--rate-hol-jobs",
            "2000",
        ])
        .env("DATABASE_URL", db.url())
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("spawn mysqlq-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "bench failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    // Exactly one JSON object on stdout.
    let v: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}):\n{stdout}"));

    assert!(v["server"].as_str().is_some_and(|s| !s.is_empty()), "{v}");
    assert_eq!(v["jobs"], 500);
    assert_eq!(v["concurrency"], 8);
    assert_eq!(v["batch"], 100);
    for side in ["framework", "baseline"] {
        for key in KEYS {
            let x = positive(&v[side][key], &format!("{side}.{key}"));
            if key.ends_with("_per_s") {
                assert!(x > 0.0, "{side}.{key} = {x}");
            }
        }
    }
    // Counted by the proxy in front of each idle consumer: a worker always polls.
    for side in ["framework", "baseline"] {
        let idle = positive(
            &v[side]["idle_statements_per_s"],
            &format!("{side}.idle_statements_per_s"),
        );
        assert!(idle > 0.0, "{side}: {v:#}");
    }
    let rss = positive(&v["framework"]["peak_rss_mib"], "framework.peak_rss_mib");
    assert!(rss > 0.0);
    for key in ["enqueue_single", "enqueue_bulk"] {
        let r = positive(&v["ratio"][key], &format!("ratio.{key}"));
        assert!(r > 0.0, "ratio.{key} = {r}");
        let f = v["framework"][format!("{key}_per_s")].as_f64().unwrap();
        let b = v["baseline"][format!("{key}_per_s")].as_f64().unwrap();
        assert!((r - f / b).abs() < 0.01, "ratio.{key} {r} vs {f}/{b}");
    }
    // The drain baseline is the better of 1 and 8 raw claim loops, round by round; the ratio
    // is the median of the rounds' ratios against that best.
    for key in ["drain_1_loop_per_s", "drain_8_loops_per_s"] {
        assert!(positive(&v["baseline"][key], key) > 0.0, "{v:#}");
    }
    let rounds = v["drain_rounds"].as_array().expect("drain_rounds");
    assert_eq!(rounds.len(), 2, "{v:#}");
    let mut ratios = Vec::new();
    for r in rounds {
        let f = positive(&r["framework_per_s"], "framework_per_s");
        let one = positive(&r["drain_baseline_1_loop_per_s"], "1 loop");
        let eight = positive(&r["drain_baseline_8_loops_per_s"], "8 loops");
        let best = positive(&r["baseline_best_per_s"], "best");
        assert!((best - one.max(eight)).abs() < 0.2, "{r}");
        let ratio = positive(&r["ratio"], "ratio");
        assert!((ratio - f / best).abs() < 0.01, "{r}");
        ratios.push(ratio);
    }
    let median = (ratios[0] + ratios[1]) / 2.0;
    let r = positive(&v["ratio"]["drain"], "ratio.drain");
    assert!((r - median).abs() < 0.01, "ratio.drain {r} vs {ratios:?}");
    for side in [
        "drain_framework",
        "drain_baseline_1_loop",
        "drain_baseline_8_loops",
    ] {
        let d = &v["diagnostics"][side];
        for key in ["jobs_per_claim", "jobs_per_flush"] {
            assert!(positive(&d[key], key) > 0.0, "{side}.{key}: {v:#}");
        }
        // Counted by the server (fsyncs can be 0 with innodb_flush_log_at_trx_commit=0).
        positive(&d["commits_per_job"], "commits_per_job");
        positive(&d["fsyncs_per_job"], "fsyncs_per_job");
        // Per job on the server: every counter named, a missing one null and listed as such;
        // each job's claim and completion update its row.
        let c = &d["server_counters_per_job"];
        for key in [
            "Questions",
            "Com_update",
            "Handler_commit",
            "Handler_read_key",
        ] {
            positive(&c[key], key);
        }
        assert!(
            positive(&c["Handler_update"], "Handler_update") >= 2.0,
            "{side}: {d:#}"
        );
        let missing = d["server_counters_missing"].as_array().expect("missing");
        for m in missing {
            assert!(c[m.as_str().unwrap()].is_null(), "{side}: {d:#}");
        }
        // Secondary index entries per job, computed from job_queue's indexes: the claim and
        // the completion each change the entries of every index on `status`.
        let e = &d["secondary_index_entries"];
        assert!(
            e["entries_per_job"].as_u64().is_some_and(|n| n >= 2),
            "{side}: {e:#}"
        );
        let statements = e["statements"].as_array().expect("statements");
        assert_eq!(statements.len(), 2, "{side}: {e:#}");
        for st in statements {
            let indexes = st["indexes"].as_array().expect("indexes");
            assert!(
                indexes.iter().any(|i| i == "idx_job_claim"),
                "{side}: {e:#}"
            );
        }
    }

    // Periodic jobs: how late each tick was enqueued, as figures (no threshold).
    let p = &v["periodic"];
    assert_eq!(p["seconds"], 3, "{v:#}");
    assert!(
        p["ticks_enqueued"].as_u64().is_some_and(|n| n >= 1),
        "{v:#}"
    );
    let p50 = positive(&p["lateness_p50_ms"], "periodic.lateness_p50_ms");
    let p99 = positive(&p["lateness_p99_ms"], "periodic.lateness_p99_ms");
    let max = positive(&p["lateness_max_ms"], "periodic.lateness_max_ms");
    assert!(p50 <= p99 && p99 <= max, "{p}");

    // Workflows: a fan-out --jobs wide and --jobs / 10 diamonds on three workers, each beside
    // the same jobs unlinked, 3 rounds by default; figures and targets, no threshold.
    let w = &v["workflow"];
    assert_eq!(w["workers"], 3, "{v:#}");
    assert_eq!(w["concurrency"], 8, "{v:#}");
    assert_eq!(w["rounds"], 3, "{v:#}");
    assert_eq!(w["fanout_width"], 500, "{v:#}");
    assert_eq!(w["small_workflows"], 50, "{v:#}");
    for key in [
        "fanout_per_s",
        "independent_per_s",
        "small_workflows_per_s",
        "unlinked_per_s",
        "workflow_fanout_ratio",
        "workflow_small_ratio",
    ] {
        assert!(positive(&w[key], key) > 0.0, "workflow.{key}: {w:#}");
    }
    for key in [
        "fanin_start_after_last_dep_ms",
        "diamond_d_start_after_deps_p99_ms",
    ] {
        positive(&w[key], key);
    }
    for key in ["lock_wait_timeouts", "deadlocks", "settle_deferred"] {
        assert!(w[key].as_u64().is_some(), "workflow.{key}: {w:#}");
    }
    assert_eq!(w["lock_wait_timeouts"], 0, "{w:#}");
    for key in ["row_lock_waits", "row_lock_time_ms"] {
        positive(&w[key], key);
    }
    assert_eq!(
        w["workflow_rounds"].as_array().map(Vec::len),
        Some(3),
        "{w:#}"
    );
    for key in [
        "fanout_ratio_met",
        "small_ratio_met",
        "fanin_start_met",
        "diamond_d_start_met",
        "no_lock_wait_timeout_met",
    ] {
        assert!(w["targets"][key].is_boolean(), "targets.{key}: {w:#}");
    }

    // Rate limits: three worker processes on keys a (20/s) and b (50/s) beside unlimited jobs,
    // then on unlimited jobs alone, then one process picking up unlimited jobs beside a full
    // key; figures and targets, no timing threshold (the limits themselves are checked).
    let r = &v["rate"];
    assert_eq!(r["workers"], 3, "{r:#}");
    assert_eq!(r["concurrency"], 8, "{r:#}");
    assert_eq!(r["seconds"], 3, "{r:#}");
    assert_eq!(r["plain_seconds"], 2, "{r:#}");
    for (key, n) in [("a", 20), ("b", 50)] {
        let k = &r["keys"][key];
        assert_eq!(k["n"], n, "{r:#}");
        assert_eq!(k["period_ms"], 1000, "{r:#}");
        assert!(positive(&k["starts"], "starts") > 0.0, "{key}: {r:#}");
        let most = positive(&k["max_per_window"], "max_per_window");
        assert!(most > 0.0 && most <= f64::from(n), "{key}: {r:#}");
        for field in [
            "utilisation",
            "window_s",
            "starts_measured",
            "starts_allowed",
            "slack_ms",
            "claim_to_start_p50_ms",
            "claim_to_start_p99_ms",
            "claim_to_start_over_slack",
        ] {
            positive(&k[field], &format!("rate.keys.{key}.{field}"));
        }
    }
    assert!(r["late_starts"].as_u64().is_some(), "{r:#}");
    for key in [
        "unlimited_per_s",
        "unlimited_alone_per_s",
        "unlimited_ratio",
    ] {
        assert!(positive(&r[key], key) > 0.0, "rate.{key}: {r:#}");
    }
    assert_eq!(
        r["unlimited_alone_runs"].as_array().map(Vec::len),
        Some(2),
        "{r:#}"
    );
    let h = &r["hol"];
    assert_eq!(h["backlog"], 2000, "{r:#}");
    assert_eq!(h["key_started"], 1, "{r:#}");
    assert_eq!(h["tries"], 20, "{r:#}");
    let p50 = positive(&h["pickup_p50_ms"], "hol.pickup_p50_ms");
    let p99 = positive(&h["pickup_p99_ms"], "hol.pickup_p99_ms");
    assert!(p50 <= p99, "{h}");
    positive(&h["empty_queue_p99_ms"], "hol.empty_queue_p99_ms");
    positive(&h["target_ms"], "hol.target_ms");
    assert_eq!(r["lock_wait_timeouts"], 0, "{r:#}");
    assert!(r["deadlocks"].as_u64().is_some(), "{r:#}");
    for (phase, processes) in [
        ("plain_only_before", 3),
        ("keyed", 3),
        ("plain_only_after", 3),
        ("head_of_line", 1),
    ] {
        let w = &r["phases"][phase]["workers"];
        assert_eq!(w["processes"], processes, "{phase}: {r:#}");
        assert!(
            positive(&w["completions"], "completions") > 0.0,
            "{phase}: {r:#}"
        );
        assert!(w["rate_late_starts"].as_u64().is_some(), "{phase}: {r:#}");
    }
    for key in [
        "max_per_window_met",
        "utilisation_met",
        "hol_pickup_met",
        "no_lock_wait_timeout_met",
    ] {
        assert!(r["targets"][key].is_boolean(), "rate.targets.{key}: {r:#}");
    }
    assert_eq!(r["targets"]["max_per_window_met"], true, "{r:#}");

    // The exactly-once verification ran for every run and passed.
    assert_eq!(v["verification"]["passed"], true, "{v:#}");
    let checks = v["verification"]["checks"].as_array().expect("checks");
    assert!(checks.iter().all(|c| c["ok"] == true), "{v:#}");
    for scenario in [
        "drain framework",
        "drain baseline 1 loop",
        "drain baseline 8 loops",
        "idle framework",
        "idle baseline",
        "pickup framework same process",
        "pickup baseline cross-process",
        "enqueue bulk framework",
        "enqueue single baseline",
        "periodic framework",
        "workflow fanout round 1: dependents after their dependencies",
        "workflow small_workflows round 2: dependents after their dependencies",
        "workflow unlinked round 3: handlers",
        "workflow framework: lock waits",
        "rate keyed: handlers",
        "rate keyed: key a within its limit",
        "rate keyed: key b within its limit",
        "rate plain only before: handlers",
        "rate plain only after: handlers",
        "rate head of line: handlers",
        "rate head of line: key hol within its limit",
        "rate framework: lock waits",
    ] {
        assert!(
            checks
                .iter()
                .any(|c| c["check"].as_str().is_some_and(|s| s.starts_with(scenario))),
            "no check for {scenario}: {v:#}"
        );
    }
    assert!(
        checks
            .iter()
            .any(|c| c["detail"].as_str().is_some_and(|d| d
                .starts_with("500 handler runs for 500 jobs: 0 never ran, 0 ran more than once"))),
        "{v:#}"
    );

    // The scratch database is gone.
    let name = v["database"].as_str().expect("database");
    assert!(name.starts_with("mysqlq_bench_"), "{name}");
    assert_eq!(v["database_dropped"], true);
    let left: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
    )
    .bind(name)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(left, 0, "the scratch database {name} was not dropped");
}

/// The dashboard scenario on a tiny data set: the JSON's keys, every page answered 200, the
/// counts, the scratch database dropped. Timings are printed figures, never asserted.
#[tokio::test(flavor = "multi_thread")]
async fn dashboard_scenario_times_every_page_and_counts_for_a_confirmation() {
    let db = TestDb::new().await;
    let out = Command::new(BIN)
        .args(["--json", "--scenario", "dashboard", "--rows", "3300"])
        .env("DATABASE_URL", db.url())
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("spawn mysqlq-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "bench failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let v: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}):\n{stdout}"));
    let d = &v["dashboard"];
    assert_eq!(d["rows"], 3300, "{d:#}");
    // 10/11 completed, the rest in the proportions, each group at least one job.
    assert_eq!(d["data_set"]["completed"], 3001, "{d:#}");
    for group in [
        "ready",
        "rate_limited",
        "scheduled",
        "retrying",
        "waiting",
        "running",
        "failed",
        "cancelled",
    ] {
        assert!(
            d["data_set"][group].as_u64().is_some_and(|n| n >= 1),
            "{group}: {d:#}"
        );
    }
    for index in ["idx_job_recover", "idx_job_finished"] {
        assert!(positive(&d["index_mib"][index], index) > 0.0, "{d:#}");
    }
    assert_eq!(d["runs"], 20, "{d:#}");
    assert_eq!(d["warmups"], 3, "{d:#}");
    let pages = d["pages"].as_array().expect("pages");
    for p in pages {
        let path = p["path"].as_str().expect("path");
        assert_eq!(p["status"], 200, "{path}: {p}");
        let p50 = positive(&p["p50_ms"], "p50_ms");
        let p95 = positive(&p["p95_ms"], "p95_ms");
        let max = positive(&p["max_ms"], "max_ms");
        assert!(p50 <= p95 && p95 <= max, "{p}");
        assert!(p["within_target"].is_boolean(), "{p}");
        assert!(
            ["none", "entries", "rows"].contains(&p["cap"].as_str().unwrap_or("")),
            "{p}"
        );
        if path.starts_with("/jobs?") {
            assert!(p["rows"].as_u64().is_some(), "{p}");
        }
    }
    let paths: Vec<&str> = pages.iter().filter_map(|p| p["path"].as_str()).collect();
    let labels: Vec<&str> = pages.iter().filter_map(|p| p["label"].as_str()).collect();
    for want in [
        "/",
        "/queues",
        "/jobs",
        "/jobs?q=state%3Aready",
        "/jobs?q=state%3Arate-limited",
        "/jobs?q=state%3Afailed%2Ccancelled",
        "/jobs?q=queue%3Arare%20state%3Aready",
        "/jobs?q=state%3Acompleted%20meta.tenant%3Aacme7",
    ] {
        assert!(paths.contains(&want), "no page {want}: {paths:?}");
    }
    for want in [
        "state:completed, 50 pages deep by cursor",
        "job page, 100 KiB payload",
        "live poll of state:ready, a new session each (rendered)",
        "worker:bench-worker-2 state:running",
    ] {
        assert!(labels.contains(&want), "no page {want}: {labels:?}");
    }
    // The list pages show their jobs (50 a page where that many match).
    let rows_of = |label: &str| {
        pages
            .iter()
            .find(|p| p["label"] == label)
            .and_then(|p| p["rows"].as_u64())
    };
    assert_eq!(rows_of("state:completed"), Some(50), "{d:#}");
    assert_eq!(
        rows_of("state:completed, 50 pages deep by cursor"),
        Some(50),
        "{d:#}"
    );
    assert_eq!(rows_of("state:rate-limited"), Some(1), "{d:#}");
    // Pages the dashboard lacks here are listed, not timed.
    for s in d["skipped"].as_array().expect("skipped") {
        assert_eq!(s["status"], 404, "{s}");
    }
    assert!(d["over_target"].is_array(), "{d:#}");
    let confirm = d["confirm"].as_array().expect("confirm");
    assert_eq!(confirm.len(), 2, "{d:#}");
    for c in confirm {
        assert!(c["filter"].as_str().is_some(), "{c}");
        positive(&c["ms"], "confirm.ms");
        assert!(c["count"].as_u64().is_some_and(|n| n > 0), "{c}");
        assert_eq!(c["errors"].as_array().map(Vec::len), Some(0), "{c}");
    }
    assert_eq!(
        confirm[1]["filter"], "state:completed meta.tenant:acme7",
        "{d:#}"
    );
    // acme7 is one tenant in 50, among the completed jobs and the big payload's.
    assert!(
        confirm[1]["count"]
            .as_u64()
            .is_some_and(|n| (55..=65).contains(&n)),
        "{d:#}"
    );
    for key in ["loadavg_before", "loadavg_after"] {
        assert_eq!(d[key].as_array().map(Vec::len), Some(3), "{key}: {d:#}");
    }
    assert_eq!(v["verification"]["passed"], true, "{v:#}");
    let name = v["database"].as_str().expect("database");
    assert_eq!(v["database_dropped"], true, "{name}");
    let left: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
    )
    .bind(name)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(left, 0, "the scratch database {name} was not dropped");
}

/// The scaling scenario at a tiny size: every point drained in child processes by the framework
/// and by the raw loop, each checked exactly-once, the table in the JSON and the plot written.
#[tokio::test(flavor = "multi_thread")]
async fn scaling_scenario_drains_every_point_in_child_processes_and_plots_it() {
    let db = TestDb::new().await;
    let dir = std::env::temp_dir().join(format!(
        "mysqlq-bench-scaling-{}-{:x}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let plot = dir.join("scaling.svg");
    let out = Command::new(BIN)
        .args([
            "--json",
            "--scenario",
            "scaling",
            "--jobs",
            "200",
            "--rounds",
            "1",
        ])
        .arg("--plot")
        .arg(&plot)
        .env("DATABASE_URL", db.url())
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("spawn mysqlq-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "bench failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let v: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}):\n{stdout}"));
    let s = &v["scaling"];
    assert_eq!(s["jobs"], 200, "{s:#}");
    assert_eq!(s["rounds"], 1, "{s:#}");
    assert_eq!(s["process_concurrency"], 16, "{s:#}");
    let by_concurrency = s["by_concurrency"].as_array().expect("by_concurrency");
    let concurrencies: Vec<u64> = by_concurrency
        .iter()
        .map(|p| p["concurrency"].as_u64().unwrap())
        .collect();
    assert_eq!(concurrencies, [1, 4, 16, 64, 256], "{s:#}");
    let by_processes = s["by_processes"].as_array().expect("by_processes");
    let processes: Vec<u64> = by_processes
        .iter()
        .map(|p| p["processes"].as_u64().unwrap())
        .collect();
    assert_eq!(processes, [1, 2, 4], "{s:#}");
    for p in by_concurrency.iter().chain(by_processes) {
        for key in ["framework_per_s", "raw_per_s", "ratio"] {
            assert!(positive(&p[key], key) > 0.0, "{key}: {p:#}");
        }
        assert_eq!(
            p["raw_loops"].as_u64(),
            Some(p["processes"].as_u64().unwrap() * p["concurrency"].as_u64().unwrap()),
            "{p:#}"
        );
        for side in ["framework", "raw"] {
            assert!(
                positive(&p[side]["jobs_per_claim"], "jobs_per_claim") > 0.0,
                "{p:#}"
            );
            positive(&p[side]["commits_per_job"], "commits_per_job");
        }
        positive(
            &p["framework"]["worker_start_ms_max"],
            "worker_start_ms_max",
        );
    }
    // The plot: both panels, both lines.
    assert_eq!(s["plot"].as_str(), plot.to_str(), "{s:#}");
    let svg = std::fs::read_to_string(&plot).expect("the plot was written");
    assert!(svg.starts_with("<svg"), "{svg}");
    for text in [
        "framework (worker)",
        "raw loop",
        "worker concurrency",
        "worker processes",
    ] {
        assert!(svg.contains(text), "no {text} in the plot");
    }
    let _ = std::fs::remove_dir_all(&dir);
    // Every run verified: 7 points x 2 sides, handlers once over every process, rows completed.
    assert_eq!(v["verification"]["passed"], true, "{v:#}");
    let checks = v["verification"]["checks"].as_array().expect("checks");
    assert_eq!(checks.len(), 28, "{v:#}");
    for want in [
        "scaling framework 1 process at concurrency 256 round 1: handlers",
        "scaling raw loop 1 process at concurrency 256 round 1: rows",
        "scaling framework 4 processes at concurrency 16 round 1: handlers",
        "scaling raw loop 4 processes at concurrency 16 round 1: handlers",
    ] {
        assert!(
            checks.iter().any(|c| c["check"] == want),
            "no check {want}: {v:#}"
        );
    }
    assert_eq!(v["database_dropped"], true, "{v:#}");
}

#[test]
fn bench_refuses_bad_arguments_with_one_line() {
    let o = Command::new(BIN)
        .args(["--scenario", "everything"])
        .env("DATABASE_URL", "mysql://root@127.0.0.1:1/none")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("error: ") && err.contains("--scenario"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}
