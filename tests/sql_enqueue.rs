//! Enqueue from SQL (migration 11): `CALL mysqlq_enqueue(kind, payload, options)` writes the
//! rows the Rust enqueue writes (compared column by column), answers a held dedupe key as the
//! Rust enqueue does, refuses bad input with SQLSTATE 45000 naming what was wrong and writes
//! nothing, works from a trigger in the triggering statement's transaction, and the function
//! `mysqlq_enqueue_id` is installed where the server allows it and `doctor` says why not.

use std::time::{Duration, UNIX_EPOCH};

use mysqlq::admin::Level;
use mysqlq::{DedupeScope, EnqueueOptions, Enqueued, NewJob, Rate};
use mysqlq_tests::{PrivateServer, TestDb};
use serde_json::{Value, json};
use sqlx::Row as _;

/// The columns an enqueue decides, as text (`-` for NULL): the delay is read against the
/// row's own `created_at` (both from one statement's clock), so the two ways compare exactly.
const COLUMNS: &str = "SELECT CONCAT_WS(' | ', queue_name, IFNULL(kind, '-'), CAST(payload AS CHAR), \
     priority, max_attempts, CAST(status AS CHAR), attempts, \
     TIMESTAMPDIFF(MICROSECOND, created_at, available_at), IFNULL(dedupe_key, '-'), \
     IFNULL(CAST(dedupe_until AS CHAR), '-'), IFNULL(ordering_key, '-'), IFNULL(concurrency_key, '-'), \
     IFNULL(concurrency_limit, '-'), IFNULL(CAST(meta AS CHAR), '-'), IFNULL(dedupe_window_us, '-'), \
     IFNULL(rate_key, '-'), IFNULL(rate_limit, '-'), IFNULL(rate_period_us, '-'), \
     IFNULL(dedupe_active, '-')) AS r, CAST(available_at AS CHAR) AS at FROM job_queue";

/// A job both ways: the payload as SQL text (spaced, keys sorted as serde_json writes them),
/// the options as SQL JSON, and the same job for `NewJob::new`.
struct Case {
    what: &'static str,
    kind: &'static str,
    payload_sql: &'static str,
    options_sql: Option<&'static str>,
    payload: Value,
    queue: &'static str,
    options: EnqueueOptions,
    /// `run_at` given: compare `available_at`, not the delay.
    absolute: bool,
}

