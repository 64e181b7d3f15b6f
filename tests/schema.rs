//! Schema (migration 3): keys, queue names and kinds compare byte for byte; defaults are UTC
//! whatever the session's time zone; a database of schema version 2 with rows in it upgrades in
//! place, idempotently. Real server, one database per test.

use mysqlq::{EnqueueOptions, Enqueued, Job};
use mysqlq_tests::jobs::PlainNoop;
use mysqlq_tests::{TestDb, exec_on};
use sqlx::{Connection, MySqlConnection};

/// The keys of the issue: each differs from the first in case, trailing spaces or an accent.
const KEYS: [&str; 4] = ["Video-aBc", "video-ABC", "Video-aBc   ", "Vidéo-aBc"];

/// Enqueues one job per key of [`KEYS`], then the first key again.
async fn enqueue_keys(db: &TestDb) -> Vec<Enqueued> {
    let mut out = Vec::new();
    for (n, key) in KEYS.iter().chain(&KEYS[..1]).enumerate() {
        let opts = EnqueueOptions::new().dedupe_key(*key);
        out.push(
            PlainNoop { n: n as u64 }
                .enqueue_with(&db.pool, &opts)
                .await
                .unwrap(),
        );
    }
    out
}

fn assert_byte_for_byte(out: &[Enqueued]) {
    for (key, e) in KEYS.iter().zip(out) {
        assert!(
            matches!(e, Enqueued::Inserted(_)),
            "key {key:?} is its own key, not a duplicate: {out:?}"
        );
    }
    assert_eq!(
        out[4],
        Enqueued::Duplicate(out[0].id()),
        "the same bytes are a duplicate"
    );
}

