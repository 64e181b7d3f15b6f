//! mysqlq in a real application (issue 15): an application crate laid out as the README says
//! (`tests/outside-app`: jobs in the library, workers in `src/bin/`), app state through the CLI,
//! a worker whose stderr is closed, errors that say what is wrong, and what `migrate` and
//! `doctor` report. Every worker is a real process on its own test database.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use mysqlq_tests::{Proc, TestDb};

/// The test application binary (the test jobs linked in, `mysqlq_cli::main()` as `main`).
const TEST_WORKER: &str = env!("CARGO_BIN_EXE_mysqlq-test-worker");

/// `tests/outside-app`.
fn app_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("outside-app")
}

/// Builds `tests/outside-app` once per test process, as a user's crate outside this workspace
/// (its own lock file and its own target directory, `target/outside-app`, which `.ci/run` has
/// already built) and returns the path of its binary `name`.
fn app_bin(name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        let target = app_target();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let out = Command::new(cargo)
            .args(["build", "--quiet", "--manifest-path"])
            .arg(app_dir().join("Cargo.toml"))
            .arg("--target-dir")
            .arg(&target)
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_TARGET_DIR")
            .stdin(Stdio::null())
            .output()
            .expect("run cargo build for tests/outside-app");
        assert!(
            out.status.success(),
            "building tests/outside-app failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        target.join("debug")
    });
    dir.join(name)
}

/// The target directory of `tests/outside-app`: its own, as a user's crate has.
fn app_target() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory")
        .join("outside-app")
}

