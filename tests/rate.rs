//! Rate limits (`docs/rate-limits.md`): a key's limit holds across worker processes in every
//! window, a full key's backlog delays no other job, and waiting for a limit (or starting too
//! late after an admission) never costs an attempt.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mysqlq::hooks::{Hook, Hooks, JobRun, Next};
use mysqlq::store::{self, ClaimParams, RatePlan};
use mysqlq::{EnqueueOptions, JobId, NewJob, Rate, WorkerEvent};
use mysqlq_tests::jobs::{Noop, Rated};
use mysqlq_tests::{Proc, TestDb, wait_event};

const BIN: &str = env!("CARGO_BIN_EXE_mysqlq-test-worker");

fn rate(s: &str) -> Rate {
    s.parse().unwrap()
}

fn keyed(key: &str, limit: &str) -> EnqueueOptions {
    EnqueueOptions::new().rate_limit(key, rate(limit))
}

/// Every job's start times (µs) per rate key, sorted.
async fn starts_by_key(db: &TestDb) -> HashMap<String, Vec<i64>> {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT tag, TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', at) FROM test_runs \
         WHERE event = 'start' ORDER BY at",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let mut out: HashMap<String, Vec<i64>> = HashMap::new();
    for (tag, at) in rows {
        out.entry(tag).or_default().push(at);
    }
    out
}

/// The first window of `period` holding more than `n` of the sorted `starts`, if any: starts
/// `i` and `i + n` less than a period apart.
fn excess(starts: &[i64], n: usize, period: Duration) -> Option<(usize, i64, i64)> {
    let p = i64::try_from(period.as_micros()).unwrap();
    (0..starts.len().saturating_sub(n))
        .find(|&i| starts[i + n] - starts[i] < p)
        .map(|i| (i, starts[i], starts[i + n]))
}

#[test]
fn the_window_check_finds_an_excess() {
    let ms = |v: &[i64]| v.iter().map(|x| x * 1000).collect::<Vec<_>>();
    assert_eq!(
        excess(&ms(&[0, 10, 100, 110]), 2, Duration::from_millis(100)),
        None
    );
    assert_eq!(
        excess(&ms(&[0, 10, 99, 110]), 2, Duration::from_millis(100)),
        Some((0, 0, 99_000))
    );
}