fn cases() -> Vec<Case> {
    let at = UNIX_EPOCH + Duration::from_micros(1_927_857_906_789_012);
    let plain = |what, options_sql, queue, options, absolute| Case {
        what,
        kind: "noop",
        payload_sql: r#"{"n":  1}"#,
        options_sql,
        payload: json!({"n": 1}),
        queue,
        options,
        absolute,
    };
    vec![
        plain("no options", None, "default", EnqueueOptions::new(), false),
        plain(
            "queue, priority, attempts",
            Some(r#"{"queue": "order-email", "priority": -3, "max_attempts": 9}"#),
            "order-email",
            EnqueueOptions::new().priority(-3).max_attempts(9),
            false,
        ),
        plain(
            "a delay",
            Some(r#"{"queue": "test", "delay_seconds": 90.25}"#),
            "test",
            EnqueueOptions::new().delay(Duration::from_micros(90_250_000)),
            false,
        ),
        plain(
            "run_at",
            Some(r#"{"queue": "test", "run_at": "2031-02-03 04:05:06.789012"}"#),
            "test",
            EnqueueOptions::new().run_at(at),
            true,
        ),
        plain(
            "dedupe until started",
            Some(r#"{"queue": "test", "dedupe_key": "Video-aBc", "dedupe_scope": "started"}"#),
            "test",
            EnqueueOptions::new()
                .dedupe_key("Video-aBc")
                .dedupe_scope(DedupeScope::UntilStarted),
            false,
        ),
        plain(
            "dedupe window",
            Some(r#"{"queue": "test", "dedupe_key": "w-1", "dedupe_window_seconds": 600}"#),
            "test",
            EnqueueOptions::new()
                .dedupe_key("w-1")
                .dedupe_window(Duration::from_secs(600)),
            false,
        ),
        plain(
            "ordering and concurrency keys",
            Some(
                r#"{"queue": "test", "ordering_key": "acct-7", "concurrency_key": "tenant-9", "concurrency_limit": 3}"#,
            ),
            "test",
            EnqueueOptions::new()
                .ordering_key("acct-7")
                .concurrency_limit("tenant-9", 3),
            false,
        ),
        plain(
            "meta",
            Some(r#"{"queue": "test", "meta": {"n": 1, "tenant": "acme"}}"#),
            "test",
            EnqueueOptions::new()
                .meta("n", json!(1))
                .meta("tenant", json!("acme")),
            false,
        ),
        plain(
            "a rate key",
            Some(
                r#"{"queue": "test", "rate_key": "acct-1", "rate_limit": 10, "rate_period_ms": 1000}"#,
            ),
            "test",
            EnqueueOptions::new().rate_limit("acct-1", Rate::per_second(10).unwrap()),
            false,
        ),
        Case {
            what: "a nested payload with non-ASCII text",
            kind: "send_order_email",
            payload_sql: r#"{"a": [1, 2.5, {"b": "é ü 日本"}], "z": null}"#,
            options_sql: Some(r#"{"queue": "order-email"}"#),
            payload: json!({"a": [1, 2.5, {"b": "é ü 日本"}], "z": null}),
            queue: "order-email",
            options: EnqueueOptions::new(),
            absolute: false,
        },
    ]
}

/// `CALL mysqlq_enqueue` on `conn`; the id and outcome it set.
async fn call(
    conn: &mut sqlx::MySqlConnection,
    kind: &str,
    payload: &str,
    options: Option<&str>,
) -> Result<(u64, String), sqlx::Error> {
    sqlx::query("CALL mysqlq_enqueue(?, ?, ?)")
        .bind(kind)
        .bind(payload)
        .bind(options)
        .execute(&mut *conn)
        .await?;
    let (id, outcome): (u64, String) =
        sqlx::query_as("SELECT @mysqlq_job_id, CAST(@mysqlq_enqueued AS CHAR)")
            .fetch_one(&mut *conn)
            .await?;
    Ok((id, outcome))
}

/// The rows of `db` in id order, each as [`COLUMNS`] with the delay or the time blanked.
async fn rows(db: &TestDb, absolute: &[bool]) -> Vec<String> {
    let got = sqlx::query(sqlx::AssertSqlSafe(format!("{COLUMNS} ORDER BY id")))
        .fetch_all(&db.pool)
        .await
        .unwrap();
    got.iter()
        .zip(absolute)
        .map(|(r, &abs)| {
            let text: String = r.get("r");
            let at: String = r.get("at");
            let mut cols: Vec<String> = text.split(" | ").map(str::to_owned).collect();
            if abs {
                cols[7] = at;
            }
            cols.join(" | ")
        })
        .collect()
}

#[tokio::test]
async fn the_procedure_writes_the_rows_the_rust_enqueue_writes() {
    let by_rust = TestDb::new().await;
    let by_sql = TestDb::new().await;
    let mut conn = by_sql.connect().await;
    let cases = cases();
    for c in &cases {
        let job = NewJob::new(c.kind, c.queue, &c.payload, &c.options).unwrap();
        assert!(
            matches!(
                mysqlq::enqueue_many(&by_rust.pool, vec![job])
                    .await
                    .unwrap()[0],
                Enqueued::Inserted(_)
            ),
            "{}",
            c.what
        );
        let (_, outcome) = call(&mut conn, c.kind, c.payload_sql, c.options_sql)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", c.what));
        assert_eq!(outcome, "inserted", "{}", c.what);
    }
    let absolute: Vec<bool> = cases.iter().map(|c| c.absolute).collect();
    let (rust, sql) = (
        rows(&by_rust, &absolute).await,
        rows(&by_sql, &absolute).await,
    );
    assert_eq!(rust.len(), cases.len());
    for ((c, r), s) in cases.iter().zip(&rust).zip(&sql) {
        assert_eq!(
            s, r,
            "{}: the row by SQL (left) and by Rust (right)",
            c.what
        );
    }
    let buckets = "SELECT CAST(GROUP_CONCAT(CONCAT_WS(' ', queue_name, rate_key, rate_limit, rate_period_us)) AS CHAR) FROM mysqlq_rate_bucket";
    let bucket = |db: &TestDb| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, Option<String>>(buckets)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    assert_eq!(bucket(&by_sql).await, bucket(&by_rust).await);
    assert_eq!(
        bucket(&by_sql).await.as_deref(),
        Some("test acct-1 10 1000000")
    );
}

#[tokio::test]
async fn a_held_dedupe_key_is_answered_as_the_rust_enqueue_answers_it() {
    let by_rust = TestDb::new().await;
    let by_sql = TestDb::new().await;
    let mut conn = by_sql.connect().await;
    let key = r#"{"queue": "test", "dedupe_key": "order-42"}"#;
    let replace =
        r#"{"queue": "test", "dedupe_key": "order-42", "dedupe_replace": true, "meta": {"v": 3}}"#;
    let opts = EnqueueOptions::new().dedupe_key("order-42");
    let enqueue = |n: u64, o: EnqueueOptions| {
        let pool = by_rust.pool.clone();
        async move {
            let job = NewJob::new("noop", "test", &json!({"n": n}), &o).unwrap();
            mysqlq::enqueue_many(&pool, vec![job]).await.unwrap()[0]
        }
    };

    let (first, outcome) = call(&mut conn, "noop", r#"{"n": 1}"#, Some(key))
        .await
        .unwrap();
    assert_eq!(outcome, "inserted");
    let holder = enqueue(1, opts.clone()).await.id();
    assert_eq!(
        call(&mut conn, "noop", r#"{"n": 2}"#, Some(key))
            .await
            .unwrap(),
        (first, "duplicate".to_owned())
    );
    assert_eq!(enqueue(2, opts.clone()).await, Enqueued::Duplicate(holder));
    assert_eq!(
        call(&mut conn, "noop", r#"{"n": 3}"#, Some(replace))
            .await
            .unwrap(),
        (first, "replaced".to_owned())
    );
    assert_eq!(
        enqueue(3, opts.clone().dedupe_replace().meta("v", json!(3))).await,
        Enqueued::Replaced(holder)
    );
    // The replaced rows are alike (the delay differs by when each replace ran).
    let row =
        "SELECT CAST(payload AS CHAR), CAST(meta AS CHAR), CAST(status AS CHAR) FROM job_queue";
    let read = |db: &TestDb| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_as::<_, (String, String, String)>(row)
                .fetch_all(&pool)
                .await
                .unwrap()
        }
    };
    assert_eq!(read(&by_sql).await, read(&by_rust).await);
    assert_eq!(read(&by_sql).await[0].0, r#"{"n":3}"#);

    // Inside a READ COMMITTED transaction the duplicate is answered by a plain read: the holder
    // is left unlocked, so a worker completing it does not wait for this transaction.
    sqlx::query("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query("BEGIN").execute(&mut conn).await.unwrap();
    assert_eq!(
        call(&mut conn, "noop", r#"{"n": 4}"#, Some(key))
            .await
            .unwrap(),
        (first, "duplicate".to_owned())
    );
    let mut worker = by_sql.connect().await;
    sqlx::query("SET SESSION innodb_lock_wait_timeout = 1")
        .execute(&mut worker)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE job_queue SET status = 'completed', finished_at = UTC_TIMESTAMP(6) WHERE id = ?",
    )
    .bind(first)
    .execute(&mut worker)
    .await
    .expect("the holder is not locked by the SQL enqueue's transaction");
    sqlx::query("COMMIT").execute(&mut conn).await.unwrap();
    // The key is free again: the next enqueue inserts.
    assert_eq!(
        call(&mut conn, "noop", r#"{"n": 5}"#, Some(key))
            .await
            .unwrap()
            .1,
        "inserted"
    );
}

#[tokio::test]
async fn bad_input_is_refused_naming_what_was_wrong_and_writes_nothing() {
    let db = TestDb::new().await;
    let mut conn = db.connect().await;
    let big = format!(r#"{{"blob": "{}"}}"#, "x".repeat(1 << 20));
    let big_meta = format!(r#"{{"meta": {{"blob": "{}"}}}}"#, "x".repeat(16 * 1024));
    let long_key = format!(r#"{{"dedupe_key": "{}"}}"#, "k".repeat(192));
    let refused: Vec<(&str, &str, Option<&str>, &str)> = vec![
        ("", "{}", None, "kind must be 1 to 128 characters"),
        ("noop", "nope", None, "is not valid JSON"),
        (
            "noop",
            "[1, 2]",
            None,
            "must be a JSON object (the job's arguments by name), not ARRAY",
        ),
        ("noop", &big, None, "over the limit of 1048576"),
        (
            "noop",
            "{}",
            Some("[1]"),
            "options must be a JSON object or NULL",
        ),
        (
            "noop",
            "{}",
            Some(r#"{"qeueu": "x"}"#),
            "unknown option `qeueu`",
        ),
        (
            "noop",
            "{}",
            Some(r#"{"queue": "bad queue"}"#),
            "queue name `bad queue` must be 1 to 64 characters",
        ),
        (
            "noop",
            "{}",
            Some(r#"{"queue": 7}"#),
            "option `queue` must be a string, not INTEGER",
        ),
        (
            "noop",
            "{}",
            Some(r#"{"priority": "high"}"#),
            "option `priority` must be an integer, not STRING",
        ),
        (
            "noop",
            "{}",
            Some(r#"{"priority": 40000}"#),
            "must be -32768 to 32767",
        ),
        (
            "noop",
            "{}",
            Some(r#"{"max_attempts": 0}"#),
            "must be at least 1 (the first attempt counts)",
        ),
        (
            "noop",
            "{}",
            Some(r#"{"delay_seconds": -1}"#),
            "must not be negative",
        ),
        (
            "noop",
            "{}",
            Some(r#"{"delay_seconds": 1, "run_at": "2030-01-01 00:00:00"}"#),
            "not both",
        ),
        (
            "noop",
            "{}",
            Some(r#"{"run_at": "tomorrow"}"#),
            "must be a UTC time YYYY-MM-DD HH:MM:SS",
        ),
        (
            "noop",
            "{}",
            Some(r#"{"run_at": "2030-13-01 00:00:00"}"#),
            "is not a time from 1970 to 9999",
        ),
        ("noop", "{}", Some(&long_key), "dedupe key `kkkk"),
        (
            "noop",
            "{}",
            Some(r#"{"dedupe_key": ""}"#),
            "must be 1 to 191 characters long",
        ),
        (
            "noop",
            "{}",
            Some(r#"{"dedupe_key": "a", "dedupe_scope": "forever"}"#),
            "must be `finished` or `started`",
        ),
        (
            "noop",
            "{}",
            Some(r#"{"dedupe_key": "a", "dedupe_scope": "started", "dedupe_window_seconds": 5}"#),
            "needs `dedupe_scope` `finished`",
        ),
        (
            "noop",
            "{}",
            Some(r#"{"dedupe_replace": true}"#),
            "need a `dedupe_key`",
        ),
        (
            "noop",
            "{}",
            Some(r#"{"dedupe_replace": "yes", "dedupe_key": "a"}"#),
            "must be true or false",
        ),
        (
            "noop",
            "{}",
            Some(r#"{"concurrency_key": "c"}"#),
            "`concurrency_key` and `concurrency_limit` go together",
        ),
        (
            "noop",
            "{}",
            Some(r#"{"concurrency_key": "c", "concurrency_limit": 0}"#),
            "must be 1 to 65535",
        ),
        (
            "noop",
            "{}",
            Some(r#"{"rate_key": "r"}"#),
            "need `rate_limit`",
        ),
        (
            "noop",
            "{}",
            Some(r#"{"rate_limit": 5, "rate_period_ms": 5}"#),
            "must be 10 to 86400000",
        ),
        (
            "noop",
            "{}",
            Some(r#"{"meta": [1]}"#),
            "option `meta` must be a JSON object, not ARRAY",
        ),
        ("noop", "{}", Some(&big_meta), "over the limit of 16384"),
    ];
    for (kind, payload, options, expected) in &refused {
        let err = call(&mut conn, kind, payload, *options)
            .await
            .expect_err(&format!("{options:?} is refused"));
        let db_err = err.as_database_error().expect("a server error");
        assert_eq!(db_err.code().as_deref(), Some("45000"), "{db_err}");
        let msg = db_err.message();
        assert!(
            msg.starts_with("mysqlq_enqueue: ") && msg.contains(expected),
            "{options:?}: {msg:?} should say {expected:?}"
        );
    }
    assert_eq!(db.scalar("SELECT COUNT(*) FROM job_queue").await, 0);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM mysqlq_rate_bucket").await,
        0
    );

    // The Rust enqueue refuses the same jobs, for the same reason.
    let same: Vec<(EnqueueOptions, &str)> = vec![
        (
            EnqueueOptions::new().queue("bad queue"),
            "must be 1 to 64 characters",
        ),
        (EnqueueOptions::new().max_attempts(0), "must be at least 1"),
        (
            EnqueueOptions::new().concurrency_limit("c", 0),
            "must be at least 1",
        ),
        (
            EnqueueOptions::new().dedupe_key("k".repeat(192)),
            "must be 1 to 191 characters long",
        ),
        (
            EnqueueOptions::new()
                .dedupe_key("a")
                .dedupe_scope(DedupeScope::UntilStarted)
                .dedupe_window(Duration::from_secs(5)),
            "UntilFinished",
        ),
        (
            EnqueueOptions::new().dedupe_replace(),
            "need a `dedupe_key`",
        ),
    ];
    for (o, expected) in same {
        let e = NewJob::new("noop", "test", &json!({}), &o)
            .unwrap_err()
            .to_string();
        assert!(e.contains(expected), "{e:?} should say {expected:?}");
    }
    let e = NewJob::new(
        "noop",
        "test",
        &json!({"blob": "x".repeat(1 << 20)}),
        &EnqueueOptions::new(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("1048576"), "{e}");
}

/// The refusals `docs/other-languages.md` shows are the procedure's own, word for word, with the
/// error number and SQLSTATE a client gets.
#[tokio::test]
async fn the_refusals_the_docs_show_are_what_the_procedure_says() {
    let db = TestDb::new().await;
    let mut conn = db.connect().await;
    let shown = mysqlq_tests::docs::block("docs/other-languages.md", "ERROR 1644 (45000): ").lines;
    let calls: [(&str, Option<&str>); 3] = [
        ("{}", Some(r#"{"queue": "bad queue"}"#)),
        ("{}", Some(r#"{"qeueu": "x"}"#)),
        ("[1, 2]", None),
    ];
    assert_eq!(shown.len(), calls.len(), "one line per refused call");
    for ((payload, options), line) in calls.into_iter().zip(&shown) {
        let err = call(&mut conn, "noop", payload, options)
            .await
            .expect_err("refused");
        let e = err.as_database_error().expect("a server error");
        let code = e.code().unwrap_or_default();
        let number = e
            .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .map(|m| m.number());
        assert_eq!(
            format!("ERROR {} ({code}): {}", number.unwrap_or(0), e.message()),
            *line,
            "docs/other-languages.md"
        );
    }
    assert_eq!(db.scalar("SELECT COUNT(*) FROM job_queue").await, 0);
}

#[tokio::test]
async fn a_trigger_enqueues_in_the_triggering_statements_transaction() {
    let db = TestDb::new().await;
    for sql in [
        "CREATE TABLE orders (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, total INT NOT NULL)",
        "CREATE TRIGGER orders_enqueue AFTER INSERT ON orders FOR EACH ROW \
         CALL mysqlq_enqueue('noop', JSON_OBJECT('n', NEW.id), JSON_OBJECT('queue', 'test'))",
        "CREATE TABLE refunds (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY)",
        "CREATE TRIGGER refunds_enqueue AFTER INSERT ON refunds FOR EACH ROW \
         CALL mysqlq_enqueue('noop', JSON_OBJECT('n', NEW.id), JSON_OBJECT('queue', 'no such queue!'))",
    ] {
        db.exec(sql).await;
    }
    let mut conn = db.connect().await;
    let mut committed = Vec::new();
    for (total, commit) in [(10, true), (20, false), (30, true)] {
        sqlx::query("BEGIN").execute(&mut conn).await.unwrap();
        let done = sqlx::query("INSERT INTO orders (total) VALUES (?)")
            .bind(total)
            .execute(&mut conn)
            .await
            .unwrap();
        // The order's id, not the job's: a trigger's LAST_INSERT_ID is its own.
        let order = done.last_insert_id();
        let (n,): (u64,) = sqlx::query_as("SELECT total FROM orders WHERE id = ?")
            .bind(order)
            .fetch_one(&mut conn)
            .await
            .map(|(t,): (i32,)| (u64::try_from(t).unwrap(),))
            .unwrap();
        assert_eq!(n, total);
        sqlx::query(if commit { "COMMIT" } else { "ROLLBACK" })
            .execute(&mut conn)
            .await
            .unwrap();
        if commit {
            committed.push(order);
        }
    }
    // Bad options in the trigger: the INSERT fails with the procedure's error, and neither the
    // refund nor a job is written.
    let err = sqlx::query("INSERT INTO refunds () VALUES ()")
        .execute(&mut conn)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("queue name `no such queue!`"),
        "{err}"
    );
    assert_eq!(db.scalar("SELECT COUNT(*) FROM refunds").await, 0);
    let payloads: Vec<u64> = sqlx::query_scalar(
        "SELECT CAST(JSON_EXTRACT(payload, '$.n') AS UNSIGNED) FROM job_queue ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(payloads, committed, "one job per committed order");

    // A worker runs exactly those.
    let worker = db.worker().start().await.unwrap();
    db.wait_for(
        "the trigger's jobs",
        "SELECT COUNT(*) >= 2 FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(30),
    )
    .await;
    worker.shutdown().await.unwrap();
    assert_eq!(db.scalar("SELECT COUNT(*) FROM test_runs").await, 2);
    assert_eq!(db.count("completed").await, 2);
}

#[tokio::test]
async fn the_function_returns_the_id_and_doctor_says_when_the_server_refused_it() {
    // Where the server allows it (no binary log here), the function is installed.
    let db = TestDb::new().await;
    let id: u64 =
        sqlx::query_scalar(r#"SELECT mysqlq_enqueue_id('noop', '{"n": 5}', '{"queue": "test"}')"#)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(db.status(id).await.as_deref(), Some("pending"));

    // With binary logging on, a user without SUPER cannot create a function that writes:
    // the migration goes on without it, and doctor says why and how to get it.
    let server = PrivateServer::start_with(&["--log-bin=mysqlq-bin", "--server-id=1"]);
    let root = TestDb::on(&server.url()).await;
    root.exec("CREATE USER app@'%' IDENTIFIED BY 'app-pw'")
        .await;
    root.exec(&format!("GRANT ALL ON `{}`.* TO app@'%'", root.name))
        .await;
    let app_url = format!(
        "mysql://app:app-pw@127.0.0.1:{}/{}",
        server.port(),
        root.name
    );
    let app = sqlx::MySqlPool::connect(&app_url).await.unwrap();
    for sql in [
        "DROP FUNCTION IF EXISTS mysqlq_enqueue_id",
        "DROP PROCEDURE mysqlq_enqueue",
        "DELETE FROM mysqlq_migrations WHERE version = 11",
    ] {
        root.exec(sql).await;
    }
    mysqlq::migrate(&app)
        .await
        .expect("migration 11 applies without the function");
    let sql_check = |checks: Vec<mysqlq::admin::Check>| {
        checks
            .into_iter()
            .find(|c| c.name == "sql enqueue")
            .expect("a sql enqueue check")
    };
    let c = sql_check(
        mysqlq::admin::Admin::new(app.clone())
            .doctor(&[])
            .await
            .unwrap(),
    );
    assert_eq!(c.level, Level::Warn, "{c:?}");
    assert!(
        c.detail.contains("log_bin_trust_function_creators is off"),
        "{c:?}"
    );
    let mut conn = root.connect().await;
    let (id, outcome) = call(
        &mut conn,
        "noop",
        r#"{"n": 6}"#,
        Some(r#"{"queue": "test"}"#),
    )
    .await
    .unwrap();
    assert_eq!(
        (outcome.as_str(), root.status(id).await.as_deref()),
        ("inserted", Some("pending"))
    );

    root.exec("SET GLOBAL log_bin_trust_function_creators = 1")
        .await;
    mysqlq::migrate(&app).await.unwrap();
    let c = sql_check(
        mysqlq::admin::Admin::new(app.clone())
            .doctor(&[])
            .await
            .unwrap(),
    );
    assert_eq!(c.level, Level::Ok, "the next migrate installed it: {c:?}");
    app.close().await;
}