fn run(bin: &Path, url: Option<&str>, args: &[&str]) -> Output {
    let mut c = Command::new(bin);
    c.args(args)
        .current_dir(app_dir())
        .env_remove("RUST_LOG")
        .env_remove("DATABASE_URL")
        .stdin(Stdio::null());
    if let Some(url) = url {
        c.env("DATABASE_URL", url);
    }
    c.output().expect("spawn the binary")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

async fn greetings(db: &TestDb) -> Vec<(u64, String)> {
    sqlx::query_as("SELECT n, greeting FROM outside_app_runs ORDER BY n")
        .fetch_all(&db.pool)
        .await
        .expect("read outside_app_runs")
}

#[tokio::test]
async fn the_documented_worker_layout_runs_the_librarys_jobs_and_app_state_reaches_them() {
    let db = TestDb::new().await;
    db.exec("CREATE TABLE outside_app_runs (n BIGINT UNSIGNED PRIMARY KEY, greeting VARCHAR(100) NOT NULL)",
    )
    .await;
    let worker = app_bin("worker");
    let stateful = app_bin("worker-with-state");
    let worker = worker.to_str().expect("utf-8 path");
    let stateful = stateful.to_str().expect("utf-8 path");

    // `src/bin/worker.rs` is `use outside_app as _; fn main() { mysqlq_cli::main() }`: its
    // `enqueue` knows the library's job, its `work` runs it.
    let o = run(
        Path::new(worker),
        Some(&db.url()),
        &["enqueue", "record_visit", "--json", r#"{"n": 1}"#],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        !text(&o.stderr).contains("not registered"),
        "{}",
        text(&o.stderr)
    );
    let mut p = Proc::start(worker, &db, "outside-plain", &["--queues", "outside-app"]);
    db.wait_for(
        "the plain worker ran job 1",
        "SELECT COUNT(*) FROM outside_app_runs WHERE n = 1",
        Duration::from_secs(60),
    )
    .await;
    assert!(p.terminate(Duration::from_secs(30)).success());

    // `src/bin/worker-with-state.rs` is `mysqlq_cli::Cli::new().state(AppState {…}).run()`.
    let o = run(
        Path::new(stateful),
        Some(&db.url()),
        &["enqueue", "record_visit", "--json", r#"{"n": 2}"#],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let mut p = Proc::start(stateful, &db, "outside-state", &["--queues", "outside-app"]);
    db.wait_for(
        "the stateful worker ran job 2",
        "SELECT COUNT(*) FROM outside_app_runs WHERE n = 2",
        Duration::from_secs(60),
    )
    .await;
    assert!(p.terminate(Duration::from_secs(30)).success());
    assert_eq!(
        greetings(&db).await,
        vec![(1, "none".to_owned()), (2, "hello from the app".to_owned())]
    );
}

#[test]
fn a_binary_that_links_no_jobs_refuses_work_at_once_with_the_line_to_add() {
    // `src/bin/forgot.rs` is only `fn main() { mysqlq_cli::main() }`: the library is never
    // named, so its jobs are not linked. No database is needed to say so.
    let forgot = app_bin("forgot");
    let started = Instant::now();
    let o = run(&forgot, None, &["work"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no jobs are linked into this binary (`forgot`)"),
        "{err}"
    );
    assert!(
        err.contains("add `use outside_app as _;` to src/bin/forgot.rs"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(started.elapsed() < Duration::from_secs(30));
    // The README shows this error for its own layout (`worker`, `my_app`): the same line.
    let readme = mysqlq_tests::docs::block("README.md", "error: no jobs are linked");
    let ours = err
        .trim_end()
        .replace("(`forgot`)", "(`worker`)")
        .replace("`use outside_app as _;`", "`use my_app as _;`")
        .replace("src/bin/forgot.rs", "src/bin/worker.rs");
    assert_eq!(
        readme.lines,
        [ours],
        "{} shows another error than the binary prints",
        readme.place()
    );
}

#[tokio::test]
async fn a_closed_stderr_does_not_stop_the_worker_and_sigterm_still_stops_it_cleanly() {
    let db = TestDb::new().await;
    let mut child = Command::new(TEST_WORKER)
        .args([
            "work",
            "--queues",
            "test",
            "--shutdown-timeout",
            "1s",
            "--poll-ceiling",
            "100ms",
        ])
        .env("DATABASE_URL", db.url())
        // Every claim logs at debug: the worker keeps writing to the closed pipe.
        .env("RUST_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the test worker");
    // As `work 2>&1 | head -1`: read one line, then close the pipe.
    let mut first = String::new();
    BufReader::new(child.stderr.take().expect("stderr"))
        .read_line(&mut first)
        .expect("read the first log line");

    let _noop = mysqlq_tests::jobs::Noop { n: 1 }
        .enqueue(&db.pool)
        .await
        .expect("enqueue noop");
    let deadline = Instant::now() + Duration::from_secs(60);
    while db.count("completed").await == 0 {
        if let Some(status) = child.try_wait().expect("poll the worker") {
            panic!("the worker died when its stderr closed: {status}");
        }
        assert!(Instant::now() < deadline, "no job ran within 60 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _sleepy = mysqlq_tests::jobs::Sleepy { ms: 600_000 }
        .enqueue(&db.pool)
        .await
        .expect("enqueue sleepy");
    db.wait_for(
        "the long job started",
        "SELECT COUNT(*) FROM test_runs WHERE tag = 'sleepy' AND event = 'start'",
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(child.try_wait().expect("poll the worker"), None);
    assert!(mysqlq_tests::signal(child.id(), "TERM"));
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the worker") {
            break status;
        }
        assert!(Instant::now() < deadline, "the worker did not stop");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
    assert_eq!(
        db.count("processing").await,
        0,
        "the long job was not released"
    );
    assert!(
        !first.contains('\u{1b}'),
        "colour codes on a pipe: {first:?}"
    );
}

#[tokio::test]
async fn log_format_json_writes_one_object_per_line() {
    let db = TestDb::new().await;
    let o = Command::new(TEST_WORKER)
        .args(["--log-format", "json", "stats"])
        .env("DATABASE_URL", db.url())
        // sqlx logs every statement at debug.
        .env("RUST_LOG", "debug")
        .stdin(Stdio::null())
        .output()
        .expect("spawn the test worker");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(!err.is_empty(), "no log lines");
    for line in err.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        for field in ["timestamp", "level", "target", "fields"] {
            assert!(v.get(field).is_some(), "no `{field}` in {line}");
        }
    }
}

#[tokio::test]
async fn enqueue_into_an_unmigrated_database_says_what_is_wrong_and_what_to_do() {
    let db = TestDb::new().await;
    db.exec("DROP TABLE job_queue").await;
    let e = mysqlq_tests::jobs::Noop { n: 1 }
        .enqueue(&db.pool)
        .await
        .expect_err("the table is gone");
    let shown = e.to_string();
    assert!(shown.contains("1146"), "{shown}");
    assert!(shown.contains("job_queue"), "{shown}");
    assert!(shown.contains("run the migrations"), "{shown}");
}

#[tokio::test]
async fn migrate_on_an_empty_database_says_what_it_applied() {
    let db = TestDb::new().await;
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(table_name AS CHAR) FROM information_schema.tables \
         WHERE table_schema = DATABASE()",
    )
    .fetch_all(&db.pool)
    .await
    .expect("list the tables");
    for t in tables {
        db.exec(&format!("DROP TABLE `{t}`")).await;
    }
    let o = run(Path::new(TEST_WORKER), Some(&db.url()), &["migrate"]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(!out.contains("up to date"), "{out}");
    assert!(
        out.contains(&format!(
            "applied {} migrations (1 to {}): schema version 0 -> {}",
            mysqlq::SCHEMA_VERSION,
            mysqlq::SCHEMA_VERSION,
            mysqlq::SCHEMA_VERSION
        )),
        "{out}"
    );
    let o = run(Path::new(TEST_WORKER), Some(&db.url()), &["migrate"]);
    let out = text(&o.stdout);
    assert!(
        out.contains(&format!(
            "schema version {} (up to date, nothing applied)",
            mysqlq::SCHEMA_VERSION
        )),
        "{out}"
    );
}

#[tokio::test]
async fn doctor_warns_about_stranded_jobs_and_passes_on_a_drained_queue() {
    let db = TestDb::new().await;
    // A drained queue: thousands of finished jobs, none pending. The optimizer has nothing to
    // plan over and may pick another index; that is not a failing claim plan.
    db.exec(
        "INSERT INTO job_queue (queue_name, kind, payload, priority, max_attempts, available_at, \
         status, created_at, finished_at) \
         SELECT 'test', 'noop', '{\"n\": 0}', 0, 5, UTC_TIMESTAMP(6), 'completed', \
         UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) FROM \
         (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 \
          UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 \
          UNION ALL SELECT 9) a, \
         (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 \
          UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 \
          UNION ALL SELECT 9) b, \
         (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2) c",
    )
    .await;
    db.exec("ANALYZE TABLE job_queue").await;
    let o = run(Path::new(TEST_WORKER), Some(&db.url()), &["doctor"]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}{}", text(&o.stderr));
    assert!(!out.contains("FAIL"), "{out}");
    assert!(
        out.lines().any(|l| l.contains("claim plan")
            && !l.contains("Using filesort")
            && !l.contains("with a sort")),
        "{out}"
    );

    // Jobs in a queue no job of this binary uses wait forever: doctor warns and names it.
    db.exec(
        "INSERT INTO job_queue (queue_name, kind, payload, priority, max_attempts, available_at, \
         status, created_at) VALUES ('orphans', 'gone_job', '{}', 0, 5, UTC_TIMESTAMP(6), \
         'pending', UTC_TIMESTAMP(6))",
    )
    .await;
    let o = run(Path::new(TEST_WORKER), Some(&db.url()), &["doctor"]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let line = out
        .lines()
        .find(|l| l.contains("stranded"))
        .unwrap_or_else(|| panic!("no stranded warning:\n{out}"));
    assert!(line.starts_with("warn"), "{line}");
    assert!(line.contains("`orphans` (1 pending)"), "{line}");
    assert!(line.contains("`mysqlq-test-worker "), "{line}");
}

#[tokio::test]
async fn the_sweep_drops_only_databases_of_dead_processes_that_are_old_enough() {
    use sqlx::Connection;
    let db = TestDb::new().await;
    let mut admin = db.connect().await;
    let prefix = format!("mysqlq_sweep{:08x}", fastrand::u32(..));
    // 999999999 is above any pid_max, so never a live process; pid 1 always is.
    let dead = format!("{prefix}_999999999_a");
    let alive = format!("{prefix}_1_b");
    let empty = format!("{prefix}_999999999_c");
    for name in [&dead, &alive, &empty] {
        db.exec(&format!("CREATE DATABASE `{name}`")).await;
    }
    for name in [&dead, &alive] {
        db.exec(&format!("CREATE TABLE `{name}`.t (id INT PRIMARY KEY)"))
            .await;
    }
    let exists = |name: String| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?",
            )
            .bind(name)
            .fetch_one(&pool)
            .await
            .expect("look the database up")
                == 1
        }
    };
    // Too young: nothing goes.
    mysqlq_tests::sweep_stale_databases(&mut admin, &prefix, 3600).await;
    assert!(exists(dead.clone()).await);
    // Old enough: only the dead process's database with tables goes.
    mysqlq_tests::sweep_stale_databases(&mut admin, &prefix, 0).await;
    assert!(
        !exists(dead.clone()).await,
        "the dead run's database was kept"
    );
    assert!(
        exists(alive.clone()).await,
        "a live process's database was dropped"
    );
    assert!(
        exists(empty.clone()).await,
        "an undatable database was dropped"
    );
    for name in [&alive, &empty] {
        db.exec(&format!("DROP DATABASE `{name}`")).await;
    }
    let _ = admin.close().await;
}

/// The application's own tests (`tests/outside-app/tests/testing.rs`, issue 29): a handler
/// unit-tested with the state its worker gives it, what sign-up enqueues inside a rolled-back
/// transaction, `drain` and `work_one` with the app's state, each on a database of its own from
/// `#[sqlx::test]` and `mysqlq::migrate`, through mysqlq's public API only. `DATABASE_URL`
/// names this test's database, where sqlx keeps its list of the databases it creates.
#[tokio::test]
async fn the_apps_own_tests_use_mysqlq_testing_with_a_database_per_test_from_sqlx_test() {
    let db = TestDb::new().await;
    let url = db.url();
    let out = tokio::task::spawn_blocking(move || {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        Command::new(cargo)
            .args(["test", "--manifest-path"])
            .arg(app_dir().join("Cargo.toml"))
            .arg("--target-dir")
            .arg(app_target())
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("RUST_LOG")
            .env("DATABASE_URL", url)
            .stdin(Stdio::null())
            .output()
            .expect("run cargo test for tests/outside-app")
    })
    .await
    .expect("cargo test for tests/outside-app");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("test result: ok. 4 passed; 0 failed"),
        "{stdout}\n{stderr}"
    );
    // sqlx dropped the databases of the tests that passed.
    let left = db.scalar("SELECT COUNT(*) FROM _sqlx_test_databases").await;
    assert_eq!(left, 0, "{stderr}");
}
