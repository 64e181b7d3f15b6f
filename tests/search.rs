//! The job search (`Admin::search`, `Admin::count_matching`, `mysqlq::filter`) against the real
//! server: every walk pages over every match exactly once and in its order, a page that reached
//! its read cap says so and its cursor continues, states are told apart as `OpState` defines
//! them (limits included), and every statement reads `job_queue` through an index.

use std::collections::BTreeSet;

use mysqlq::admin::{Admin, Cursor, OpState, SearchRow, Walk};
use mysqlq::filter::Filter;
use mysqlq_tests::TestDb;

/// 600 jobs in every state but rate-limited, over two queues and two kinds, with payloads and
/// meta to search.
async fn fill(db: &TestDb) {
    db.exec(
        "INSERT INTO job_queue (queue_name, kind, payload, meta, status, attempts, available_at, \
           finished_at, lease_expires_at, locked_by, last_error, priority) \
         SELECT IF(seq % 2 = 0, 'a', 'b'), IF(seq % 3 = 0, 'k2', 'k1'), \
           JSON_OBJECT('order_id', seq % 50, 'n', seq), JSON_OBJECT('tenant', CONCAT('t', seq % 3)), \
           ELT(1 + seq % 8, 'pending', 'pending', 'pending', 'waiting', 'processing', 'completed', \
             'failed', 'cancelled'), \
           seq % 3, \
           IF(seq % 8 = 1, UTC_TIMESTAMP(6) + INTERVAL seq MINUTE, UTC_TIMESTAMP(6) - INTERVAL seq SECOND), \
           IF(seq % 8 >= 5, UTC_TIMESTAMP(6) - INTERVAL (seq % 37) MINUTE, NULL), \
           IF(seq % 8 = 4, UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, NULL), \
           IF(seq % 8 = 4, IF(seq % 16 = 4, 'redis-relay:r1', 'w1'), NULL), \
           IF(seq % 8 = 6, CONCAT('boom 100% ', seq), NULL), seq % 4 \
         FROM seq_1_to_600",
    )
    .await;
    // A job due in the year 7027 is scheduled, not ready.
    db.exec(
        "INSERT INTO job_queue (queue_name, kind, payload, status, available_at) \
         VALUES ('a', 'k1', '{\"far\": true}', 'pending', '7027-01-01 00:00:00')",
    )
    .await;
    db.exec("ANALYZE TABLE job_queue").await;
}

/// Every row as the test reads it: `(id, queue, kind, status, attempts, due_in_future,
/// locked_by, order_id, tenant, error)`.
#[derive(Debug, Clone)]
struct Raw {
    id: u64,
    queue: String,
    kind: String,
    status: String,
    attempts: u32,
    future: bool,
    locked_by: Option<String>,
    order_id: Option<i64>,
    tenant: Option<String>,
    error: Option<String>,
}

/// A row of [`raw`]'s statement.
type RawRow = (
    u64,
    String,
    String,
    String,
    u32,
    i64,
    Option<String>,
    Option<i64>,
    Option<String>,
    Option<String>,
);