#[tokio::test]
async fn a_keyed_enqueue_writes_its_limit_and_one_bucket_per_key() {
    let db = TestDb::new().await;
    // Three enqueuers of one new key at once, each in its own transaction.
    let mut tasks = Vec::new();
    for n in 0..3 {
        let pool = db.pool.clone();
        tasks.push(tokio::spawn(async move {
            let mut tx = pool.begin().await.unwrap();
            let e = Noop { n }
                .enqueue_with(&mut *tx, &keyed("sendgrid", "10/s"))
                .await
                .unwrap();
            tx.commit().await.unwrap();
            e.id()
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    mysqlq::enqueue_many(
        &db.pool,
        (0..5).map(|n| {
            NewJob::from_job(
                &Noop { n },
                &keyed(if n % 2 == 0 { "a" } else { "b" }, "5/100ms"),
            )
            .unwrap()
        }),
    )
    .await
    .unwrap();
    let rows: Vec<(String, u32, u64)> =
        sqlx::query_as("SELECT rate_key, rate_limit, rate_period_us FROM job_queue ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(rows.len(), 8);
    assert!(
        rows[..3]
            .iter()
            .all(|r| *r == ("sendgrid".into(), 10, 1_000_000))
    );
    assert_eq!(rows[3], ("a".into(), 5, 100_000));
    assert_eq!(rows[4], ("b".into(), 5, 100_000));
    // An operator sees the key and its limit (`failed show`, the dashboard's job page).
    let first = sqlx::query_scalar::<_, u64>("SELECT MIN(id) FROM job_queue")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let job = mysqlq::admin::Admin::new(db.pool.clone())
        .job(JobId(first))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (job.rate_key.as_deref(), job.rate_limit.as_deref()),
        (Some("sendgrid"), Some("10/s"))
    );
    let buckets: Vec<(String, String, u32, u64)> = sqlx::query_as(
        "SELECT queue_name, rate_key, rate_limit, rate_period_us FROM mysqlq_rate_bucket ORDER BY rate_key",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        buckets,
        [
            ("test".into(), "a".into(), 5, 100_000),
            ("test".into(), "b".into(), 5, 100_000),
            ("test".into(), "sendgrid".into(), 10, 1_000_000),
        ]
    );
}

#[tokio::test]
async fn a_rate_key_without_a_limit_is_refused_and_writes_nothing() {
    let db = TestDb::new().await;
    let err = Noop { n: 1 }
        .enqueue_with(&db.pool, &EnqueueOptions::new().rate_key("sendgrid"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("rate key")
            && err.contains("declares no rate limit")
            && err.contains("rate_limit"),
        "{err}"
    );
    let err = "0/s".parse::<Rate>().unwrap_err().to_string();
    assert!(err.contains("1 to 1000000"), "{err}");
    assert_eq!(db.scalar("SELECT COUNT(*) FROM job_queue").await, 0);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM mysqlq_rate_bucket").await,
        0
    );
}

/// Three worker processes drain two limited keys: in no window of a key's period do more
/// handlers of the key start than its limit, every job runs once, and none loses an attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_worker_processes_never_start_more_than_the_limit_in_any_window() {
    let db = TestDb::new().await;
    let limits = [("a", "4/200ms", 60), ("b", "3/100ms", 60)];
    let mut jobs = Vec::new();
    for (key, limit, n) in limits {
        for _ in 0..n {
            jobs.push(NewJob::from_job(&Rated { tag: key.into() }, &keyed(key, limit)).unwrap());
        }
    }
    // Unlimited jobs in the same queue, run beside the keys.
    for _ in 0..200 {
        jobs.push(NewJob::from_job(&Rated { tag: "free".into() }, &EnqueueOptions::new()).unwrap());
    }
    mysqlq::enqueue_many(&db.pool, jobs).await.unwrap();
    let mut procs: Vec<Proc> = (0..3)
        .map(|i| {
            Proc::start(
                BIN,
                &db,
                &format!("w{i}"),
                &["--queues", "rated", "--concurrency", "8"],
            )
        })
        .collect();
    db.wait_for(
        "every job completed",
        "SELECT COUNT(*) = 320 FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(60),
    )
    .await;
    for p in &mut procs {
        p.terminate(Duration::from_secs(10));
    }
    let starts = starts_by_key(&db).await;
    for (key, limit, n) in limits {
        let r = rate(limit);
        let s = &starts[key];
        assert_eq!(s.len(), n, "key {key}: every job started once");
        let count = usize::try_from(r.count()).unwrap();
        assert_eq!(
            excess(s, count, r.period()),
            None,
            "key {key} ({limit}): {} starts within one period",
            count + 1
        );
    }
    assert_eq!(starts["free"].len(), 200);
    // Waiting for a limit, or a start handed back as late, costs no attempt.
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_queue WHERE attempts <> 1")
            .await,
        0
    );
}

/// Session status counters of `conn`.
async fn handler_reads(conn: &mut sqlx::MySqlConnection) -> i64 {
    let rows: Vec<(String, String)> = sqlx::query_as("SHOW SESSION STATUS LIKE 'Handler_read%'")
        .fetch_all(&mut *conn)
        .await
        .unwrap();
    rows.iter().map(|(_, v)| v.parse::<i64>().unwrap()).sum()
}

/// A backlog of a key at its limit is never read: a claim finds the one unlimited job (and the
/// idle probe finds nothing else to do) by reading a handful of index entries, not the backlog.
#[tokio::test]
async fn a_full_keys_backlog_is_not_read_by_claims_or_the_probe() {
    let db = TestDb::new().await;
    let backlog = 20_000;
    mysqlq::enqueue_many(
        &db.pool,
        (0..backlog).map(|n| NewJob::from_job(&Noop { n }, &keyed("bulk", "1/1h")).unwrap()),
    )
    .await
    .unwrap();
    let mut conn = db.connect().await;
    let token = mysqlq_tests::token();
    let plan = plan(4);
    let params = claim_params(&token, 8);
    // The first claim admits the key's one start and closes it for an hour.
    let (jobs, _, report) =
        store::job_claim_rated(&mut conn, &params, &plan, &store::Completing::default())
            .await
            .unwrap();
    assert_eq!(jobs.len(), 1);
    assert!(jobs[0].rate_slack.is_some());
    assert!(report.keys_seen);
    assert!(report.next_open_in.unwrap() > Duration::from_secs(3500));
    let free = Noop { n: 0 }.enqueue(&db.pool).await.unwrap().id();

    let before = handler_reads(&mut conn).await;
    assert_eq!(
        store::job_ready_queues(&mut conn, &["test".to_owned()])
            .await
            .unwrap(),
        ["test"]
    );
    let probe = handler_reads(&mut conn).await - before;
    let before = handler_reads(&mut conn).await;
    let (jobs, _, _) =
        store::job_claim_rated(&mut conn, &params, &plan, &store::Completing::default())
            .await
            .unwrap();
    let claim = handler_reads(&mut conn).await - before;
    assert_eq!(jobs.iter().map(|j| j.id).collect::<Vec<JobId>>(), [free]);
    assert!(jobs[0].rate_slack.is_none());
    // The probe with only the full key left says the queue is idle.
    let before = handler_reads(&mut conn).await;
    assert!(
        store::job_ready_queues(&mut conn, &["test".to_owned()])
            .await
            .unwrap()
            .is_empty()
    );
    let idle = handler_reads(&mut conn).await - before;
    for (what, reads) in [("probe", probe), ("claim", claim), ("idle probe", idle)] {
        assert!(
            reads < 100,
            "{what} read {reads} index entries beside a backlog of {backlog}"
        );
    }
}

/// An `around_run` hook that holds each job's first attempt back past its rate decision's
/// slack before the handler may start.
struct Slow {
    seen: Mutex<Vec<JobId>>,
}

impl Hook for Slow {
    fn around_run<'a>(&'a self, job: &'a JobRun, next: Next<'a>) -> Next<'a> {
        let first = {
            let mut seen = self.seen.lock().unwrap();
            let first = !seen.contains(&job.id());
            seen.push(job.id());
            first
        };
        Box::pin(async move {
            if first {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            next.await
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_start_is_handed_back_without_losing_an_attempt() {
    let db = TestDb::new().await;
    let ids: Vec<JobId> = mysqlq::enqueue_many(
        &db.pool,
        (0..3)
            .map(|_| NewJob::from_job(&Rated { tag: "k".into() }, &keyed("k", "2/100ms")).unwrap()),
    )
    .await
    .unwrap()
    .iter()
    .map(|e| e.id())
    .collect();
    let hook = Arc::new(Slow {
        seen: Mutex::new(Vec::new()),
    });
    let worker = db
        .worker()
        .queues(["rated"])
        .hooks(Hooks::new().with_arc(hook))
        .start()
        .await
        .unwrap();
    let mut events = worker.events();
    wait_event(&mut events, "a late start", Duration::from_secs(20), |e| {
        matches!(e, WorkerEvent::RateLateStart { .. })
    })
    .await;
    db.wait_for(
        "all completed",
        "SELECT COUNT(*) = 3 FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(30),
    )
    .await;
    let m = worker.metrics();
    worker.shutdown().await.unwrap();
    assert!(m.counters.snapshot().rate_late_starts >= 1);
    for id in ids {
        let (attempts, started): (u32, i64) = sqlx::query_as(
            "SELECT attempts, (SELECT COUNT(*) FROM test_runs r WHERE r.job_id = j.id) \
             FROM job_queue j WHERE id = ?",
        )
        .bind(id.0)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert_eq!(
            (attempts, started),
            (1, 1),
            "job {id:?}: one attempt, one start"
        );
    }
}

/// A worker whose prefetch buffer is full of a plain backlog still serves a limited key: the
/// key's claims learn that it waits, the worker stops claiming ahead, and the key gets running
/// slots long before the backlog is drained.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_key_is_served_beside_a_buffered_backlog() {
    let db = TestDb::new().await;
    let backlog = 6_000;
    mysqlq::enqueue_many(
        &db.pool,
        (0..backlog).map(|_| {
            NewJob::from_job(&Rated { tag: "free".into() }, &EnqueueOptions::new()).unwrap()
        }),
    )
    .await
    .unwrap();
    let worker = db
        .worker()
        .queues(["rated"])
        .concurrency(4)
        .start()
        .await
        .unwrap();
    // The key's jobs come once the worker is busy, its buffer full of the backlog.
    db.wait_for(
        "the backlog being worked",
        "SELECT COUNT(*) > 500 FROM test_runs",
        Duration::from_secs(60),
    )
    .await;
    mysqlq::enqueue_many(
        &db.pool,
        (0..10)
            .map(|_| NewJob::from_job(&Rated { tag: "k".into() }, &keyed("k", "5/100ms")).unwrap()),
    )
    .await
    .unwrap();
    db.wait_for(
        "every job completed",
        &format!(
            "SELECT COUNT(*) = {} FROM job_queue WHERE status = 'completed'",
            backlog + 10
        ),
        Duration::from_secs(120),
    )
    .await;
    worker.shutdown().await.unwrap();
    let after: i64 = db
        .scalar(
            "SELECT COUNT(*) FROM test_runs WHERE tag = 'free' AND at > \
             (SELECT MAX(at) FROM test_runs WHERE tag = 'k')",
        )
        .await;
    eprintln!("plain jobs started after the key's last: {after}");
    assert!(
        after > backlog as i64 / 4,
        "the key's last job started with only {after} of {backlog} plain jobs left"
    );
}

/// Records its start; on its first run, when `hold_ms` is not 0, tells the worker that the
/// service rate-limits it for `hold_ms`.
#[mysqlq::job(queue = "rl429", retries = 3, backoff = "100ms")]
async fn throttled(
    ctx: mysqlq::JobContext,
    tag: String,
    hold_ms: u64,
) -> Result<(), mysqlq::JobError> {
    let pool = ctx.pool().expect("a pool in the context");
    let before: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM test_runs WHERE job_id = ?")
        .bind(ctx.id().0)
        .fetch_one(pool)
        .await?;
    mysqlq_tests::jobs::record(&ctx, &tag, "start").await?;
    if hold_ms > 0 && before == 0 {
        return Err(mysqlq::JobError::rate_limited(Duration::from_millis(
            hold_ms,
        )));
    }
    Ok(())
}

/// When the hold of `key` (`''`: the queue) ends, µs since the epoch, once it is written.
async fn held_until(db: &TestDb, key: &str) -> i64 {
    db.wait_for(
        "the hold",
        &format!("SELECT COUNT(*) FROM mysqlq_rate_hold WHERE rate_key = '{key}'"),
        Duration::from_secs(30),
    )
    .await;
    db.scalar(&format!(
        "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', MAX(held_until)) \
         FROM mysqlq_rate_hold WHERE rate_key = '{key}'"
    ))
    .await
}

/// The start times (µs) of the runs tagged `tag`.
async fn starts_of(db: &TestDb, tag: &str) -> Vec<i64> {
    sqlx::query_scalar(
        "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', at) FROM test_runs \
         WHERE tag = ? AND event = 'start' ORDER BY at",
    )
    .bind(tag)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limited_holds_the_key_and_gives_the_attempt_back() {
    let db = TestDb::new().await;
    let worker = db
        .worker()
        .queues(["rl429"])
        .concurrency(4)
        .start()
        .await
        .unwrap();
    let first = Throttled {
        tag: "first".into(),
        hold_ms: 3_000,
    }
    .enqueue_with(&db.pool, &keyed("k", "100/s"))
    .await
    .unwrap()
    .id();
    let until = held_until(&db, "k").await;
    // Past the key's idle recheck, so the claims that Z's enqueue wakes find k's bucket open.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..3 {
        Throttled {
            tag: "same-key".into(),
            hold_ms: 0,
        }
        .enqueue_with(&db.pool, &keyed("k", "100/s"))
        .await
        .unwrap();
    }
    Throttled {
        tag: "other-key".into(),
        hold_ms: 0,
    }
    .enqueue_with(&db.pool, &keyed("z", "100/s"))
    .await
    .unwrap();
    db.wait_for(
        "all completed",
        "SELECT COUNT(*) = 5 FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(30),
    )
    .await;
    worker.shutdown().await.unwrap();
    let same = starts_of(&db, "same-key").await;
    assert_eq!(same.len(), 3);
    assert!(
        same.iter().all(|&t| t >= until),
        "a job of the held key started {} ms before the hold ended",
        (until - same[0]) / 1000
    );
    let other = starts_of(&db, "other-key").await;
    assert!(other[0] < until, "another key waited for the held one");
    // The rate-limited attempt was given back; the history names it.
    let (attempts, outcome): (u32, String) = sqlx::query_as(
        "SELECT j.attempts, CAST(a.outcome AS CHAR) FROM job_queue j \
         JOIN mysqlq_job_attempt a ON a.job_id = j.id WHERE j.id = ?",
    )
    .bind(first.0)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((attempts, outcome.as_str()), (1, "rate_limited"));
    assert_eq!(starts_of(&db, "first").await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limited_without_a_key_holds_its_queue_only() {
    let db = TestDb::new().await;
    let worker = db
        .worker()
        .queues(["rl429", "test"])
        .concurrency(4)
        .start()
        .await
        .unwrap();
    Throttled {
        tag: "first".into(),
        hold_ms: 3_000,
    }
    .enqueue(&db.pool)
    .await
    .unwrap();
    let until = held_until(&db, "").await;
    Throttled {
        tag: "plain".into(),
        hold_ms: 0,
    }
    .enqueue(&db.pool)
    .await
    .unwrap();
    Throttled {
        tag: "keyed".into(),
        hold_ms: 0,
    }
    .enqueue_with(&db.pool, &keyed("k", "100/s"))
    .await
    .unwrap();
    let elsewhere = Noop { n: 1 }.enqueue(&db.pool).await.unwrap().id();
    db.wait_for(
        "all completed",
        "SELECT COUNT(*) = 4 FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(30),
    )
    .await;
    worker.shutdown().await.unwrap();
    for tag in ["plain", "keyed"] {
        let s = starts_of(&db, tag).await;
        assert!(
            s[0] >= until,
            "{tag}: started {} ms before its queue's hold ended",
            (until - s[0]) / 1000
        );
    }
    let done: i64 = db
        .scalar(&format!(
            "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', finished_at) FROM job_queue WHERE id = {}",
            elsewhere.0
        ))
        .await;
    assert!(
        done < until,
        "a job of another queue waited for the held queue"
    );
}

/// A job declaring its limit and key with `#[job]`: 2 starts per 100 ms per provider.
#[mysqlq::job(queue = "rl-declared", rate_limit = "2/100ms", rate_key = provider)]
async fn send_mail(
    ctx: mysqlq::JobContext,
    provider: String,
    n: u32,
) -> Result<(), mysqlq::JobError> {
    let _ = n;
    let pool = ctx.pool().expect("a pool in the context");
    let at = mysqlq_tests::jobs::now_micros();
    sqlx::query(
        "INSERT INTO test_runs (job_id, attempt, pid, tag, event, claim_token, at) \
         VALUES (?, ?, 0, ?, 'start', ?, TIMESTAMPADD(MICROSECOND, ?, '1970-01-01 00:00:00'))",
    )
    .bind(ctx.id().0)
    .bind(ctx.attempt())
    .bind(&provider)
    .bind(ctx.claim_token())
    .bind(at)
    .execute(pool)
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_limit_holds_per_key_and_is_refused_over_redis() {
    let db = TestDb::new().await;
    for n in 0..12 {
        for provider in ["sendgrid", "mailgun"] {
            SendMail {
                provider: provider.into(),
                n,
            }
            .enqueue(&db.pool)
            .await
            .unwrap();
        }
    }
    let keys: Vec<(String, u32, u64)> = sqlx::query_as(
        "SELECT DISTINCT rate_key, rate_limit, rate_period_us FROM job_queue ORDER BY rate_key",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        keys,
        [
            ("mailgun".into(), 2, 100_000),
            ("sendgrid".into(), 2, 100_000)
        ]
    );
    let worker = db
        .worker()
        .queues(["rl-declared"])
        .concurrency(8)
        .start()
        .await
        .unwrap();
    db.wait_for(
        "all completed",
        "SELECT COUNT(*) = 24 FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(30),
    )
    .await;
    worker.shutdown().await.unwrap();
    let starts = starts_by_key(&db).await;
    for key in ["sendgrid", "mailgun"] {
        assert_eq!(starts[key].len(), 12);
        assert_eq!(
            excess(&starts[key], 2, Duration::from_millis(100)),
            None,
            "{key}"
        );
    }

    let redis = mysqlq_tests::redis::TestRedis::shared();
    let started = db
        .worker()
        .queues(["rl-declared"])
        .redis(redis.connect().await)
        .start()
        .await;
    let Err(err) = started else {
        panic!("a worker over Redis refuses a queue of rate-limited jobs");
    };
    let err = err.to_string();
    assert!(
        err.contains("not supported over Redis Streams")
            && err.contains("send_mail")
            && err.contains("2/100ms")
            && err.contains("without --redis-url"),
        "{err}"
    );
    // Queue-wide limits too, naming the queue.
    let started = db
        .worker()
        .queues(["test"])
        .queue_global_limit("test", 2)
        .redis(redis.connect().await)
        .start()
        .await;
    let Err(err) = started else {
        panic!("a worker over Redis refuses queue-wide limits");
    };
    let err = err.to_string();
    assert!(
        err.contains("queue-wide limits (`test`) are not supported over Redis Streams"),
        "{err}"
    );
}

/// The leader's housekeeping: an expired hold and an idle key's bucket are deleted, a busy key's
/// bucket is kept, and a keyed job written by plain SQL without its bucket gets one (and runs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_prunes_holds_and_idle_buckets_and_makes_missing_ones() {
    let db = TestDb::new().await;
    Noop { n: 1 }
        .enqueue_with(&db.pool, &keyed("busy", "1/1h"))
        .await
        .unwrap();
    Noop { n: 2 }
        .enqueue_with(&db.pool, &keyed("idle", "1/1h"))
        .await
        .unwrap();
    db.exec("DELETE FROM job_queue WHERE rate_key = 'idle'")
        .await;
    // The busy key's one start this hour is spent: its job stays pending.
    db.exec(
        "UPDATE mysqlq_rate_bucket SET decided_at = UTC_TIMESTAMP(6) - INTERVAL 2 HOUR, \
         open_at = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR",
    )
    .await;
    db.exec(
        "INSERT INTO mysqlq_rate_hold (queue_name, rate_key, job_id, held_until) VALUES \
         ('test', 'old', 1, UTC_TIMESTAMP(6) - INTERVAL 2 MINUTE), \
         ('test', 'new', 2, UTC_TIMESTAMP(6) + INTERVAL 1 HOUR)",
    )
    .await;
    db.exec(
        "INSERT INTO job_queue (queue_name, kind, payload, rate_key, rate_limit, rate_period_us, \
           status, available_at, created_at) \
         VALUES ('test', 'noop', '{\"n\": 3}', 'orphan', 5, 1000000, 'pending', \
           UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))",
    )
    .await;
    let worker = db.worker().start().await.unwrap();
    db.wait_for(
        "the orphan key's job run",
        "SELECT COUNT(*) FROM job_queue WHERE rate_key = 'orphan' AND status = 'completed'",
        Duration::from_secs(30),
    )
    .await;
    db.wait_for(
        "the expired hold and the idle bucket pruned",
        "SELECT (SELECT COUNT(*) FROM mysqlq_rate_hold WHERE rate_key = 'old') = 0 \
           AND (SELECT COUNT(*) FROM mysqlq_rate_bucket WHERE rate_key = 'idle') = 0",
        Duration::from_secs(30),
    )
    .await;
    worker.shutdown().await.unwrap();
    let kept: Vec<String> =
        sqlx::query_scalar("SELECT rate_key FROM mysqlq_rate_bucket ORDER BY rate_key")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(kept, ["busy", "orphan"]);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM mysqlq_rate_hold WHERE rate_key = 'new'")
            .await,
        1,
        "a hold in force is kept"
    );
    assert_eq!(
        db.status(
            db.scalar("SELECT CAST(id AS SIGNED) FROM job_queue WHERE rate_key = 'busy'")
                .await
                .try_into()
                .unwrap()
        )
        .await
        .as_deref(),
        Some("pending"),
        "the busy key's job waits for its key"
    );
}

/// Jobs waiting for a limit are told apart from jobs waiting for a worker: in `Admin::queues`
/// (`stats`, the dashboard) and in the leader's `mysqlq_rate_limited_jobs` gauge.
#[tokio::test]
async fn jobs_waiting_for_a_limit_are_counted_as_rate_limited() {
    let db = TestDb::new().await;
    mysqlq::enqueue_many(
        &db.pool,
        (0..5).map(|n| NewJob::from_job(&Noop { n }, &keyed("full", "1/1h")).unwrap()),
    )
    .await
    .unwrap();
    for n in 0..3 {
        Noop { n }.enqueue(&db.pool).await.unwrap();
    }
    // One claim admits the key's one start this hour and closes it.
    let mut conn = db.connect().await;
    let token = mysqlq_tests::token();
    let params = claim_params(&token, 1);
    let plan = plan(1);
    let (jobs, _, _) =
        store::job_claim_rated(&mut conn, &params, &plan, &store::Completing::default())
            .await
            .unwrap();
    assert!(jobs[0].rate_slack.is_some());
    let admin = mysqlq::admin::Admin::new(db.pool.clone());
    let q = admin.queues().await.unwrap();
    assert_eq!((q[0].ready, q[0].rate_limited), (7, 4), "{q:?}");
    let gauges = store::queue_gauges(&mut conn).await.unwrap();
    assert_eq!((gauges[0].ready, gauges[0].rate_limited), (7, 4));
    // A 429 on the queue holds all of its ready jobs.
    db.exec(
        "INSERT INTO mysqlq_rate_hold (queue_name, rate_key, job_id, held_until) \
         VALUES ('test', '', 0, UTC_TIMESTAMP(6) + INTERVAL 1 HOUR)",
    )
    .await;
    let q = admin.queues().await.unwrap();
    assert_eq!((q[0].ready, q[0].rate_limited), (7, 7));
}

/// A bucket's slack ε never shrinks while a start it counted is inside the widest window used so
/// far, and falls back once every recorded start is older: a loaded moment does not slow the
/// key for good.
#[tokio::test]
async fn a_buckets_slack_falls_back_once_its_starts_are_all_past_the_window() {
    let db = TestDb::new().await;
    mysqlq::enqueue_many(
        &db.pool,
        (0..10).map(|n| NewJob::from_job(&Noop { n }, &keyed("k", "5/100ms")).unwrap()),
    )
    .await
    .unwrap();
    let mut conn = db.connect().await;
    let token = mysqlq_tests::token();
    let params = claim_params(&token, 1);
    let plan = plan(1);
    let slack = |db: &TestDb| {
        let db = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, u32>(
                "SELECT slack_us FROM mysqlq_rate_bucket WHERE rate_key = 'k'",
            )
            .fetch_one(&db)
            .await
            .unwrap()
        }
    };
    assert_eq!(claim_k(&mut conn, &params, &plan).await.len(), 1);
    assert_eq!(slack(&db).await, 5_000, "P/20 = the 5 ms floor");
    // A loaded moment raised it (as a worker's late starts do).
    db.exec("UPDATE mysqlq_rate_bucket SET slack_us = 1000000, open_at = UTC_TIMESTAMP(6)")
        .await;
    let jobs = claim_k(&mut conn, &params, &plan).await;
    assert_eq!(jobs[0].rate_slack, Some(Duration::from_secs(1)));
    assert_eq!(
        slack(&db).await,
        1_000_000,
        "kept while its starts are live"
    );
    // Past the widest window (100 ms + 1 s; a wide one, so that a stalled test host cannot end it early) no start it counted is live any more.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    db.exec("UPDATE mysqlq_rate_bucket SET open_at = UTC_TIMESTAMP(6)")
        .await;
    let jobs = claim_k(&mut conn, &params, &plan).await;
    assert_eq!(jobs[0].rate_slack, Some(Duration::from_millis(5)));
    assert_eq!(slack(&db).await, 5_000);
}

async fn claim_k(
    conn: &mut sqlx::MySqlConnection,
    params: &ClaimParams<'_>,
    plan: &RatePlan,
) -> Vec<store::ClaimedJob> {
    store::job_claim_rated(conn, params, plan, &store::Completing::default())
        .await
        .unwrap()
        .0
}

/// A claim of queue `test` by worker `w` under `token`, for the store-level tests.
fn claim_params(token: &str, limit: u32) -> ClaimParams<'_> {
    ClaimParams {
        queue: "test",
        limit,
        skip: 0,
        worker_id: "w",
        token,
        lease: Duration::from_secs(30),
    }
}

/// Key lanes with `room` free slots, the default slack floor and poll ceiling.
fn plan(room: u32) -> RatePlan {
    RatePlan {
        room,
        slack_floor: Duration::from_millis(5),
        idle_recheck: Duration::from_millis(100),
    }
}
