//! The operator states (`OpState`, `docs/state_machine.md` "Operator states") counted in SQL
//! equal counting every row's `OpState::classify` in Rust: a database with jobs in each of the
//! nine states, set up by the store's own statements as the runtime writes them (claims that
//! close a key's bucket and a queue's, 429s that hold a key and a whole queue, a global limit
//! reached, a relayed row, a workflow step waiting, a job due in 7027), read back row by row and
//! classified with `limited` computed here from the holds, buckets and queue limits.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, UNIX_EPOCH};

use chrono::{DateTime, Utc};
use mysqlq::admin::{Admin, Capped, JobState, OpState, PageRow, RowFacts, StateCounts};
use mysqlq::store::{self, ClaimParams, Outcome, Owned, QueueLimits, RatePlan};
use mysqlq::workflow::Workflow;
use mysqlq::{EnqueueOptions, JobId, Rate};
use mysqlq_tests::TestDb;
use mysqlq_tests::jobs::Noop;

const HOUR: Duration = Duration::from_secs(3600);

/// Enqueues one `noop` with `opts`; its id.
async fn enqueue(db: &TestDb, opts: &EnqueueOptions) -> JobId {
    Noop { n: 0 }
        .enqueue_with(&db.pool, opts)
        .await
        .unwrap()
        .id()
}

/// One claim of `queue` as a worker makes it (key lanes, queue limits); the jobs claimed, as
/// owned by the claim's token.
async fn claim_as(db: &TestDb, queue: &str, worker_id: &str, limit: u32) -> Vec<Owned> {
    let token = mysqlq_tests::token();
    let params = ClaimParams {
        queue,
        limit,
        skip: 0,
        worker_id,
        token: &token,
        lease: HOUR,
    };
    let plan = RatePlan {
        room: limit,
        slack_floor: Duration::from_millis(5),
        idle_recheck: Duration::from_millis(100),
    };
    let mut conn = db.connect().await;
    let jobs = if worker_id.starts_with(store::RELAY_PREFIX) {
        store::job_relay_claim(&mut conn, &params).await.unwrap()
    } else {
        store::job_claim_rated(&mut conn, &params, &plan, &store::Completing::default())
            .await
            .unwrap()
            .0
    };
    jobs.into_iter()
        .map(|j| Owned {
            id: j.id,
            token: token.clone(),
        })
        .collect()
}