async fn raw(db: &TestDb) -> Vec<Raw> {
    let rows: Vec<RawRow> = sqlx::query_as(
        "SELECT id, CAST(queue_name AS CHAR), CAST(kind AS CHAR), CAST(status AS CHAR), \
               attempts, available_at > UTC_TIMESTAMP(6), CAST(locked_by AS CHAR), \
               CAST(JSON_EXTRACT(payload, '$.order_id') AS SIGNED), \
               JSON_UNQUOTE(JSON_EXTRACT(meta, '$.tenant')), CAST(last_error AS CHAR) \
             FROM job_queue",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    rows.into_iter()
        .map(|r| Raw {
            id: r.0,
            queue: r.1,
            kind: r.2,
            status: r.3,
            attempts: r.4,
            future: r.5 != 0,
            locked_by: r.6,
            order_id: r.7,
            tenant: r.8,
            error: r.9,
        })
        .collect()
}

/// The state `OpState::classify` gives a row without limits.
fn state_of(r: &Raw) -> OpState {
    match r.status.as_str() {
        "waiting" => OpState::Waiting,
        "processing"
            if r.locked_by
                .as_deref()
                .is_some_and(|l| l.starts_with("redis-relay:")) =>
        {
            OpState::Ready
        }
        "processing" => OpState::Running,
        "completed" => OpState::Completed,
        "failed" => OpState::Failed,
        "cancelled" => OpState::Cancelled,
        _ if !r.future => OpState::Ready,
        _ if r.attempts > 0 => OpState::Retrying,
        _ => OpState::Scheduled,
    }
}

/// Every page of a search, checking order and that no job comes twice.
async fn walk_all(admin: &Admin, q: &str, per_page: u32) -> (Vec<SearchRow>, usize, Walk) {
    let filter = Filter::parse(q).unwrap();
    let mut cursor: Option<Cursor> = None;
    let mut all: Vec<SearchRow> = Vec::new();
    let mut pages = 0;
    let mut walk = None;
    loop {
        let page = admin.search(&filter, cursor, per_page).await.unwrap();
        pages += 1;
        assert!(
            walk.is_none_or(|w| w == page.walk),
            "{q}: the walk changed between pages"
        );
        walk = Some(page.walk);
        assert!(page.rows.len() <= per_page as usize, "{q}: page too long");
        all.extend(page.rows);
        match page.next {
            Some(c) => cursor = Some(c),
            None => break,
        }
        assert!(pages < 1000, "{q}: does not end");
    }
    let ids: BTreeSet<u64> = all.iter().map(|r| r.id.0).collect();
    assert_eq!(ids.len(), all.len(), "{q}: a job came twice");
    (all, pages, walk.unwrap())
}

#[tokio::test]
async fn pages_cover_every_match_exactly_once_in_the_walks_order() {
    let db = TestDb::new().await;
    fill(&db).await;
    let admin = Admin::new(db.pool.clone());
    let rows = raw(&db).await;
    type Pred = fn(&Raw) -> bool;
    let cases: Vec<(&str, Pred)> = vec![
        ("", |_| true),
        ("state:ready", |r| state_of(r) == OpState::Ready),
        ("state:scheduled", |r| state_of(r) == OpState::Scheduled),
        ("state:retrying", |r| state_of(r) == OpState::Retrying),
        ("state:waiting", |r| r.status == "waiting"),
        ("state:running", |r| state_of(r) == OpState::Running),
        ("state:completed", |r| r.status == "completed"),
        ("state:failed,cancelled", |r| {
            matches!(r.status.as_str(), "failed" | "cancelled")
        }),
        // The alias of the four pending states: relayed rows read as ready, so they are in.
        ("state:pending", |r| {
            matches!(
                state_of(r),
                OpState::Ready | OpState::Scheduled | OpState::Retrying | OpState::RateLimited
            )
        }),
        ("state:ready,completed", |r| {
            matches!(state_of(r), OpState::Ready | OpState::Completed)
        }),
        ("queue:b state:completed", |r| {
            r.queue == "b" && r.status == "completed"
        }),
        ("kind:k2 state:ready,scheduled", |r| {
            r.kind == "k2" && matches!(state_of(r), OpState::Ready | OpState::Scheduled)
        }),
        ("attempts:>0 state:waiting", |r| {
            r.attempts > 0 && r.status == "waiting"
        }),
        ("args.order_id:7", |r| r.order_id == Some(7)),
        ("meta.tenant:t1 state:completed", |r| {
            r.tenant.as_deref() == Some("t1") && r.status == "completed"
        }),
        ("error:\"100% 14\"", |r| {
            r.error.as_deref().is_some_and(|e| e.contains("100% 14"))
        }),
        ("worker:w1", |r| r.locked_by.as_deref() == Some("w1")),
        ("args.far:*", |r| r.order_id.is_none()),
    ];
    for (q, pred) in cases {
        let want: BTreeSet<u64> = rows.iter().filter(|r| pred(r)).map(|r| r.id).collect();
        assert!(
            !want.is_empty(),
            "{q}: the data set has no match; fix the test"
        );
        let (got, pages, walk) = walk_all(&admin, q, 7).await;
        let got_ids: BTreeSet<u64> = got.iter().map(|r| r.id.0).collect();
        assert_eq!(
            got_ids, want,
            "{q}: pages ({pages}) do not cover exactly the matches"
        );
        for r in &got {
            let raw = rows.iter().find(|x| x.id == r.id.0).unwrap();
            assert_eq!(
                r.state,
                state_of(raw),
                "{q}: job {} has the wrong state",
                r.id
            );
        }
        // The walk's order: due first, newest finished first, or newest id first.
        let keys: Vec<(i64, u64)> = got
            .iter()
            .map(|r| match walk {
                Walk::Due => (r.available_at.timestamp_micros(), r.id.0),
                Walk::Finished => (
                    -r.finished_at.unwrap().timestamp_micros(),
                    u64::MAX - r.id.0,
                ),
                _ => (0, u64::MAX - r.id.0),
            })
            .collect();
        if let Some(w) = keys.windows(2).position(|w| w[0] > w[1]) {
            panic!(
                "{q}: not in the {walk:?} walk's order at {w}: {:?}",
                &got[w..w + 2]
            );
        }
        let filter = Filter::parse(q).unwrap();
        // The count for a confirmation is exact.
        let counted = admin.count_matching(&filter).await.unwrap();
        assert_eq!(counted.count, want.len() as u64, "{q}: count");
        assert!(
            counted.horizon >= *want.iter().max().unwrap(),
            "{q}: horizon"
        );
    }
    // A job due in 7027 is scheduled, not ready.
    let far = admin
        .search(&Filter::parse("args.far:*").unwrap(), None, 10)
        .await
        .unwrap();
    assert_eq!(far.rows[0].state, OpState::Scheduled);
    // A cursor of another walk is refused with a message.
    let page = admin
        .search(&Filter::parse("state:completed").unwrap(), None, 3)
        .await
        .unwrap();
    let err = admin
        .search(&Filter::parse("state:ready").unwrap(), page.next, 3)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("belongs to another search"), "{err}");
}

