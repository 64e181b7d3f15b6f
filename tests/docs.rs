//! The docs show what the binary prints (issue 28, item 11): every shell session in README.md and
//! docs/*.md (a ```` ```console ```` block) is run with `worker` (tests/bin/docs_worker.rs, the
//! application binary the docs show, which links the README's `send_order_email`) against a
//! database set up as the sample assumes, and what it prints must be the sample, up to
//! [`normalise`] (ages, timestamps, sizes, the server's version). Every other block that looks
//! like output is listed below with the test that checks it, or as not being output, so a new
//! sample cannot go unchecked.
//!
//! In a session, `$ worker …` and `$ mysqlq-cli …` are commands (both run `worker`: the
//! standalone binary has the same commands); the lines up to the next `$` are what it prints,
//! stdout then stderr. A command followed by no lines is only shown, not run: it must parse, so
//! it is run against a server that is not there and must get as far as connecting.

use std::process::{Command, Output, Stdio};

use mysqlq_tests::TestDb;
use mysqlq_tests::docs::{self, Block, normalise};

const BIN: &str = env!("CARGO_BIN_EXE_worker");

/// A URL where no server listens: commands get as far as connecting and stop there.
const NOWHERE: &str = "mysql://root@127.0.0.1:1/none";

/// A sample: the file, and the start of its block's first line.
type Sample = (&'static str, &'static str);

const WORK: Sample = ("docs/cli.md", "$ worker work");
const MIGRATE: Sample = ("docs/cli.md", "$ mysqlq-cli migrate");
const STATS: Sample = ("docs/cli.md", "$ mysqlq-cli stats");
const FAILED: Sample = ("docs/cli.md", "$ mysqlq-cli failed list");
const CANCEL: Sample = ("docs/cli.md", "$ mysqlq-cli cancel");
const PURGE: Sample = ("docs/cli.md", "$ mysqlq-cli purge");
const DOCTOR: Sample = ("docs/cli.md", "$ worker doctor");
const PAUSE: Sample = ("docs/cli.md", "$ mysqlq-cli pause");
const ENQUEUE: Sample = ("docs/cli.md", "$ worker enqueue");
const KINDS: Sample = ("docs/cli.md", "$ worker kinds");
const LIMITS: Sample = ("docs/cli.md", "$ mysqlq-cli limits");
const JOBS: Sample = ("docs/cli.md", "$ worker jobs search");
const SEARCH_INDEX: Sample = ("docs/cli.md", "$ mysqlq-cli search-index");

/// The sessions this file runs, one test each.
const SESSIONS: [Sample; 13] = [
    WORK,
    MIGRATE,
    STATS,
    FAILED,
    CANCEL,
    PURGE,
    DOCTOR,
    PAUSE,
    ENQUEUE,
    KINDS,
    LIMITS,
    JOBS,
    SEARCH_INDEX,
];

/// Samples of output checked by other test files.
const CHECKED_ELSEWHERE: [(&str, &str, &str); 5] = [
    (
        "docs/other-languages.md",
        "ERROR 1644 (45000): ",
        "tests/sql_enqueue.rs: the_refusals_the_docs_show_are_what_the_procedure_says",
    ),
    (
        "docs/dashboard.md",
        "before: EXPLAIN of the first statement",
        "tests/cli.rs: search_index_add_list_drop (a search on a declared field reads its index; \
         the EXPLAIN itself is the server's, pasted from a run on 200,000 jobs)",
    ),
    (
        "README.md",
        "error: no jobs are linked into this binary",
        "tests/real_app.rs: a_binary_that_links_no_jobs_refuses_work_at_once_with_the_line_to_add",
    ),
    (
        "docs/clusters.md",
        "warn  host",
        "tests/clusters.rs: the_cli_takes_a_multi_host_database_url",
    ),
    (
        "docs/testing.md",
        "expected a pending job with kind = `send_receipt`",
        "tests/testing.rs: a_failed_assertion_says_what_it_found (the message's form, on its own jobs)",
    ),
];

/// ```` ```text ```` blocks that are not output.
const NOT_OUTPUT: [(&str, &str, &str); 2] = [
    ("docs/clusters.md", "mysql://app:secret@db1", "a URL"),
    (
        "docs/dashboard.md",
        "mysqlq-cli dashboard [",
        "the command's synopsis",
    ),
];