/// [`claim_as`] until it claims something: a job enqueued a moment ago may not be due yet by
/// the clock of the claim's statement, and a key found with nothing due stays closed for its
/// idle recheck (100 ms).
async fn claim_until(db: &TestDb, queue: &str, worker_id: &str, limit: u32) -> Vec<Owned> {
    for _ in 0..50 {
        let jobs = claim_as(db, queue, worker_id, limit).await;
        if !jobs.is_empty() {
            return jobs;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    panic!("nothing to claim in {queue}");
}

async fn claim(db: &TestDb, queue: &str, limit: u32) -> Vec<Owned> {
    claim_until(db, queue, "w-states", limit).await
}

/// Ends the attempt of `job` as the worker does.
async fn finish(db: &TestDb, job: &Owned, outcome: Outcome) {
    let mut conn = db.connect().await;
    let w = store::job_finish_attempt(&mut conn, job, &outcome, "told so")
        .await
        .unwrap();
    assert_eq!(w, store::Written::Now, "{job:?}");
}

/// Claims exactly `id` (the only job of its queue a claim can take now).
async fn claim_one(db: &TestDb, queue: &str, id: JobId) -> Owned {
    let jobs = claim(db, queue, 1).await;
    assert_eq!(
        jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
        [id],
        "{queue}"
    );
    jobs.into_iter().next().unwrap()
}

fn keyed(queue: &str, key: &str, limit: &str) -> EnqueueOptions {
    EnqueueOptions::new()
        .queue(queue)
        .rate_limit(key, limit.parse::<Rate>().unwrap())
}

fn plain(queue: &str) -> EnqueueOptions {
    EnqueueOptions::new().queue(queue)
}

/// The mix: per queue, jobs in the states the comments name.
async fn seed(db: &TestDb) {
    // alpha, key `slow` (1 per hour): one claim admits a job (running) and closes the key's
    // bucket; its other two due jobs wait for the key (rate-limited).
    for _ in 0..3 {
        enqueue(db, &keyed("alpha", "slow", "1/1h")).await;
    }
    let slow = claim(db, "alpha", 3).await;
    assert_eq!(slow.len(), 1, "the key admits one");
    // alpha, key `a`: failed once, then a 429 — due in an hour, held, one attempt counted.
    let a = enqueue(db, &keyed("alpha", "a", "100/1s")).await;
    let job = claim_one(db, "alpha", a).await;
    finish(
        db,
        &job,
        Outcome::Retry {
            delay: Duration::ZERO,
        },
    )
    .await;
    let job = claim_one(db, "alpha", a).await;
    finish(db, &job, Outcome::RateLimited { delay: HOUR }).await;
    // alpha, key `b`: a 429 on its first attempt (held, no attempt counted); then another job
    // of `b`, due (rate-limited: its key is held) and one due in an hour (scheduled: a held
    // key holds back due jobs only).
    let b = enqueue(db, &keyed("alpha", "b", "100/1s")).await;
    let job = claim_one(db, "alpha", b).await;
    finish(db, &job, Outcome::RateLimited { delay: HOUR }).await;
    enqueue(db, &keyed("alpha", "b", "100/1s")).await;
    enqueue(db, &keyed("alpha", "b", "100/1s").delay(HOUR)).await;
    // alpha: retrying (a failed attempt, due in an hour), failed, cancelled, completed.
    let r = enqueue(db, &plain("alpha")).await;
    let job = claim_one(db, "alpha", r).await;
    finish(db, &job, Outcome::Retry { delay: HOUR }).await;
    for outcome in [Outcome::Fail, Outcome::Cancel, Outcome::Fail] {
        let id = enqueue(db, &plain("alpha")).await;
        let job = claim_one(db, "alpha", id).await;
        finish(db, &job, outcome).await;
    }
    for _ in 0..2 {
        let id = enqueue(db, &plain("alpha")).await;
        let job = claim_one(db, "alpha", id).await;
        let mut conn = db.connect().await;
        store::job_complete_many(&mut conn, &[job]).await.unwrap();
    }
    // alpha: two running, one relayed into a Redis stream (ready, not taken).
    for _ in 0..2 {
        let id = enqueue(db, &plain("alpha")).await;
        claim_one(db, "alpha", id).await;
    }
    let id = enqueue(db, &plain("alpha")).await;
    let relayed = claim_until(db, "alpha", "redis-relay:states-1", 1).await;
    assert_eq!(relayed.iter().map(|j| j.id).collect::<Vec<_>>(), [id]);
    // alpha: ready, scheduled, due in 7027, a workflow whose second step waits for its first.
    for _ in 0..3 {
        enqueue(db, &plain("alpha")).await;
    }
    enqueue(db, &plain("alpha").delay(HOUR)).await;
    let year_7027 = UNIX_EPOCH + Duration::from_secs(159_596_524_800);
    enqueue(db, &plain("alpha").run_at(year_7027)).await;
    Workflow::new("states")
        .step_with("first", Noop { n: 1 }, &plain("alpha").delay(HOUR))
        .unwrap()
        .step_after_with("second", Noop { n: 2 }, ["first"], &plain("alpha"))
        .unwrap()
        .enqueue(&db.pool)
        .await
        .unwrap();

    // beta: a global limit of 1, reached by its running job: its due jobs wait for it.
    let mut conn = db.connect().await;
    let global = QueueLimits {
        rate: None,
        global: Some(1),
    };
    store::queue_limits_set(&mut conn, "beta", global)
        .await
        .unwrap();
    let r = enqueue(db, &plain("beta")).await;
    let job = claim_one(db, "beta", r).await;
    finish(db, &job, Outcome::Retry { delay: HOUR }).await;
    let id = enqueue(db, &plain("beta")).await;
    claim_one(db, "beta", id).await;
    for _ in 0..2 {
        enqueue(db, &plain("beta")).await;
    }
    enqueue(db, &plain("beta").delay(HOUR)).await;
    let id = enqueue(db, &plain("beta")).await;
    db.exec(&format!(
        "UPDATE job_queue SET status = 'failed', finished_at = UTC_TIMESTAMP(6) WHERE id = {}",
        id.0
    ))
    .await;

    // gamma: a 429 of a job without a key holds the whole queue: its due jobs wait.
    let g = enqueue(db, &plain("gamma")).await;
    let job = claim_one(db, "gamma", g).await;
    finish(db, &job, Outcome::RateLimited { delay: HOUR }).await;
    for _ in 0..2 {
        enqueue(db, &plain("gamma")).await;
    }
    enqueue(db, &plain("gamma").delay(HOUR)).await;

    // delta: a queue-wide rate of 1 per hour, spent by one claim: its bucket is closed.
    let rated = QueueLimits {
        rate: Some("1/1h".parse().unwrap()),
        global: None,
    };
    store::queue_limits_set(&mut conn, "delta", rated)
        .await
        .unwrap();
    for _ in 0..3 {
        enqueue(db, &plain("delta")).await;
    }
    assert_eq!(claim(db, "delta", 3).await.len(), 1, "the queue admits one");
}

/// One row of `job_queue`, as read back.
struct Job {
    id: u64,
    queue: String,
    status: JobState,
    available_at: DateTime<Utc>,
    attempts: u32,
    locked_by: Option<String>,
    rate_key: Option<String>,
}

/// Every row of the database, and `limited` of each computed here from the holds, buckets and
/// queue limits (the definition of `RowFacts::limited`, not the store's SQL).
async fn every_row(db: &TestDb) -> (Vec<(Job, RowFacts)>, DateTime<Utc>) {
    let now: DateTime<Utc> = sqlx::query_scalar("SELECT UTC_TIMESTAMP(6)")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    type JobRow = (
        u64,
        String,
        String,
        DateTime<Utc>,
        u32,
        Option<String>,
        Option<String>,
    );
    let rows: Vec<JobRow> = sqlx::query_as(
        "SELECT id, CAST(queue_name AS CHAR), CAST(status AS CHAR), available_at, attempts, \
           CAST(locked_by AS CHAR), CAST(rate_key AS CHAR) FROM job_queue ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let jobs: Vec<Job> = rows
        .into_iter()
        .map(
            |(id, queue, st, available_at, attempts, locked_by, rate_key)| Job {
                id,
                queue,
                status: st.parse().unwrap(),
                available_at,
                attempts,
                locked_by,
                rate_key,
            },
        )
        .collect();
    let holds: Vec<(String, String, u64, DateTime<Utc>)> = sqlx::query_as(
        "SELECT CAST(queue_name AS CHAR), CAST(rate_key AS CHAR), job_id, held_until \
         FROM mysqlq_rate_hold",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let live: Vec<_> = holds.iter().filter(|h| h.3 > now).collect();
    let buckets: HashMap<(String, String), DateTime<Utc>> = sqlx::query_as(
        "SELECT CAST(queue_name AS CHAR), CAST(rate_key AS CHAR), open_at FROM mysqlq_rate_bucket",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap()
    .into_iter()
    .map(|(q, k, open_at)| ((q, k), open_at))
    .collect();
    let limits: HashMap<String, (Option<u32>, Option<u32>)> = sqlx::query_as(
        "SELECT CAST(queue_name AS CHAR), rate_limit, global_limit FROM mysqlq_queue",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap()
    .into_iter()
    .map(|(q, rate, global)| (q, (rate, global)))
    .collect();
    let mut running: HashMap<String, u64> = HashMap::new();
    for j in jobs.iter().filter(|j| j.status == JobState::Processing) {
        *running.entry(j.queue.clone()).or_default() += 1;
    }
    let processing = |q: &str| running.get(q).copied().unwrap_or(0);
    let key_held = |q: &str, k: &str| live.iter().any(|h| h.0 == q && h.1 == k);
    let queue_closed = |q: &str| {
        let (rate, global) = limits.get(q).copied().unwrap_or_default();
        let full = rate.is_some()
            && buckets
                .get(&(q.to_owned(), String::new()))
                .is_some_and(|open_at| *open_at > now);
        let at_global = global.is_some_and(|g| processing(q) >= u64::from(g));
        key_held(q, "") || full || at_global
    };
    let key_closed = |q: &str, k: &str| {
        !k.is_empty()
            && buckets
                .get(&(q.to_owned(), k.to_owned()))
                .is_some_and(|open_at| *open_at > now || key_held(q, k))
    };
    let out = jobs
        .into_iter()
        .map(|j| {
            let due = j.available_at <= now;
            let limited = j.status == JobState::Pending
                && (live.iter().any(|h| h.2 == j.id)
                    || (due
                        && (queue_closed(&j.queue)
                            || j.rate_key
                                .as_deref()
                                .is_some_and(|k| key_closed(&j.queue, k)))));
            let facts = RowFacts {
                status: j.status,
                available_at: j.available_at,
                attempts: j.attempts,
                relayed: j
                    .locked_by
                    .as_deref()
                    .is_some_and(|w| w.starts_with("redis-relay:")),
                limited,
            };
            (j, facts)
        })
        .collect();
    (out, now)
}

#[tokio::test]
async fn sql_counts_equal_classifying_every_row() {
    let db = TestDb::new().await;
    seed(&db).await;
    // Every job due "now" is due by any connection's clock (the others are an hour away).
    db.wait_for(
        "the jobs enqueued last to be due",
        "SELECT COUNT(*) = 0 FROM job_queue WHERE status = 'pending' \
         AND available_at > UTC_TIMESTAMP(6) AND available_at < UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE",
        Duration::from_secs(10),
    )
    .await;
    let (rows, now) = every_row(&db).await;

    // Counted in Rust: every row classified.
    let mut want: BTreeMap<String, BTreeMap<OpState, u64>> = BTreeMap::new();
    for (j, facts) in &rows {
        *want
            .entry(j.queue.clone())
            .or_default()
            .entry(OpState::classify(facts, now))
            .or_default() += 1;
    }
    let every: HashSet<OpState> = want.values().flat_map(|m| m.keys().copied()).collect();
    assert_eq!(every.len(), 9, "the mix has every state: {want:?}");
    let alpha = &want["alpha"];
    assert_eq!(
        (alpha[&OpState::RateLimited], alpha[&OpState::Ready]),
        (5, 4),
        "alpha: `slow` ×2, `b` due, the 429'd `a` and `b`; ready ×3 and the relayed one"
    );

    // Counted in SQL.
    let admin = Admin::new(db.pool.clone());
    let counted = admin.state_counts().await.unwrap();
    let names: Vec<&str> = counted.iter().map(|q| q.queue.as_str()).collect();
    assert_eq!(names, ["alpha", "beta", "delta", "gamma"]);
    for q in &counted {
        let want = &want[&q.queue];
        let got: BTreeMap<OpState, u64> = OpState::ALL
            .into_iter()
            .map(|st| (st, q.states.get(st).unwrap()))
            .inspect(|(_, c)| assert!(!c.capped))
            .map(|(st, c)| (st, c.n))
            .filter(|(_, n)| *n > 0)
            .collect();
        assert_eq!(&got, want, "{}: {:?}", q.queue, q.states);
    }
    let alpha = &counted[0].states;
    assert_eq!(alpha.in_stream, 1, "{alpha:?}");
    assert!(counted[0].oldest_ready_age_us.is_some());

    // `stats` reads the same counts (finished states other than failed not counted there).
    let stats = admin.queues().await.unwrap();
    for (s, q) in stats.iter().zip(&counted) {
        assert_eq!(s.queue, q.queue);
        let want = StateCounts {
            completed: None,
            cancelled: None,
            ..q.states
        };
        assert_eq!(s.states, want, "{}", s.queue);
    }

    // A page's rows are limited exactly when the counts say so.
    let page: Vec<PageRow<'_>> = rows
        .iter()
        .map(|(j, _)| PageRow {
            id: JobId(j.id),
            queue: &j.queue,
            rate_key: j.rate_key.as_deref(),
            status: j.status,
            available_at: j.available_at,
        })
        .collect();
    let limited = admin.limited_rows(&page, now).await.unwrap();
    let want: HashSet<JobId> = rows
        .iter()
        .filter(|(_, f)| f.limited)
        .map(|(j, _)| JobId(j.id))
        .collect();
    assert_eq!(limited, want);
    assert_eq!(
        limited.len(),
        12,
        "alpha 5, beta 2, gamma 3, delta 2: {limited:?}"
    );

    // The finished states, capped.
    let failed = admin.finished_count(OpState::Failed, None).await.unwrap();
    assert_eq!(failed, Capped::exact(3));
    let alpha_done = admin
        .finished_count(OpState::Completed, Some("alpha"))
        .await
        .unwrap();
    assert_eq!(alpha_done, Capped::exact(2));
    let err = admin
        .finished_count(OpState::Ready, None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not a finished state"), "{err}");
}

/// Past the cap a finished state reads "100k+", and the count stops there.
#[tokio::test]
async fn a_finished_state_is_counted_up_to_its_cap() {
    let db = TestDb::new().await;
    db.exec(
        "INSERT INTO job_queue (queue_name, kind, payload, status, finished_at) \
         SELECT 'many', 'noop', '{}', 'failed', UTC_TIMESTAMP(6) FROM seq_1_to_100002",
    )
    .await;
    let admin = Admin::new(db.pool.clone());
    let all = admin.finished_count(OpState::Failed, None).await.unwrap();
    assert_eq!(
        (all.n, all.capped, all.to_string()),
        (100_000, true, "100k+".into())
    );
    let many = admin
        .finished_count(OpState::Failed, Some("many"))
        .await
        .unwrap();
    assert_eq!((many.n, many.capped), (100_000, true));
    let counted = admin.state_counts().await.unwrap();
    assert!(
        counted.iter().all(|q| q.states.failed.capped),
        "{counted:?}"
    );
    let stats = admin.queues().await.unwrap();
    assert_eq!(stats[0].failed, 100_002, "the old count stays exact");
    assert_eq!(
        stats[0].states.failed,
        Capped::exact(100_002),
        "as is stats' FAILED"
    );
}

/// Every statement of the state counts and of a page's limits reaches `job_queue` through an
/// index, never a scan; the unfinished states are counted from `idx_job_recover` alone.
#[tokio::test]
async fn every_state_statement_reads_an_index() {
    let db = TestDb::new().await;
    db.exec(
        "INSERT INTO job_queue (queue_name, kind, payload, status, available_at, finished_at, \
           lease_expires_at, attempts, rate_key) \
         SELECT CONCAT('q', seq % 4), 'noop', '{}', \
           ELT(1 + seq % 8, 'completed', 'completed', 'completed', 'completed', 'pending', \
               'processing', 'failed', 'cancelled'), \
           UTC_TIMESTAMP(6) - INTERVAL (seq % 100) SECOND + INTERVAL (seq % 3) HOUR, \
           IF(seq % 8 IN (0, 1, 2, 3, 6, 7), UTC_TIMESTAMP(6) - INTERVAL seq SECOND, NULL), \
           IF(seq % 8 = 5, UTC_TIMESTAMP(6), NULL), seq % 3, \
           IF(seq % 5 = 0, CONCAT('k', seq % 7), NULL) \
         FROM seq_1_to_50000; \
         INSERT INTO mysqlq_rate_bucket (queue_name, rate_key, open_at) \
         SELECT CONCAT('q', seq % 4), CONCAT('k', seq), UTC_TIMESTAMP(6) + INTERVAL seq MINUTE \
         FROM seq_0_to_20; \
         INSERT INTO mysqlq_rate_hold (queue_name, rate_key, job_id, held_until) \
         SELECT 'q1', 'k1', seq * 7, UTC_TIMESTAMP(6) + INTERVAL (CAST(seq % 5 AS SIGNED) - 2) HOUR \
         FROM seq_1_to_300; \
         ANALYZE TABLE job_queue, mysqlq_rate_bucket, mysqlq_rate_hold",
    )
    .await;
    let mut conn = db.connect().await;
    let plans = store::states_explain(&mut conn, "q1").await.unwrap();
    assert_eq!(plans.len(), 11, "{plans:?}");
    for (tag, plan) in &plans {
        assert!(!plan.is_empty(), "{tag}");
        for row in plan {
            if matches!(row.table.as_deref(), Some("job_queue" | "j")) {
                assert!(row.key.is_some(), "{tag} uses no index: {plan:?}");
                assert!(
                    !matches!(row.access.as_deref(), Some("ALL" | "index")),
                    "{tag} scans job_queue: {plan:?}"
                );
            }
        }
    }
    let plan = |tag: &str| &plans.iter().find(|(t, _)| *t == tag).unwrap().1;
    let s1 = plan("state_counts");
    assert_eq!(s1.len(), 1, "{s1:?}");
    assert_eq!(s1[0].key.as_deref(), Some("idx_job_recover"), "{s1:?}");
    assert_eq!(s1[0].access.as_deref(), Some("range"), "{s1:?}");
    assert!(
        s1[0].extra.as_deref().unwrap_or("").contains("Using index"),
        "index only: {s1:?}"
    );
    let s3 = plan("state_held");
    assert!(
        s3.iter()
            .any(|r| r.key.as_deref() == Some("idx_rate_hold_until")),
        "{s3:?}"
    );
    assert!(
        s3.iter()
            .any(|r| r.table.as_deref() == Some("j") && r.access.as_deref() == Some("eq_ref")),
        "{s3:?}"
    );
    for (tag, key) in [
        ("state_finished", "idx_job_claim"),
        ("state_finished_exact", "idx_job_claim"),
        ("state_finished_all", "idx_job_finished"),
        ("state_page_queue", "idx_job_claim"),
    ] {
        let p = plan(tag);
        let row = p
            .iter()
            .find(|r| r.table.as_deref() == Some("job_queue"))
            .unwrap_or_else(|| panic!("{tag}: {p:?}"));
        assert_eq!(row.key.as_deref(), Some(key), "{tag}: {p:?}");
        assert!(
            row.extra.as_deref().unwrap_or("").contains("Using index"),
            "{tag} reads rows: {p:?}"
        );
    }
}