#[tokio::test]
async fn a_capped_page_says_so_and_its_cursor_continues() {
    let db = TestDb::new().await;
    let n = mysqlq::store::search::ROW_CAP + 300;
    db.exec(&format!(
        "INSERT INTO job_queue (queue_name, kind, payload, meta, status, finished_at) \
         SELECT 'a', 'k', JSON_OBJECT('n', seq), JSON_OBJECT('tenant', IF(seq = 1, 'needle', 'hay')), \
           'completed', UTC_TIMESTAMP(6) - INTERVAL (20000 - seq) SECOND FROM seq_1_to_{n}"
    ))
    .await;
    let admin = Admin::new(db.pool.clone());
    let filter = Filter::parse("state:completed meta.tenant:needle").unwrap();
    let first = admin.search(&filter, None, 50).await.unwrap();
    assert!(
        first.rows.is_empty(),
        "the needle is below the first window"
    );
    let window = first
        .window
        .expect("the first page reached its cap and says so");
    assert!(window.rows && window.read == mysqlq::store::search::ROW_CAP);
    let second = admin.search(&filter, first.next, 50).await.unwrap();
    assert_eq!(
        second.rows.len(),
        1,
        "the cursor continues below the window"
    );
    assert_eq!(second.rows[0].payload_head, r#"{"n": 1}"#);
    assert!(
        second.window.is_none() && second.next.is_none(),
        "{second:?}"
    );
    // Kind on the finished walk is read on the index entry: no row cap, no window.
    let by_kind = admin
        .search(&Filter::parse("state:completed kind:k").unwrap(), None, 10)
        .await
        .unwrap();
    assert_eq!(by_kind.rows.len(), 10);
    assert_eq!(admin.count_matching(&filter).await.unwrap().count, 1);
}

#[tokio::test]
async fn limits_make_jobs_rate_limited_not_ready() {
    let db = TestDb::new().await;
    // q1: key `hot` at its rate (bucket closed), key `cool` open; a 429'd job held; q2 at its
    // global limit of 1 with one running.
    db.exec(
        "INSERT INTO job_queue (id, queue_name, kind, payload, status, attempts, available_at, \
           rate_key, rate_limit, rate_period_us, locked_by, lease_expires_at) VALUES \
         (1, 'q1', 'k', '{}', 'pending', 0, UTC_TIMESTAMP(6) - INTERVAL 1 SECOND, 'hot', 1, 1000000, NULL, NULL), \
         (2, 'q1', 'k', '{}', 'pending', 0, UTC_TIMESTAMP(6) - INTERVAL 1 SECOND, 'cool', 1, 1000000, NULL, NULL), \
         (3, 'q1', 'k', '{}', 'pending', 1, UTC_TIMESTAMP(6) + INTERVAL 30 SECOND, NULL, NULL, NULL, NULL, NULL), \
         (4, 'q2', 'k', '{}', 'processing', 1, UTC_TIMESTAMP(6), NULL, NULL, NULL, 'w', UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE), \
         (5, 'q2', 'k', '{}', 'pending', 0, UTC_TIMESTAMP(6) - INTERVAL 1 SECOND, NULL, NULL, NULL, NULL, NULL), \
         (6, 'q1', 'k', '{}', 'pending', 2, UTC_TIMESTAMP(6) + INTERVAL 30 SECOND, NULL, NULL, NULL, NULL, NULL)",
    )
    .await;
    db.exec(
        "INSERT INTO mysqlq_rate_bucket (queue_name, rate_key, rate_limit, rate_period_us, open_at) \
         VALUES ('q1', 'hot', 1, 1000000, UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE), \
                ('q1', 'cool', 1, 1000000, UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE)",
    )
    .await;
    db.exec(
        "INSERT INTO mysqlq_rate_hold (queue_name, rate_key, job_id, held_until) \
         VALUES ('q1', '', 3, UTC_TIMESTAMP(6) + INTERVAL 30 SECOND)",
    )
    .await;
    db.exec("INSERT INTO mysqlq_queue (queue_name, paused, global_limit) VALUES ('q2', 0, 1)")
        .await;
    let admin = Admin::new(db.pool.clone());
    let ids = |p: &mysqlq::admin::SearchPage| p.rows.iter().map(|r| r.id.0).collect::<Vec<_>>();
    let search = |q: &'static str| {
        let admin = admin.clone();
        async move {
            admin
                .search(&Filter::parse(q).unwrap(), None, 50)
                .await
                .unwrap()
        }
    };
    assert_eq!(
        ids(&search("state:rate-limited").await),
        [1, 5, 3],
        "held back by a limit"
    );
    assert_eq!(ids(&search("state:ready").await), [2]);
    assert_eq!(
        ids(&search("state:retrying").await),
        [6],
        "a 429'd job is rate-limited"
    );
    let all = search("").await;
    let state = |id| all.rows.iter().find(|r| r.id.0 == id).unwrap().state;
    assert_eq!(state(1), OpState::RateLimited);
    assert_eq!(state(3), OpState::RateLimited);
    assert_eq!(state(4), OpState::Running);
    assert_eq!(state(5), OpState::RateLimited);
    assert_eq!(state(2), OpState::Ready);
    let n = admin
        .count_matching(&Filter::parse("state:rate-limited").unwrap())
        .await
        .unwrap();
    assert_eq!(n.count, 3);
}

