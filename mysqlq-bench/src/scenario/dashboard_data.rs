//! The dashboard scenario's data set (`docs/design/dashboard.md` §11), written by plain SQL that
//! both MariaDB and MySQL run (no `seq_*` engine): a 10-row digits table cross-joined five ways
//! gives a table of 100,000 numbers, and each group of jobs is inserted from it in statements
//! of at most [`CHUNK`] rows, then `ANALYZE TABLE job_queue`.
//!
//! With `--rows` = 1,100,000 (the default): 1,000,000 completed over the last 24 h, and 100,000
//! unfinished — 40,000 pending and due (400 of them, 1%, under a rate key whose bucket is
//! closed for 6 h, so *rate-limited*; the rest *ready*), 30,000 scheduled (one due in the year
//! 7027), 20,000 retrying, 5,000 waiting (in one workflow), 500 running over 4 `mysqlq_worker`
//! rows, 4,000 failed and 500 cancelled. Other sizes keep the proportions (each group at least
//! one job). Every job's queue is `rare` for 0.1% of it, else `emails` (~60%) or `reports`
//! (40%); its kind one of 19 common kinds (`send_email` …) or, for 0.02%, `rebuild_index`; its
//! payload `{order_id, tenant, note}` with an `order_id` unique over the data set, and its meta
//! `{tenant}` (`acme0` … `acme49`). One more completed job carries a 100 KiB payload, and
//! `mysqlq_run_minute` and `mysqlq_stats_minute` get rows for the last hour.

use sqlx::{AssertSqlSafe, MySqlConnection, Row};

use crate::error::{BenchError, db_err};

/// Most rows per INSERT … SELECT (the numbers table's size).
pub(crate) const CHUNK: u64 = 100_000;
/// The common kinds; the first is the one searched for.
pub(crate) const KINDS: [&str; 19] = [
    "send_email",
    "render_report",
    "sync_crm",
    "charge_card",
    "refund_card",
    "resize_image",
    "send_sms",
    "push_notify",
    "index_search",
    "export_csv",
    "import_csv",
    "audit_log",
    "webhook_out",
    "cleanup_tmp",
    "geocode",
    "translate",
    "thumbnail",
    "invoice_pdf",
    "score_lead",
];
/// The kind of 0.02% of the jobs.
pub(crate) const RARE_KIND: &str = "rebuild_index";
/// The queue of 0.1% of the jobs.
pub(crate) const RARE_QUEUE: &str = "rare";
/// The worker rows; running jobs are spread over them.
pub(crate) const WORKERS: [&str; 4] = [
    "bench-worker-0",
    "bench-worker-1",
    "bench-worker-2",
    "bench-worker-3",
];
/// The closed rate key (queue `emails`).
pub(crate) const CLOSED_KEY: &str = "smtp-eu";
/// The tenant searched for in `meta`.
pub(crate) const TENANT: &str = "acme7";
/// Bytes of the big payload's text, about.
const BIG_PAYLOAD_BYTES: usize = 100 * 1024;

/// How many jobs of each group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) completed: u64,
    /// Pending and due, not under the closed key.
    pub(crate) ready: u64,
    /// Pending and due under the closed key.
    pub(crate) rate_limited: u64,
    pub(crate) scheduled: u64,
    pub(crate) retrying: u64,
    pub(crate) waiting: u64,
    pub(crate) running: u64,
    pub(crate) failed: u64,
    pub(crate) cancelled: u64,
}

impl Shape {
    /// `rows` jobs: 10/11 completed, the rest unfinished in the issue's proportions.
    pub(crate) fn of(rows: u64) -> Self {
        let unfinished = rows / 11;
        let part = |per_thousand: u64| (unfinished * per_thousand / 1000).max(1);
        let due = part(400);
        let rate_limited = (due / 100).max(1);
        let mut s = Self {
            completed: 0,
            ready: due - rate_limited,
            rate_limited,
            scheduled: part(300),
            retrying: part(200),
            waiting: part(50),
            running: part(5),
            failed: part(40),
            cancelled: part(5),
        };
        s.completed = rows.saturating_sub(s.total());
        s
    }

    /// Every job of the shape.
    pub(crate) fn total(&self) -> u64 {
        self.completed
            + self.ready
            + self.rate_limited
            + self.scheduled
            + self.retrying
            + self.waiting
            + self.running
            + self.failed
            + self.cancelled
    }