/// The collation of every key column, as `table.column collation`.
async fn key_collations(conn: &mut MySqlConnection) -> Vec<(String, String)> {
    sqlx::query_as(
        "SELECT CONCAT(table_name, '.', column_name), collation_name FROM information_schema.columns \
         WHERE table_schema = DATABASE() AND ( \
           (table_name = 'job_queue' AND column_name IN ('queue_name', 'kind', 'dedupe_key', \
              'dedupe_active', 'ordering_key', 'concurrency_key')) \
           OR (table_name = 'mysqlq_concurrency' AND column_name = 'concurrency_key') \
           OR (table_name = 'mysqlq_ordering' AND column_name = 'ordering_key') \
           OR (table_name = 'mysqlq_queue' AND column_name = 'queue_name') \
           OR (table_name = 'mysqlq_kind_minute' AND column_name = 'kind')) \
         ORDER BY 1",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap()
}

#[tokio::test]
async fn keys_compare_byte_for_byte() {
    let db = TestDb::new().await;
    assert_byte_for_byte(&enqueue_keys(&db).await);
    assert_eq!(db.count("pending").await, 4, "nothing was silently dropped");

    let mut conn = db.connect().await;
    let collations = key_collations(&mut conn).await;
    assert_eq!(collations.len(), 10, "{collations:?}");
    for (column, collation) in &collations {
        assert!(collation.ends_with("_bin"), "{column} is {collation}");
    }
    // Concurrency keys, queue names and kinds are byte strings too.
    exec_on(
        &mut conn,
        "INSERT INTO mysqlq_concurrency (concurrency_key) VALUES ('Key'), ('key'), ('kéy')",
    )
    .await;
    exec_on(
        &mut conn,
        "INSERT INTO mysqlq_queue (queue_name, paused) VALUES ('Email', 1), ('email', 0)",
    )
    .await;
    let paused: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM mysqlq_queue WHERE queue_name = 'email' AND paused = 1",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(paused, 0, "pausing `Email` does not pause `email`");
}

/// The plain-SQL example of docs/schema.md ("Enqueueing with plain SQL"), verbatim.
fn documented_insert() -> String {
    let doc = include_str!("../docs/schema.md");
    let section = doc
        .split("### Enqueueing with plain SQL")
        .nth(1)
        .expect("docs/schema.md has the plain-SQL section");
    let block = section
        .split("```sql")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the section has a ```sql example");
    block.trim().to_owned()
}

#[tokio::test]
async fn plain_sql_inserts_from_any_time_zone_get_utc_defaults() {
    let db = TestDb::new().await;
    let mut conn = db.connect().await;
    exec_on(&mut conn, "SET time_zone = '+08:00'").await;
    exec_on(&mut conn, &documented_insert()).await;
    // Only `payload` is required.
    exec_on(
        &mut conn,
        "INSERT INTO job_queue (payload) VALUES (JSON_OBJECT('n', 1))",
    )
    .await;
    let rows: Vec<(u64, i64, i64, i64)> = sqlx::query_as(
        "SELECT id, \
           ABS(TIMESTAMPDIFF(SECOND, available_at, UTC_TIMESTAMP(6))), \
           ABS(TIMESTAMPDIFF(SECOND, created_at, UTC_TIMESTAMP(6))), \
           ABS(TIMESTAMPDIFF(SECOND, updated_at, UTC_TIMESTAMP(6))) \
         FROM job_queue ORDER BY id",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert_eq!(rows.len(), 2);
    for (id, available, created, updated) in rows {
        // Session time would be 8 h = 28,800 s off; a minute is any test's slack.
        assert!(
            available < 60 && created < 60 && updated < 60,
            "job {id}: available_at {available}s, created_at {created}s, updated_at {updated}s from UTC"
        );
    }
    // Tables an operator may write by hand default to UTC as well.
    exec_on(
        &mut conn,
        "INSERT INTO mysqlq_queue (queue_name, paused) VALUES ('by-hand', 1); \
         INSERT INTO mysqlq_cron (name, tick) VALUES ('by-hand', '2024-01-01 00:00:00')",
    )
    .await;
    let off: (i64, i64) = sqlx::query_as(
        "SELECT (SELECT ABS(TIMESTAMPDIFF(SECOND, updated_at, UTC_TIMESTAMP(6))) FROM mysqlq_queue), \
                (SELECT ABS(TIMESTAMPDIFF(SECOND, created_at, UTC_TIMESTAMP(6))) FROM mysqlq_cron)",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert!(off.0 < 60 && off.1 < 60, "seconds from UTC: {off:?}");
    let documented: (String, Option<String>, u32) =
        sqlx::query_as("SELECT queue_name, kind, max_attempts FROM job_queue ORDER BY id LIMIT 1")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert_eq!(
        documented,
        (
            "order-email".to_owned(),
            Some("send_order_email".to_owned()),
            6
        )
    );
}

/// Drops every mysqlq table, then applies the migrations up to version 2 only.
async fn schema_v2(db: &TestDb) {
    let mut conn = db.connect().await;
    exec_on(
        &mut conn,
        "DROP TABLE job_queue, mysqlq_queue, mysqlq_leader, mysqlq_concurrency, mysqlq_cron, \
         mysqlq_worker, mysqlq_stats_minute, mysqlq_kind_minute, mysqlq_migrations",
    )
    .await;
    assert_eq!(mysqlq::migrate_to(&db.pool, 2).await.unwrap(), 2);
    assert_eq!(mysqlq::schema_version(&mut conn).await.unwrap(), 2);
}

async fn table_shapes(conn: &mut MySqlConnection) -> Vec<String> {
    let mut out = Vec::new();
    for t in [
        "job_queue",
        "mysqlq_concurrency",
        "mysqlq_ordering",
        "mysqlq_queue",
        "mysqlq_kind_minute",
        "mysqlq_cron",
    ] {
        let (_, ddl): (String, String) =
            sqlx::query_as(sqlx::AssertSqlSafe(format!("SHOW CREATE TABLE {t}")))
                .fetch_one(&mut *conn)
                .await
                .unwrap();
        // The AUTO_INCREMENT counter is data, not shape.
        out.push(
            ddl.split_whitespace()
                .filter(|w| !w.starts_with("AUTO_INCREMENT="))
                .collect::<Vec<_>>()
                .join(" "),
        );
    }
    out
}

async fn all_rows(
    conn: &mut MySqlConnection,
) -> Vec<(
    u64,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    String,
)> {
    sqlx::query_as(
        "SELECT id, queue_name, kind, dedupe_key, dedupe_active, CAST(status AS CHAR) \
         FROM job_queue ORDER BY id",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap()
}

#[tokio::test]
async fn migration_3_upgrades_a_version_2_database_in_place() {
    let db = TestDb::new().await;
    schema_v2(&db).await;
    let mut conn = db.connect().await;
    // Rows as version 2 left them: a held dedupe key, a finished one, ordering and concurrency
    // keys, a paused queue and per-kind statistics.
    exec_on(
        &mut conn,
        "INSERT INTO job_queue (queue_name, kind, payload, dedupe_key, ordering_key, concurrency_key, \
           concurrency_limit, status, available_at, created_at) VALUES \
         ('test', 'noop', '{\"n\": 1}', 'Video-aBc', 'Order-1', 'Tenant-A', 2, 'pending', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6)), \
         ('test', 'noop', '{\"n\": 2}', 'done-key', NULL, NULL, NULL, 'completed', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6)), \
         ('other', NULL, '{}', NULL, 'order-1', NULL, NULL, 'pending', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))",
    )
    .await;
    exec_on(
        &mut conn,
        "INSERT INTO mysqlq_concurrency (concurrency_key) VALUES ('Tenant-A'); \
         INSERT INTO mysqlq_queue (queue_name, paused) VALUES ('Other', 1); \
         INSERT INTO mysqlq_kind_minute (minute, kind, runs) VALUES (UTC_TIMESTAMP(), 'noop', 3)",
    )
    .await;
    // Version 2 compares keys case-insensitively: this is what the migration fixes.
    let before = PlainNoop { n: 9 }
        .enqueue_with(&db.pool, &EnqueueOptions::new().dedupe_key("video-ABC"))
        .await
        .unwrap();
    assert!(before.is_duplicate(), "version 2 folds case: {before:?}");
    let rows_before = all_rows(&mut conn).await;

    assert_eq!(
        mysqlq::migrate(&db.pool).await.unwrap(),
        mysqlq::SCHEMA_VERSION
    );
    assert_eq!(
        mysqlq::schema_version(&mut conn).await.unwrap(),
        mysqlq::SCHEMA_VERSION
    );
    assert_eq!(
        all_rows(&mut conn).await,
        rows_before,
        "every row survives unchanged"
    );
    for (column, collation) in key_collations(&mut conn).await {
        assert!(collation.ends_with("_bin"), "{column} is {collation}");
    }
    let counts: (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT COUNT(*) FROM mysqlq_concurrency WHERE concurrency_key = 'Tenant-A'), \
                (SELECT COUNT(*) FROM mysqlq_queue WHERE queue_name = 'Other' AND paused = 1), \
                (SELECT CAST(SUM(runs) AS SIGNED) FROM mysqlq_kind_minute WHERE kind = 'noop')",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(counts, (1, 1, 3));

    // The held key is still held, by the same job, byte for byte; other spellings are free.
    let held = rows_before[0].0;
    let again = PlainNoop { n: 10 }
        .enqueue_with(&db.pool, &EnqueueOptions::new().dedupe_key("Video-aBc"))
        .await
        .unwrap();
    assert_eq!(again, Enqueued::Duplicate(mysqlq::JobId(held)));
    for key in &KEYS[1..] {
        let e = PlainNoop { n: 11 }
            .enqueue_with(&db.pool, &EnqueueOptions::new().dedupe_key(*key))
            .await
            .unwrap();
        assert!(matches!(e, Enqueued::Inserted(_)), "{key:?}: {e:?}");
    }

    // Idempotent: applying migration 3 again changes neither the tables nor the rows.
    let shapes = table_shapes(&mut conn).await;
    let rows = all_rows(&mut conn).await;
    // Later migrations redefine columns 3 defines (5: `dedupe_active`), so 3 runs again together
    // with them, in order, as a run interrupted after its DDL would.
    exec_on(
        &mut conn,
        "DELETE FROM mysqlq_migrations WHERE version >= 3",
    )
    .await;
    assert_eq!(
        mysqlq::migrate(&db.pool).await.unwrap(),
        mysqlq::SCHEMA_VERSION
    );
    assert_eq!(table_shapes(&mut conn).await, shapes);
    assert_eq!(all_rows(&mut conn).await, rows);
    let _ = conn.close().await;
}