#[tokio::test]
async fn every_walk_reads_job_queue_through_an_index() {
    let db = TestDb::new().await;
    fill(&db).await;
    let mut conn = db.connect().await;
    for q in [
        "",
        "state:ready",
        "state:scheduled,retrying",
        "state:waiting,pending",
        "state:running",
        "state:completed",
        "state:failed,cancelled finished:>1h",
        "state:completed kind:k2 queue:a",
        "state:completed meta.tenant:t1",
        "state:ready due:<1h args.order_id:3",
        "args.order_id:3",
        "id:5",
        "id:5,9 state:completed kind:k2",
    ] {
        let filter = Filter::parse(q).unwrap();
        let sorted_states = filter
            .states
            .iter()
            .any(|s| matches!(s, OpState::Ready | OpState::Running));
        let plans = mysqlq::store::search::search_explain(&mut conn, &filter)
            .await
            .unwrap();
        assert!(!plans.is_empty());
        for (name, plan) in &plans {
            let mut sorts = 0;
            for row in plan {
                if row.table.as_deref() != Some("j") {
                    continue;
                }
                assert_ne!(row.access.as_deref(), Some("ALL"), "{name} scans: {plan:?}");
                if !filter.ids.is_empty() {
                    // Ids are looked up, never found by walking down from the newest job.
                    assert!(
                        matches!(row.access.as_deref(), Some("range" | "const" | "eq_ref")),
                        "{name} walks to its ids: {plan:?}"
                    );
                }
                assert!(row.key.is_some(), "{name} uses no index: {plan:?}");
                if row.extra.as_deref().is_some_and(|e| e.contains("filesort")) {
                    sorts += 1;
                }
            }
            // Only the `processing` range (running or relayed rows, few) is sorted.
            let allowed = usize::from(sorted_states);
            assert!(sorts <= allowed, "{name} sorts {sorts} parts: {plan:?}");
        }
    }
}