/// One command of a session and the lines the sample shows it printing.
struct Step {
    shown: String,
    args: Vec<String>,
    output: Vec<String>,
}

/// The commands of a ```` ```console ```` block (`$ …`, continued by a trailing `\`) and the
/// lines after each.
fn steps(b: &Block) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut continued = false;
    for line in &b.lines {
        if continued {
            let step = steps.last_mut().expect("a command before its continuation");
            step.shown.push('\n');
            step.shown.push_str(line);
            continued = line.ends_with('\\');
        } else if let Some(cmd) = line.strip_prefix("$ ") {
            steps.push(Step {
                shown: cmd.to_owned(),
                args: Vec::new(),
                output: Vec::new(),
            });
            continued = line.ends_with('\\');
        } else {
            steps
                .last_mut()
                .unwrap_or_else(|| panic!("{}: output before any `$ ` command", b.place()))
                .output
                .push(line.clone());
        }
    }
    for step in &mut steps {
        let words = shell_words(&step.shown.replace("\\\n", " "));
        let (program, args) = words
            .split_first()
            .unwrap_or_else(|| panic!("{}: an empty command", b.place()));
        assert!(
            program == "worker" || program == "mysqlq-cli",
            "{}: `{}` is not a command of the binary",
            b.place(),
            step.shown
        );
        step.args = args.to_vec();
    }
    steps
}

/// The words of a shell command line: single and double quotes, a `#` comment at the end.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                let w = word.get_or_insert_with(String::new);
                for q in chars.by_ref() {
                    if q == c {
                        break;
                    }
                    w.push(q);
                }
            }
            '#' if word.is_none() => break,
            c if c.is_whitespace() => words.extend(word.take()),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

fn run(url: &str, args: &[String]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("DATABASE_URL", url)
        .env_remove("RUST_LOG")
        .env_remove("MYSQLQ_REDIS_URL")
        .stdin(Stdio::null())
        .output()
        .expect("spawn worker")
}

/// Runs the session `sample` on `url`: each command with output shown must print it, each
/// without must parse. `adjust` rewrites the sample's lines and the real ones alike before they
/// are compared (for lines that depend on the server's configuration).
fn session(url: &str, sample: Sample, adjust: fn(&str) -> String) {
    let b = docs::block(sample.0, sample.1);
    assert_eq!(
        b.lang,
        "console",
        "{}: a session is a console block",
        b.place()
    );
    for step in steps(&b) {
        if step.output.is_empty() {
            let o = run(NOWHERE, &step.args);
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                o.status.code() == Some(1) && err.contains("cannot connect"),
                "{}: `{}` does not parse ({}): {err}",
                b.place(),
                step.shown,
                o.status
            );
            continue;
        }
        let o = run(url, &step.args);
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        let want_error = step.output.iter().any(|l| l.starts_with("error: "));
        assert_eq!(
            o.status.success(),
            !want_error,
            "{}: `{}` exited {}:\n{printed}",
            b.place(),
            step.shown,
            o.status
        );
        let shown = step.output.join("\n");
        let compared = |text: &str| {
            normalise(text)
                .lines()
                .map(adjust)
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(
            compared(&shown),
            compared(&printed),
            "{}: `{}` prints something else than the sample; it printed:\n{printed}",
            b.place(),
            step.shown
        );
    }
}

fn same(line: &str) -> String {
    line.to_owned()
}

#[test]
fn every_sample_of_output_in_the_docs_is_checked() {
    let mut unchecked = Vec::new();
    for doc in docs::docs() {
        for b in docs::blocks(&doc) {
            if b.lang != "console" && b.lang != "text" {
                continue;
            }
            let first = b.lines.first().map_or("", String::as_str);
            let covered = SESSIONS
                .iter()
                .map(|s| (s.0, s.1))
                .chain(
                    CHECKED_ELSEWHERE
                        .iter()
                        .chain(NOT_OUTPUT.iter())
                        .map(|(d, f, _)| (*d, *f)),
                )
                .any(|(d, f)| d == doc && first.starts_with(f));
            if !covered {
                unchecked.push(format!("{}: {first}", b.place()));
            }
        }
    }
    assert!(
        unchecked.is_empty(),
        "samples no test checks (run them in tests/docs.rs, or list them there):\n{}",
        unchecked.join("\n")
    );
    // And every listed sample is still there, once.
    for (doc, first) in SESSIONS {
        docs::block(doc, first);
    }
    for (doc, first, _) in CHECKED_ELSEWHERE.iter().chain(NOT_OUTPUT.iter()) {
        docs::block(doc, first);
    }
}