    /// `(name, count)` in the order of the JSON.
    pub(crate) fn groups(&self) -> [(&'static str, u64); 9] {
        [
            ("completed", self.completed),
            ("ready", self.ready),
            ("rate_limited", self.rate_limited),
            ("scheduled", self.scheduled),
            ("retrying", self.retrying),
            ("waiting", self.waiting),
            ("running", self.running),
            ("failed", self.failed),
            ("cancelled", self.cancelled),
        ]
    }
}

/// What the timing needs to know of the data set.
#[derive(Debug, Clone, Default)]
pub(crate) struct DataSet {
    pub(crate) shape: Shape,
    /// The job with the 100 KiB payload.
    pub(crate) big_id: u64,
    /// A completed job in the middle of the table, and its `order_id`.
    pub(crate) mid_id: u64,
    pub(crate) mid_order_id: u64,
    /// Seconds the inserts took, and `ANALYZE TABLE`.
    pub(crate) insert_s: f64,
    pub(crate) analyze_s: f64,
}

/// The columns every group writes, in this order.
const COLUMNS: &str = "queue_name, kind, payload, meta, status, attempts, max_attempts, \
                       created_at, available_at, first_claimed_at, claimed_at, finished_at, \
                       locked_by, claim_token, lease_expires_at, last_error, rate_key, rate_limit, \
                       rate_period_us, workflow_id, cancelled_at, cancelled_by";

/// One group's values as SQL over `i` (0-based in the group), `g` (the group's size), `o` (a
/// unique order id) and `@t0` (the database clock when the build began). Fixed text only.
struct Group {
    name: &'static str,
    /// `queue_name`; `None`: the common spread.
    queue: Option<&'static str>,
    status: &'static str,
    attempts: &'static str,
    /// The time the row's other times follow: `t`.
    t: &'static str,
    created: &'static str,
    available: &'static str,
    claimed: &'static str,
    finished: &'static str,
    locked_by: &'static str,
    claim_token: &'static str,
    lease: &'static str,
    last_error: &'static str,
    rate_key: &'static str,
    workflow: &'static str,
    cancelled_by: &'static str,
}

const NULL: &str = "NULL";
/// The common queue spread: 0.1% `rare`, then 3 in 5 `emails`, the rest `reports`.
const QUEUE: &str =
    "CASE WHEN i % 1000 = 7 THEN 'rare' WHEN i % 5 < 3 THEN 'emails' ELSE 'reports' END";
/// Spread over the last 24 h, oldest first: `@t0 − 24 h × (g − i) / g`.
const LAST_DAY: &str = "@t0 - INTERVAL ((g - i) * 86400000000 DIV g) MICROSECOND";

fn groups() -> [Group; 9] {
    let base = Group {
        name: "",
        queue: None,
        status: "'pending'",
        attempts: "0",
        t: "@t0",
        created: "t",
        available: "t",
        claimed: NULL,
        finished: NULL,
        locked_by: NULL,
        claim_token: NULL,
        lease: NULL,
        last_error: NULL,
        rate_key: NULL,
        workflow: NULL,
        cancelled_by: NULL,
    };
    [
        Group {
            name: "completed",
            status: "'completed'",
            attempts: "1",
            t: LAST_DAY,
            created: "t - INTERVAL 1500000 MICROSECOND",
            available: "t - INTERVAL 1500000 MICROSECOND",
            claimed: "t - INTERVAL 700000 MICROSECOND",
            finished: "t",
            ..base
        },
        // Due over the last hour, oldest first.
        Group {
            name: "ready",
            t: "@t0 - INTERVAL ((g - i) * 3600000000 DIV g) MICROSECOND",
            ..base
        },
        Group {
            name: "rate_limited",
            queue: Some("emails"),
            t: "@t0 - INTERVAL ((g - i) * 3600000000 DIV g) MICROSECOND",
            rate_key: "'smtp-eu'",
            ..base
        },
        // Due from 2 h to 26 h from now; the last one in the year 7027.
        Group {
            name: "scheduled",
            t: "CASE WHEN i = g - 1 THEN TIMESTAMP('7027-01-01 00:00:00') \
                ELSE @t0 + INTERVAL 2 HOUR + INTERVAL (i * 86400000000 DIV g) MICROSECOND END",
            created: "@t0 - INTERVAL 1 HOUR",
            ..base
        },
        // A failed attempt each, due again from 2 h to 3 h from now.
        Group {
            name: "retrying",
            attempts: "1 + i % 4",
            t: "@t0 + INTERVAL 2 HOUR + INTERVAL (i * 3600000000 DIV g) MICROSECOND",
            created: "@t0 - INTERVAL 1 HOUR",
            claimed: "@t0 - INTERVAL 10 MINUTE",
            last_error: "CONCAT('timeout talking to smtp.example.com after 30 s (attempt ', 1 + i % 4, ')')",
            ..base
        },
        Group {
            name: "waiting",
            status: "'waiting'",
            t: "@t0 - INTERVAL 10 MINUTE",
            workflow: "@wf",
            ..base
        },
        Group {
            name: "running",
            status: "'processing'",
            attempts: "1",
            t: "@t0 - INTERVAL (i % 600) SECOND",
            created: "t - INTERVAL 1 SECOND",
            available: "t - INTERVAL 1 SECOND",
            claimed: "t",
            locked_by: "CONCAT('bench-worker-', i % 4)",
            claim_token: "UUID()",
            lease: "@t0 + INTERVAL 1 HOUR",
            ..base
        },
        Group {
            name: "failed",
            status: "'failed'",
            attempts: "5",
            t: LAST_DAY,
            created: "t - INTERVAL 1 HOUR",
            available: "t - INTERVAL 1 MINUTE",
            claimed: "t - INTERVAL 1 SECOND",
            finished: "t",
            last_error: "'HTTP 502 from reports.example.com: bad gateway'",
            ..base
        },
        Group {
            name: "cancelled",
            status: "'cancelled'",
            t: LAST_DAY,
            created: "t - INTERVAL 1 HOUR",
            finished: "t",
            cancelled_by: "'alice'",
            ..base
        },
    ]
}

/// `INSERT … SELECT` of one chunk of `g`: binds `i`'s offset and the chunk's size.
fn insert_sql(g: &Group, count: u64, order_base: u64) -> String {
    let queue = g
        .queue
        .map_or_else(|| QUEUE.to_owned(), |q| format!("'{q}'"));
    let kind = format!(
        "CASE WHEN i % 5000 = 13 THEN '{RARE_KIND}' ELSE ELT(1 + i % {}, {}) END",
        KINDS.len(),
        KINDS
            .iter()
            .map(|k| format!("'{k}'"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let (rate_limit, rate_period) = if g.rate_key == NULL {
        (NULL, NULL)
    } else {
        ("10", "1000000")
    };
    let cancelled_at = if g.cancelled_by == NULL { NULL } else { "t" };
    format!(
        "/* mysqlq:bench_dashboard_{name} */ INSERT INTO job_queue ({COLUMNS}) \
         SELECT {queue}, {kind}, \
           JSON_OBJECT('order_id', o, 'tenant', CONCAT('acme', o % 50), \
             'note', CONCAT('order ', o, ' for tenant acme', o % 50, ': confirm the delivery address')), \
           JSON_OBJECT('tenant', CONCAT('acme', o % 50)), {status}, {attempts}, 5, \
           {created}, {available}, {claimed}, {claimed}, {finished}, {locked_by}, {claim_token}, \
           {lease}, {last_error}, {rate_key}, {rate_limit}, {rate_period}, {workflow}, \
           {cancelled_at}, {cancelled_by} \
         FROM (SELECT i, g, o, {t} AS t FROM (SELECT s.n + ? AS i, {count} AS g, \
           s.n + ? + {order_base} AS o FROM bench_seq s WHERE s.n < ?) x) y",
        name = g.name,
        status = g.status,
        attempts = g.attempts,
        created = g.created,
        available = g.available,
        claimed = g.claimed,
        finished = g.finished,
        locked_by = g.locked_by,
        claim_token = g.claim_token,
        lease = g.lease,
        last_error = g.last_error,
        rate_key = g.rate_key,
        workflow = g.workflow,
        cancelled_by = g.cancelled_by,
        t = g.t,
    )
}

/// Runs `sql` on `conn` (fixed text).
async fn exec(conn: &mut MySqlConnection, what: &str, sql: &str) -> Result<(), BenchError> {
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
        .execute(&mut *conn)
        .await
        .map(|_| ())
        .map_err(db_err(what))
}

/// Writes the data set of `rows` jobs into the (migrated, empty) scratch database on `conn`.
pub(crate) async fn build(
    conn: &mut MySqlConnection,
    rows: u64,
    mut progress: impl FnMut(u64),
) -> Result<DataSet, BenchError> {
    let shape = Shape::of(rows);
    let began = std::time::Instant::now();
    let what = "cannot write the dashboard data set";
    exec(
        conn,
        what,
        "CREATE TABLE bench_digit (d TINYINT UNSIGNED NOT NULL PRIMARY KEY); \
         INSERT INTO bench_digit VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9); \
         CREATE TABLE bench_seq (n INT UNSIGNED NOT NULL PRIMARY KEY); \
         INSERT INTO bench_seq SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d \
           FROM bench_digit a, bench_digit b, bench_digit c, bench_digit e, bench_digit f; \
         SET @t0 = UTC_TIMESTAMP(6); \
         INSERT INTO mysqlq_workflow (kind, name, state, steps, created_at) \
           VALUES ('workflow', 'bench-nightly-import', 'running', 1, @t0); \
         SET @wf = LAST_INSERT_ID();",
    )
    .await?;
    let counts = shape.groups();
    let mut order_base = 0;
    let mut written = 0;
    for (g, (_, count)) in groups().iter().zip(counts) {
        let mut off = 0;
        while off < count {
            let n = (count - off).min(CHUNK);
            sqlx::query(AssertSqlSafe(insert_sql(g, count, order_base)))
                .bind(off)
                .bind(off)
                .bind(n)
                .execute(&mut *conn)
                .await
                .map_err(db_err(what))?;
            off += n;
            written += n;
            progress(written);
        }
        order_base += count;
    }
    let big = big_payload(order_base);
    let big_id = sqlx::query(
        "/* mysqlq:bench_dashboard_big */ INSERT INTO job_queue (queue_name, kind, payload, meta, \
         status, attempts, created_at, available_at, first_claimed_at, claimed_at, finished_at) \
         VALUES ('reports', 'render_report', ?, JSON_OBJECT('tenant', 'acme7'), 'completed', 1, \
         @t0 - INTERVAL 2 MINUTE, @t0 - INTERVAL 2 MINUTE, @t0 - INTERVAL 1 MINUTE, \
         @t0 - INTERVAL 1 MINUTE, @t0)",
    )
    .bind(big)
    .execute(&mut *conn)
    .await
    .map_err(db_err(what))?
    .last_insert_id();
    let workers: Vec<String> = WORKERS
        .iter()
        .map(|w| {
            format!(
                "('{w}', 'bench-host', 4242, 'emails,reports,rare', 200, {}, @t0 - INTERVAL 1 HOUR, @t0)",
                shape.running.div_ceil(4)
            )
        })
        .collect();
    exec(
        conn,
        what,
        &format!(
            "INSERT INTO mysqlq_worker (worker_id, host, pid, queues, concurrency, running, \
               started_at, last_seen_at) VALUES {}; \
             INSERT INTO mysqlq_rate_bucket (queue_name, rate_key, rate_limit, rate_period_us, \
               open_at, decided_at, decisions) \
               VALUES ('emails', '{CLOSED_KEY}', 10, 1000000, @t0 + INTERVAL 6 HOUR, @t0, 1); \
             INSERT INTO mysqlq_run_minute (minute, queue_name, kind, series, bucket, n) \
               SELECT DATE_FORMAT(@t0 - INTERVAL (s.n DIV 20) MINUTE, '%Y-%m-%d %H:%i:00'), \
                 IF(s.n % 2 = 0, 'emails', 'reports'), \
                 IF(s.n % 2 = 0, 'send_email', 'render_report'), \
                 IF(s.n DIV 2 % 2 = 0, 'completed', 'pickup'), \
                 40 + 4 * (s.n DIV 4 % 5), 10 + s.n % 37 \
               FROM bench_seq s WHERE s.n < 1200; \
             INSERT INTO mysqlq_stats_minute (minute, worker_id, claims, completions, retries, \
               failures, polls) \
               SELECT DATE_FORMAT(@t0 - INTERVAL (s.n DIV 4) MINUTE, '%Y-%m-%d %H:%i:00'), \
                 CONCAT('bench-worker-', s.n % 4), 170, 165, 3, 2, 40 \
               FROM bench_seq s WHERE s.n < 240; \
             DROP TABLE bench_seq; DROP TABLE bench_digit;",
            workers.join(", ")
        ),
    )
    .await?;
    let insert_s = began.elapsed().as_secs_f64();
    let analyzing = std::time::Instant::now();
    sqlx::query("/* mysqlq:bench_dashboard_analyze */ ANALYZE TABLE job_queue")
        .fetch_all(&mut *conn)
        .await
        .map_err(db_err("cannot ANALYZE TABLE job_queue"))?;
    let analyze_s = analyzing.elapsed().as_secs_f64();
    let row = sqlx::query(
        "/* mysqlq:bench_dashboard_mid */ SELECT j.id, \
           CAST(JSON_UNQUOTE(JSON_EXTRACT(j.payload, '$.order_id')) AS UNSIGNED) AS o \
         FROM job_queue j WHERE j.status = 'completed' AND j.id >= \
           (SELECT (MIN(k.id) + MAX(k.id)) DIV 2 FROM job_queue k WHERE k.id < ?) \
         ORDER BY j.id LIMIT 1",
    )
    .bind(big_id)
    .fetch_one(&mut *conn)
    .await
    .map_err(db_err("cannot read the data set"))?;
    Ok(DataSet {
        shape,
        big_id,
        mid_id: row
            .try_get("id")
            .map_err(db_err("cannot read the data set"))?,
        mid_order_id: row
            .try_get("o")
            .map_err(db_err("cannot read the data set"))?,
        insert_s,
        analyze_s,
    })
}

/// A payload of about [`BIG_PAYLOAD_BYTES`]: an order with many lines and a long note.
fn big_payload(order_id: u64) -> String {
    let lines: Vec<serde_json::Value> = (0..600)
        .map(|i| {
            serde_json::json!({
                "sku": format!("SKU-{i:06}"),
                "qty": 1 + i % 7,
                "price_cents": 199 + i * 13 % 5000,
                "title": format!("Replacement part number {i} for the bench order"),
            })
        })
        .collect();
    let mut v = serde_json::json!({
        "order_id": order_id,
        "tenant": TENANT,
        "note": "",
        "lines": lines,
    });
    let used = v.to_string().len();
    v["note"] = serde_json::Value::String(
        "lorem ipsum ".repeat(BIG_PAYLOAD_BYTES.saturating_sub(used) / 12),
    );
    v.to_string()
}

/// Jobs per stored status, to check the data set against its shape.
pub(crate) async fn status_counts(
    conn: &mut MySqlConnection,
) -> Result<Vec<(String, i64)>, BenchError> {
    let rows = sqlx::query(
        "/* mysqlq:bench_dashboard_counts */ SELECT CAST(status AS CHAR) AS s, \
         CAST(COUNT(*) AS SIGNED) AS n FROM job_queue GROUP BY status ORDER BY status",
    )
    .fetch_all(&mut *conn)
    .await
    .map_err(db_err("cannot count the data set"))?;
    rows.iter()
        .map(|r| Ok((r.try_get("s")?, r.try_get("n")?)))
        .collect::<Result<_, sqlx::Error>>()
        .map_err(db_err("cannot count the data set"))
}

/// Index sizes of `job_queue` in bytes, from `mysql.innodb_index_stats` (`size`, in pages,
/// as of the last `ANALYZE TABLE`) × `innodb_page_size`; empty when the user cannot read it.
pub(crate) async fn index_bytes(conn: &mut MySqlConnection) -> Vec<(String, i64)> {
    let rows = sqlx::query(
        "/* mysqlq:bench_dashboard_index_size */ SELECT CAST(index_name AS CHAR) AS i, \
           CAST(stat_value * @@innodb_page_size AS SIGNED) AS b \
         FROM mysql.innodb_index_stats WHERE database_name = DATABASE() \
           AND table_name = 'job_queue' AND stat_name = 'size' ORDER BY index_name",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap_or_default();
    rows.iter()
        .filter_map(|r| Some((r.try_get("i").ok()?, r.try_get("b").ok()?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_shape_is_the_issues() {
        let s = Shape::of(1_100_000);
        assert_eq!(s.completed, 1_000_000);
        assert_eq!(s.ready + s.rate_limited, 40_000);
        assert_eq!(s.rate_limited, 400);
        assert_eq!(
            (s.scheduled, s.retrying, s.waiting, s.running),
            (30_000, 20_000, 5_000, 500)
        );
        assert_eq!((s.failed, s.cancelled), (4_000, 500));
        assert_eq!(s.total(), 1_100_000);
    }

    #[test]
    fn tiny_shapes_keep_one_job_per_group() {
        let s = Shape::of(1_100);
        assert!(s.groups().iter().all(|(_, n)| *n >= 1), "{s:?}");
        assert_eq!(s.total(), 1_100);
    }

    #[test]
    fn the_big_payload_is_about_100_kib() {
        let n = big_payload(1).len();
        assert!((100 * 1024 - 100..=100 * 1024 + 100).contains(&n), "{n}");
    }
}