#[test]
fn normalise_replaces_what_differs_between_runs_and_keeps_the_rest() {
    for (text, want) in [
        (
            "order-email    120        4m 2s          3  no",
            "order-email 120 <d> 3 no",
        ),
        (
            "cleanup lag: oldest completed row finished 7days 2h 1s ago; oldest failed row 12days ago",
            "cleanup lag: oldest completed row finished <d> ago; oldest failed row <d> ago",
        ),
        (
            "job_queue: data 16.0 KiB, indexes 96.0 KiB, ~163 rows (estimate)",
            "job_queue: data <size>, indexes <size>, ~<n> rows (estimate)",
        ),
        (
            "812  order-email  6/6  2024-05-01 10:02:11  mail server said no: 503",
            "812 order-email 6/6 <time> mail server said no: 503",
        ),
        (
            "ok    server      MariaDB 10.11.19 supports SKIP LOCKED",
            "ok server MariaDB <version> supports SKIP LOCKED",
        ),
        ("claims  1520  304.00  32/32", "claims 1520 304.00 32/32"),
    ] {
        assert_eq!(normalise(text), want, "{text}");
    }
}

#[test]
fn the_work_sample_parses() {
    session(NOWHERE, WORK, same);
}

/// The `migrate` sample starts from an empty database; the README quotes its first line.
#[tokio::test]
async fn the_migrate_sample_is_what_migrate_prints() {
    let db = TestDb::new().await;
    db.exec(
        "DROP TABLE job_queue, mysqlq_queue, mysqlq_leader, mysqlq_concurrency, mysqlq_cron, \
             mysqlq_worker, mysqlq_stats_minute, mysqlq_kind_minute, mysqlq_migrations, \
             mysqlq_job_attempt, mysqlq_ordering, mysqlq_audit, mysqlq_audit_job",
    )
    .await;
    session(&db.url(), MIGRATE, same);
    let readme = std::fs::read_to_string(docs::root().join("README.md")).unwrap();
    let first = &docs::block(MIGRATE.0, MIGRATE.1).lines[1];
    let applied = first.split(" (").next().unwrap();
    assert!(
        readme.contains(&format!("\"{applied} …\"")),
        "README does not quote `{applied}`"
    );
}

/// A live worker serving both queues, as the samples assume (`enqueue` warns without one).
const LIVE_WORKER: &str = "INSERT INTO mysqlq_worker (worker_id, host, pid, queues, concurrency, \
     running, started_at, last_seen_at) VALUES ('web-1:4242:1a2b', 'web-1', 4242, \
     'order-email,reports', 32, 32, UTC_TIMESTAMP(6) - INTERVAL 1 HOUR, UTC_TIMESTAMP(6))";

#[tokio::test]
async fn the_stats_sample_is_what_stats_prints() {
    let db = TestDb::new().await;
    let mut setup = vec![LIVE_WORKER.to_owned()];
    let jobs = "INSERT INTO job_queue (queue_name, kind, payload, max_attempts, status, attempts, \
                available_at, locked_by, claim_token, lease_expires_at, last_error, finished_at)";
    let rows = |n: u32, select: &str| {
        format!(
            "{jobs} WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {n}) \
             SELECT 'order-email', 'send_order_email', JSON_OBJECT('order_id', i), 6, {select} FROM n"
        )
    };
    // 120 ready for 4m 2s, 3 scheduled, 2 retrying, 32 running, 7 failed (the oldest 12 days
    // ago), one completed 7 days 2 hours ago; `reports` paused with no jobs.
    setup.push(rows(
        120,
        "'pending', 0, UTC_TIMESTAMP(6) - INTERVAL 242 SECOND, NULL, NULL, NULL, NULL, NULL",
    ));
    setup.push(rows(
        3,
        "'pending', 0, UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, NULL, NULL, NULL, NULL, NULL",
    ));
    setup.push(rows(
        2,
        "'pending', 1, UTC_TIMESTAMP(6) + INTERVAL 10 MINUTE, NULL, NULL, NULL, \
         'mail server said no: 503', NULL",
    ));
    setup.push(rows(
        32,
        "'processing', 1, UTC_TIMESTAMP(6), 'web-1:4242:1a2b', UUID(), \
         UTC_TIMESTAMP(6) + INTERVAL 50 SECOND, NULL, NULL",
    ));
    setup.push(rows(
        7,
        "'failed', 6, UTC_TIMESTAMP(6), NULL, NULL, NULL, 'mail server said no: 503', \
         UTC_TIMESTAMP(6) - INTERVAL IF(i = 7, 12, i) DAY",
    ));
    setup.push(rows(
        1,
        "'completed', 1, UTC_TIMESTAMP(6), NULL, NULL, NULL, NULL, \
         UTC_TIMESTAMP(6) - INTERVAL 7 DAY - INTERVAL 2 HOUR",
    ));
    setup.push("INSERT INTO mysqlq_queue (queue_name, paused) VALUES ('reports', 1)".to_owned());
    // The last minute's counters of that worker and of the kind.
    let minute = "DATE_FORMAT(UTC_TIMESTAMP() - INTERVAL 1 MINUTE, '%Y-%m-%d %H:%i:00')";
    setup.push(format!(
        "INSERT INTO mysqlq_stats_minute (minute, worker_id, claims, completions, retries, \
         failures, polls, empty_polls) VALUES ({minute}, 'web-1:4242:1a2b', 1520, 1498, 12, 7, 410, 12)"
    ));
    setup.push(format!(
        "INSERT INTO mysqlq_kind_minute (minute, kind, runs, errors, total_us, max_us) \
         VALUES ({minute}, 'send_order_email', 1498, 7, 1498 * 212400, 3100000)"
    ));
    db.exec(&setup.join(";\n")).await;
    session(&db.url(), STATS, same);
}

#[tokio::test]
async fn the_failed_sample_is_what_failed_list_prints() {
    let db = TestDb::new().await;
    db.exec(
        "INSERT INTO job_queue (id, queue_name, kind, payload, status, attempts, max_attempts, \
         last_error, finished_at) VALUES (812, 'order-email', 'send_order_email', \
         '{\"order_id\": 42}', 'failed', 6, 6, 'mail server said no: 503', UTC_TIMESTAMP(6))",
    )
    .await;
    session(&db.url(), FAILED, same);
}

#[tokio::test]
async fn the_cancel_sample_is_what_cancel_and_delete_print() {
    let db = TestDb::new().await;
    db.exec(&format!(
        "{LIVE_WORKER};
         INSERT INTO job_queue (id, queue_name, kind, payload, max_attempts) VALUES \
         (812, 'order-email', 'send_order_email', '{{\"order_id\": 42}}', 6);
         INSERT INTO job_queue (id, queue_name, kind, payload, max_attempts, status, attempts, \
         locked_by, claim_token, lease_expires_at) VALUES (813, 'order-email', \
         'send_order_email', '{{\"order_id\": 42}}', 6, 'processing', 1, 'web-1:4242:1a2b', \
         UUID(), UTC_TIMESTAMP(6) + INTERVAL 50 SECOND);
         INSERT INTO job_queue (id, queue_name, kind, payload, max_attempts, status, attempts, \
         last_error, finished_at) VALUES (900, 'order-email', 'send_order_email', \
         '{{\"order_id\": 43}}', 6, 'failed', 6, 'mail server said no: 503', UTC_TIMESTAMP(6))"
    ))
    .await;
    session(&db.url(), CANCEL, same);
}

#[tokio::test]
async fn the_purge_sample_is_what_purge_prints() {
    let db = TestDb::new().await;
    // 18234 completed jobs, finished 8 days ago (digits crossed: MySQL caps recursion at 1000).
    db.exec(
        "INSERT INTO job_queue (queue_name, kind, payload, status, attempts, finished_at) \
         WITH d(i) AS (SELECT 0 UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
         UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
         UNION ALL SELECT 8 UNION ALL SELECT 9) \
         SELECT 'order-email', 'send_order_email', '{\"order_id\": 1}', 'completed', 1, \
         UTC_TIMESTAMP(6) - INTERVAL 8 DAY \
         FROM d a, d b, d c, d e, d f WHERE a.i + 10 * b.i + 100 * c.i + 1000 * e.i + 10000 * f.i < 18234",
    )
    .await;
    session(&db.url(), PURGE, same);
}

/// The `doctor` sample is MariaDB's on a server as `tests/run` starts it. The lines about the
/// server's own configuration are compared by their check's name only: another server is not
/// a wrong sample.
#[tokio::test]
async fn the_doctor_sample_is_what_doctor_prints() {
    let db = TestDb::new().await;
    db.exec(
        "INSERT INTO job_queue (queue_name, kind, payload, max_attempts) VALUES \
         ('order-email', 'send_order_email', '{\"order_id\": 42}', 6)",
    )
    .await;
    fn server_lines_by_name(line: &str) -> String {
        // `level check detail`, normalised: the check is one word or `time zone`.
        let mut words = line.splitn(3, ' ');
        let (_level, check) = (words.next(), words.next().unwrap_or(""));
        let check = if check == "time" { "time zone" } else { check };
        if ["server", "binlog", "writer", "isolation", "time zone"].contains(&check) {
            check.to_owned()
        } else {
            line.to_owned()
        }
    }
    session(&db.url(), DOCTOR, server_lines_by_name);
}

#[tokio::test]
async fn the_pause_sample_is_what_pause_and_resume_print() {
    let db = TestDb::new().await;
    db.exec(
        "INSERT INTO job_queue (queue_name, kind, payload, max_attempts) VALUES \
         ('order-email', 'send_order_email', '{\"order_id\": 42}', 6)",
    )
    .await;
    session(&db.url(), PAUSE, same);
}

#[tokio::test]
async fn the_limits_sample_is_what_limits_prints() {
    let db = TestDb::new().await;
    session(&db.url(), LIMITS, same);
}

#[tokio::test]
async fn the_enqueue_sample_is_what_enqueue_prints() {
    let db = TestDb::new().await;
    // Job 1001 holds the dedupe key `order-42`; the next id is 1043.
    db.exec(&format!(
        "{LIVE_WORKER};
         INSERT INTO job_queue (id, queue_name, kind, payload, max_attempts, dedupe_key) VALUES \
         (1001, 'order-email', 'send_order_email', '{{\"order_id\": 42}}', 6, 'order-42');
         ALTER TABLE job_queue AUTO_INCREMENT = 1043"
    ))
    .await;
    session(&db.url(), ENQUEUE, same);
}

/// A page cursor holds the due time of its last row in µs: the sample's and the run's differ.
fn cursor_time(line: &str) -> String {
    match line.split_once("--cursor d.") {
        Some((head, tail)) => {
            let id = tail.split_once('.').map_or("", |(_, id)| id);
            format!("{head}--cursor d.<us>.{id}")
        }
        None => line.to_owned(),
    }
}

/// `kinds` reads no database. (Its `--json` sample is compared by tests/kinds.rs.)
#[test]
fn the_kinds_sample_is_what_kinds_prints() {
    session(NOWHERE, KINDS, same);
}

#[tokio::test]
async fn the_jobs_sample_is_what_jobs_prints() {
    let db = TestDb::new().await;
    // Three retrying (due in 10, 20, 30 minutes), one failed, one ready.
    let mut setup = Vec::new();
    for (id, minutes) in [(101, 10), (102, 20), (103, 30)] {
        setup.push(format!(
            "INSERT INTO job_queue (id, queue_name, kind, payload, max_attempts, attempts, \
             available_at, last_error) VALUES ({id}, 'order-email', 'send_order_email', \
             '{{\"order_id\": {}}}', 6, 1, UTC_TIMESTAMP(6) + INTERVAL {minutes} MINUTE, \
             'mail server said no: 503')",
            id - 60
        ));
    }
    setup.push(
        "INSERT INTO job_queue (id, queue_name, kind, payload, max_attempts, status, attempts, \
         last_error, finished_at) VALUES (104, 'order-email', 'send_order_email', \
         '{\"order_id\": 44}', 6, 'failed', 6, 'mail server said no: 503', UTC_TIMESTAMP(6))"
            .to_owned(),
    );
    setup.push(
        "INSERT INTO job_queue (id, queue_name, kind, payload, max_attempts) VALUES \
         (105, 'order-email', 'send_order_email', '{\"order_id\": 45}', 6)"
            .to_owned(),
    );
    db.exec(&setup.join(";\n")).await;
    session(&db.url(), JOBS, cursor_time);
}

#[tokio::test]
async fn the_search_index_sample_is_what_search_index_prints() {
    let db = TestDb::new().await;
    session(&db.url(), SEARCH_INDEX, same);
}
