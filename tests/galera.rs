//! Galera: a private 3-node MariaDB Galera cluster (galera-4, rsync state transfers, nodes
//! running as the `mysql` user) per test, started by the test. Sizes are small by default so CI
//! stays fast; `MYSQLQ_CLUSTER_SCALE=10` multiplies the job counts. The numbers each test
//! measures are printed (`cargo test --test galera -- --nocapture`) and quoted in
//! `docs/clusters.md`.

use std::time::{Duration, Instant};

use mysqlq::{ClusterUrl, EnqueueOptions, NewJob, WorkerHandle};
use mysqlq_tests::invariants::{self, place_orders};
use mysqlq_tests::jobs::{Noop, Sleepy};
use mysqlq_tests::{GaleraCluster, Proc, TestDb, scalar_on};
use sqlx::MySqlPool;
use sqlx::mysql::MySqlPoolOptions;

/// One cluster at a time: three nodes and their workers already fill two cores.
static ONE_CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn scale() -> usize {
    mysqlq_tests::scale("MYSQLQ_CLUSTER_SCALE")
}

async fn start_cluster() -> GaleraCluster {
    tokio::task::spawn_blocking(|| {
        let began = Instant::now();
        let c = GaleraCluster::start(3);
        println!("a 3-node Galera cluster came up in {:.1?}", began.elapsed());
        c
    })
    .await
    .expect("start the Galera cluster")
}

/// `url` (one node or all) on the test's database.
fn on_db(url: &str, db: &TestDb) -> String {
    format!("{url}/{}", db.name)
}

async fn pool_on(url: &str, max: u32) -> MySqlPool {
    ClusterUrl::parse(url)
        .unwrap()
        .connect(MySqlPoolOptions::new().max_connections(max))
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

/// Waits until `sql` counts `n` on `pool`, at most `limit`.
async fn wait_count(pool: &MySqlPool, what: &str, sql: &str, n: i64, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(got) = sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql.to_owned()))
            .fetch_one(pool)
            .await
            && got >= n
        {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn noops(n: usize) -> Vec<NewJob> {
    (0..n as u64)
        .map(|n| NewJob::from_job(&Noop { n }, &EnqueueOptions::new()).unwrap())
        .collect()
}

/// How many nodes the workers of [`drain_with`] write through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writers {
    One,
    Several,
}

/// Three in-process workers, one per pool, until `n` jobs completed; returns the lock
/// conflicts they met (deadlocks and certification failures, lock wait timeouts), how long the
/// drain took and how many jobs ran twice, and checks that each worker did some of the work.
/// Through one writer it checks that no job ran twice and each completion was counted once;
/// through several it only counts the jobs that ran twice (`docs/clusters.md`: Galera let two
/// claims of one job through two nodes both commit, in about one run in five on a loaded
/// machine).
async fn drain_with(
    db: &TestDb,
    pools: &[MySqlPool],
    n: usize,
    writers: Writers,
) -> (u64, Duration, i64) {
    sqlx::query("DELETE FROM test_runs")
        .execute(&db.pool)
        .await
        .unwrap();
    mysqlq::enqueue_many(&db.pool, noops(n)).await.unwrap();
    let began = Instant::now();
    let mut workers: Vec<WorkerHandle> = Vec::new();
    for (i, pool) in pools.iter().enumerate() {
        workers.push(
            mysqlq::Worker::builder(pool.clone())
                .queues(["test"])
                .worker_id(format!("w{i}"))
                .concurrency(8)
                .poll_interval(Duration::from_millis(5), Duration::from_millis(100))
                .start()
                .await
                .expect("start a worker"),
        );
    }
    wait_count(
        &db.pool,
        "the drain",
        "SELECT COUNT(*) FROM job_queue WHERE status = 'completed'",
        i64::try_from(n).unwrap(),
        Duration::from_secs(300),
    )
    .await;
    let took = began.elapsed();
    let mut conflicts = 0;
    let mut completions = 0;
    let mut claims = Vec::new();
    for (i, w) in workers.into_iter().enumerate() {
        let metrics = w.metrics();
        w.shutdown().await.unwrap();
        let c = metrics.counters.snapshot();
        conflicts += c.deadlocks + c.lock_waits;
        completions += c.completions;
        claims.push(format!(
            "w{i}: {} claims ({} empty, {} probes), {} conflicts",
            c.polls - c.probes,
            c.empty_polls,
            c.probes,
            c.deadlocks + c.lock_waits
        ));
    }
    let twice = scalar_on(
        &db.pool,
        "SELECT COUNT(*) FROM (SELECT job_id FROM test_runs GROUP BY job_id HAVING COUNT(*) > 1) t",
    )
    .await;
    if twice > 0 {
        let runs: Vec<(u64, u32, String, Option<String>, String)> = sqlx::query_as(
            "SELECT r.job_id, r.attempt, CAST(r.at AS CHAR), r.claim_token, \
             CONCAT_WS(' ', j.attempts, j.locked_by, CAST(j.created_at AS CHAR), CAST(j.finished_at AS CHAR)) \
             FROM test_runs r JOIN job_queue j ON j.id = r.job_id WHERE r.job_id IN \
             (SELECT job_id FROM test_runs GROUP BY job_id HAVING COUNT(*) > 1) ORDER BY r.job_id, r.at LIMIT 40",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap();
        for r in &runs {
            println!("  ran twice: {r:?}");
        }
        println!(
            "  {writers:?} writers: {twice} jobs ran twice; drain took {took:.1?}, {conflicts} \
             conflicts, {completions} completions counted for {n} jobs"
        );
    }
    if writers == Writers::One {
        assert_eq!(twice, 0, "no job ran twice");
        assert_eq!(completions, n as u64, "each completion counted once");
    }
    let by_worker: Vec<(String, i64)> = sqlx::query_as(
        "SELECT locked_by, COUNT(*) FROM job_queue WHERE status = 'completed' GROUP BY locked_by",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    println!(
        "  jobs completed per worker: {by_worker:?}; {}",
        claims.join("; ")
    );
    // Claimers on several Galera nodes race for the head of the queue; a redo that raced for
    // the same rows again let one worker do 8 of 1,500 jobs (0.5 %). On a loaded machine the
    // node that falls behind loses more races than the others whatever the claims do (before
    // a claim loop skipped further for each race lost in a row: 22 and 38 of 1,500).
    assert!(
        by_worker.len() == pools.len()
            && by_worker
                .iter()
                .all(|(_, done)| usize::try_from(*done).unwrap() >= n / 50),
        "every worker did at least 2 % of the jobs (none starved): {by_worker:?}"
    );
    sqlx::query("DELETE FROM job_queue")
        .execute(&db.pool)
        .await
        .unwrap();
    (conflicts, took, twice)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_writer_claims_without_the_conflicts_of_three() {
    let _one = ONE_CLUSTER.lock().await;
    let mut cluster = start_cluster().await;
    let db = TestDb::on(&cluster.node_url(0)).await;
    let n = 1_500 * scale();

    let mut each_node = Vec::new();
    for i in 0..3 {
        each_node.push(pool_on(&on_db(&cluster.node_url(i), &db), 17).await);
    }
    let (multi, multi_took, multi_twice) = drain_with(&db, &each_node, n, Writers::Several).await;
    println!(
        "three writers (one worker per node): {multi} lock conflicts per {n} jobs, drained in \
         {multi_took:.1?}; {multi_twice} jobs ran twice"
    );

    let shared = on_db(&cluster.url(), &db);
    let mut one_node = Vec::new();
    for _ in 0..3 {
        one_node.push(pool_on(&shared, 17).await);
    }
    for p in &one_node {
        assert_eq!(
            mysqlq::cluster::status(p).unwrap().writer,
            cluster.host(0),
            "every worker given the node list writes to the first node"
        );
    }
    let (single, single_took, _) = drain_with(&db, &one_node, n, Writers::One).await;
    println!(
        "one writer (three workers, one multi-host URL): {single} lock conflicts per {n} jobs, drained in {single_took:.1?}"
    );
    for p in each_node.iter().chain(&one_node) {
        p.close().await;
    }

    doctor_sees_each_nodes_state(&cluster, &db, multi).await;
    stats_count_a_job_another_node_committed_a_moment_ago(&cluster, &db).await;
    sql_enqueue_on_every_node(&cluster, &db).await;
    bulk_ids_stay_right_when_a_node_leaves_mid_call(&mut cluster, &db).await;
}

/// The doctor's Galera checks, on a healthy node, on a desynced (donor-like) node, and on a
/// node that refuses queries.
async fn doctor_sees_each_nodes_state(cluster: &GaleraCluster, db: &TestDb, conflicts: u64) {
    let level = |checks: &[mysqlq::admin::Check], name: &str| {
        checks
            .iter()
            .find(|c| c.name == name)
            .map(|c| (c.level, c.detail.clone()))
            .unwrap_or_else(|| panic!("no `{name}` check in {checks:#?}"))
    };
    let mut warned_writers = false;
    for i in 0..3 {
        let pool = pool_on(&on_db(&cluster.node_url(i), db), 2).await;
        let checks = mysqlq::admin::Admin::new(pool.clone())
            .doctor(&["test".to_owned()])
            .await
            .unwrap();
        use mysqlq::admin::Level;
        assert_eq!(level(&checks, "galera node").0, Level::Ok, "{checks:#?}");
        assert!(level(&checks, "galera cluster").1.contains("3 nodes"));
        assert_eq!(level(&checks, "galera binlog").0, Level::Ok);
        assert_eq!(level(&checks, "galera autoinc").0, Level::Ok);
        assert!(
            level(&checks, "galera ids")
                .1
                .contains("auto_increment_increment=3")
        );
        assert_eq!(
            level(&checks, "schema").0,
            Level::Ok,
            "the other checks ran too"
        );
        assert!(
            !checks.iter().any(|c| c.name == "binlog"),
            "no 'binlog_format does not matter' on Galera: {checks:#?}"
        );
        warned_writers |= level(&checks, "galera writers").0 == Level::Warn;
        pool.close().await;
    }
    assert!(
        conflicts == 0 || warned_writers,
        "after claims through three writers ({conflicts} conflicts), a node's doctor warns"
    );

    // A desynced node (what a state-transfer donor is) is reported, and skipped by a pool.
    cluster
        .sql(2, "SET GLOBAL wsrep_desync = ON", Duration::from_secs(30))
        .unwrap();
    let node2 = MySqlPoolOptions::new()
        .max_connections(2)
        .connect(&on_db(&cluster.node_url(2), db))
        .await
        .unwrap();
    let checks = mysqlq::admin::Admin::new(node2.clone())
        .doctor(&[])
        .await
        .unwrap();
    let (lvl, detail) = level(&checks, "galera node");
    assert!(
        lvl == mysqlq::admin::Level::Fail && detail.contains("Donor/Desynced"),
        "{detail}"
    );
    let skipping = pool_on(
        &format!(
            "mysql://root@{},{}/{}",
            cluster.host(2),
            cluster.host(0),
            db.name
        ),
        2,
    )
    .await;
    assert_eq!(
        mysqlq::cluster::status(&skipping).unwrap().writer,
        cluster.host(0),
        "a multi-host pool skips the desynced node"
    );
    skipping.close().await;
    cluster
        .sql(2, "SET GLOBAL wsrep_desync = OFF", Duration::from_secs(30))
        .unwrap();

    // A node fenced with wsrep_reject_queries: the doctor says so instead of failing to read.
    cluster
        .sql(
            2,
            "CREATE USER IF NOT EXISTS app IDENTIFIED BY 'app'; GRANT ALL ON *.* TO app; \
             REVOKE SUPER ON *.* FROM app; SET GLOBAL wsrep_reject_queries = ALL",
            Duration::from_secs(30),
        )
        .unwrap();
    let app = MySqlPoolOptions::new()
        .max_connections(1)
        .connect(&format!("mysql://app:app@{}/{}", cluster.host(2), db.name))
        .await;
    match app {
        Ok(app) => {
            let checks = mysqlq::admin::Admin::new(app.clone())
                .doctor(&[])
                .await
                .expect("a fenced node gives checks, not an error");
            let (lvl, detail) = level(&checks, "galera node");
            assert_eq!(lvl, mysqlq::admin::Level::Fail, "{detail}");
            // What the worker sees on such a node: 1047, which it retries (transient).
            let refused = mysqlq::Error::from(
                sqlx::query("SELECT COUNT(*) FROM job_queue")
                    .execute(&app)
                    .await
                    .expect_err("a fenced node refuses queries"),
            );
            assert!(
                refused.server_code() == Some(1047) && refused.is_transient(),
                "{refused}"
            );
            app.close().await;
        }
        Err(e) => panic!("connect as app to the fenced node: {e}"),
    }
    cluster
        .sql(
            2,
            "SET GLOBAL wsrep_reject_queries = NONE",
            Duration::from_secs(30),
        )
        .unwrap();
    node2.close().await;
}

/// `stats` on a node that has not applied another node's latest commit yet (its applier held
/// back by a read lock) waits for it (`wsrep_sync_wait`) instead of counting without it.
/// `CALL mysqlq_enqueue` (migration 11, replicated as DDL) on every node: one dedupe key,
/// taken once across the cluster; the other nodes answer the holder's id (with
/// `wsrep_sync_wait`, so each reads what the others committed), and every node has the row.
async fn sql_enqueue_on_every_node(cluster: &GaleraCluster, db: &TestDb) {
    let mut answers = Vec::new();
    for i in 0..3 {
        let mut conn: sqlx::MySqlConnection =
            <sqlx::MySqlConnection as sqlx::Connection>::connect(&on_db(&cluster.node_url(i), db))
                .await
                .unwrap();
        sqlx::query("SET SESSION wsrep_sync_wait = 3")
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::query(
            r#"CALL mysqlq_enqueue('noop', JSON_OBJECT('n', ?), '{"queue": "test", "dedupe_key": "galera-sql"}')"#,
        )
        .bind(i as u64)
        .execute(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("CALL mysqlq_enqueue on node {i}: {e}"));
        let answer: (u64, String) =
            sqlx::query_as("SELECT @mysqlq_job_id, CAST(@mysqlq_enqueued AS CHAR)")
                .fetch_one(&mut conn)
                .await
                .unwrap();
        answers.push(answer);
    }
    let holder = answers[0].0;
    assert_eq!(
        answers,
        [
            (holder, "inserted".to_owned()),
            (holder, "duplicate".to_owned()),
            (holder, "duplicate".to_owned())
        ]
    );
    for i in 0..3 {
        let pool = pool_on(&on_db(&cluster.node_url(i), db), 1).await;
        wait_count(
            &pool,
            "the SQL-enqueued job on every node",
            &format!(
                "SELECT COUNT(*) FROM job_queue WHERE id = {holder} AND dedupe_key = 'galera-sql'"
            ),
            1,
            Duration::from_secs(30),
        )
        .await;
        pool.close().await;
    }
    sqlx::query("DELETE FROM job_queue")
        .execute(&db.pool)
        .await
        .unwrap();
}

async fn stats_count_a_job_another_node_committed_a_moment_ago(
    cluster: &GaleraCluster,
    db: &TestDb,
) {
    let node0 = pool_on(&on_db(&cluster.node_url(0), db), 2).await;
    let node2 = pool_on(&on_db(&cluster.node_url(2), db), 2).await;
    sqlx::query("DELETE FROM job_queue")
        .execute(&node0)
        .await
        .unwrap();
    // Node 2 stops applying (its applier waits behind the read lock); desynced, so that flow
    // control does not stop node 0's commits meanwhile.
    let mut lock: sqlx::MySqlConnection =
        <sqlx::MySqlConnection as sqlx::Connection>::connect(&on_db(&cluster.node_url(2), db))
            .await
            .unwrap();
    for stmt in [
        "SET GLOBAL wsrep_desync = ON",
        "FLUSH TABLES WITH READ LOCK",
    ] {
        sqlx::query(stmt).execute(&mut lock).await.unwrap();
    }
    Noop { n: 1 }.enqueue(&node0).await.unwrap();
    let admin = mysqlq::admin::Admin::new(node2.clone());
    let stats = tokio::spawn(async move { admin.stats(Duration::from_secs(60)).await });
    // Either the stats read waits for node 2 to catch up (its statement stays in node 2's
    // process list), or it answers at once — without the job.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = 0;
    let waited = loop {
        if stats.is_finished() {
            break false;
        }
        let waiting: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM information_schema.processlist \
             WHERE info LIKE '%mysqlq:stats_queues%' AND id <> CONNECTION_ID()",
        )
        .fetch_one(&mut lock)
        .await
        .unwrap();
        seen = if waiting > 0 { seen + 1 } else { 0 };
        if seen >= 3 {
            break true;
        }
        assert!(Instant::now() < deadline, "neither answered nor waited");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for stmt in ["UNLOCK TABLES", "SET GLOBAL wsrep_desync = OFF"] {
        sqlx::query(stmt).execute(&mut lock).await.unwrap();
    }
    let stats = tokio::time::timeout(Duration::from_secs(60), stats)
        .await
        .expect("stats answered once node 2 caught up")
        .unwrap()
        .unwrap();
    let ready: u64 = stats.queues.iter().map(|q| q.ready).sum();
    assert_eq!(
        ready, 1,
        "stats on node 2 counted the job node 0 committed (waited for it: {waited})"
    );
    assert!(
        waited,
        "the stats read waited for node 2 to apply node 0's commit"
    );
    sqlx::query("DELETE FROM job_queue")
        .execute(&node0)
        .await
        .unwrap();
    node0.close().await;
    node2.close().await;
}

/// `enqueue_many` returns the ids of the rows it inserted even when a node leaves during the
/// call, which changes `auto_increment_increment` (the cluster's size) in the open session.
async fn bulk_ids_stay_right_when_a_node_leaves_mid_call(cluster: &mut GaleraCluster, db: &TestDb) {
    let node0 = pool_on(&on_db(&cluster.node_url(0), db), 4).await;
    let step = |pool: MySqlPool| async move {
        scalar_on(
            &pool,
            "SELECT CAST(@@global.auto_increment_increment AS SIGNED)",
        )
        .await
    };
    assert_eq!(step(node0.clone()).await, 3);
    // Big enough that stopping a node (which returns once the node is down) ends before the
    // call does: 40,000 rows once finished first under load.
    let n = 100_000 * scale();
    let jobs = noops(n);
    let bulk = {
        let pool = node0.clone();
        tokio::spawn(async move {
            let ids = mysqlq::enqueue_many(&pool, jobs).await;
            (ids, Instant::now())
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let inserting = scalar_on(
            &node0,
            "SELECT COUNT(*) FROM information_schema.processlist \
             WHERE info LIKE '/* mysqlq:job_insert_many */ INSERT%'",
        )
        .await;
        if inserting > 0 {
            break;
        }
        assert!(
            !bulk.is_finished(),
            "the bulk enqueue ended before it was seen under way"
        );
        assert!(
            Instant::now() < deadline,
            "the bulk insert was not seen under way"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // (blocking, on this runtime thread: the insert goes on on the other)
    let left = tokio::task::block_in_place(|| {
        cluster.stop(2);
        Instant::now()
    });
    let (ids, ended) = bulk.await.unwrap();
    let ids = ids.expect("the bulk enqueue succeeded");
    assert!(
        ended > left,
        "the node left while the bulk enqueue ran (make it bigger if this fails)"
    );
    assert_eq!(
        step(node0.clone()).await,
        2,
        "two nodes now: the step changed"
    );
    let rows: Vec<(u64, i64)> = sqlx::query_as(
        "SELECT id, CAST(JSON_EXTRACT(payload, '$.n') AS SIGNED) FROM job_queue ORDER BY id",
    )
    .fetch_all(&node0)
    .await
    .unwrap();
    assert_eq!(rows.len(), n);
    let by_id: std::collections::HashMap<u64, i64> = rows.into_iter().collect();
    for (i, e) in ids.iter().enumerate() {
        assert_eq!(
            by_id.get(&e.id().0),
            Some(&i64::try_from(i).unwrap()),
            "job {i} got the id of its own row"
        );
    }
    node0.close().await;
}

const BIN: &str = env!("CARGO_BIN_EXE_mysqlq-test-worker");

/// A worker process on every node of `url` (the multi-host URL). The lease is long enough for
/// the commit stall of a node loss (about 6 s) with heartbeats every 500 ms, so that no job's
/// lease may end during it: any "lease lost" would be false.
fn galera_worker(url: &str, db: &TestDb, id: &str) -> Proc {
    Proc::spawn(
        BIN,
        url,
        &format!("{}-{id}", db.name),
        id,
        &[
            "--queues",
            "test",
            "--concurrency",
            "8",
            "--lease",
            "12s",
            "--heartbeat",
            "500ms",
            "--maintenance-interval",
            "500ms",
            "--leader-ttl",
            "2s",
            "--poll-ceiling",
            "100ms",
        ],
    )
}

/// Commits a one-row UPDATE on `pool` every 20 ms until `stop`, returning the longest commit.
fn commit_probe(pool: MySqlPool, stop: tokio_util_like::Stop) -> tokio::task::JoinHandle<Duration> {
    tokio::spawn(async move {
        let mut longest = Duration::ZERO;
        while !stop.is_set() {
            let began = Instant::now();
            let _ = sqlx::query("UPDATE commit_probe SET n = n + 1 WHERE id = 1")
                .execute(&pool)
                .await;
            longest = longest.max(began.elapsed());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        longest
    })
}

mod tokio_util_like {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A flag set once.
    #[derive(Clone, Default)]
    pub(super) struct Stop(Arc<AtomicBool>);

    impl Stop {
        pub(super) fn set(&self) {
            self.0.store(true, Ordering::SeqCst);
        }
        pub(super) fn is_set(&self) -> bool {
            self.0.load(Ordering::SeqCst)
        }
    }
}

/// Sums `wsrep_local_commits` (transactions a node committed for its own clients) per node.
fn local_commits(cluster: &GaleraCluster) -> Vec<u64> {
    (0..cluster.len())
        .map(|i| {
            cluster
                .status(i, "wsrep_local_commits")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        })
        .collect()
}

/// Every job id a worker's log reports in a "lease lost" line.
fn lease_lost_ids(log: &str) -> Vec<u64> {
    log.lines()
        .filter(|l| l.contains("lease lost"))
        .flat_map(|l| {
            let list = l
                .split_once("jobs=[")
                .and_then(|(_, rest)| rest.split_once(']'))
                .map_or("", |(ids, _)| ids);
            list.split(',')
                .filter_map(|id| id.trim().parse().ok())
                .collect::<Vec<u64>>()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_processes_ride_out_a_node_loss_a_rejoin_and_a_dead_leader() {
    let _one = ONE_CLUSTER.lock().await;
    let mut cluster = start_cluster().await;
    let db = TestDb::on(&cluster.node_url(0)).await;
    invariants::install(&db).await;
    for sql in [
        "CREATE TABLE commit_probe (id INT PRIMARY KEY, n BIGINT NOT NULL)",
        "INSERT INTO commit_probe VALUES (1, 0)",
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&db.pool)
            .await
            .unwrap();
    }
    let url = on_db(&cluster.url(), &db);
    // The test's own pool follows the writer too (node 0 dies below).
    let app = pool_on(&url, 8).await;
    let n = 2_000 * scale();
    let sleepy: Vec<NewJob> = (0..n)
        .map(|_| NewJob::from_job(&Sleepy { ms: 150 }, &EnqueueOptions::new()).unwrap())
        .collect();
    mysqlq::enqueue_many(&app, sleepy).await.unwrap();
    let orders_n = 300 * scale() as u64;
    let orders = tokio::spawn(place_orders(app.clone(), 1, orders_n));
    let mut procs: Vec<Proc> = (0..3)
        .map(|i| galera_worker(&url, &db, &format!("g{i}")))
        .collect();
    let completed = "SELECT COUNT(*) FROM job_queue WHERE status = 'completed'";
    wait_count(
        &app,
        "the first completions",
        completed,
        200,
        Duration::from_secs(120),
    )
    .await;

    // 1. The writer (node 0) dies. The survivors' commits stall until they declare it dead.
    let probe_pool = pool_on(&on_db(&cluster.node_url(1), &db), 1).await;
    let stop = tokio_util_like::Stop::default();
    let probe = commit_probe(probe_pool.clone(), stop.clone());
    tokio::time::sleep(Duration::from_millis(200)).await; // a few probe commits before
    let before = scalar_on(&app, completed).await;
    let kill_instant = Instant::now();
    tokio::task::block_in_place(|| cluster.kill(0));
    wait_count(
        &app,
        "completions after node 0 died",
        &format!(
            "SELECT COUNT(*) >= {} FROM job_queue WHERE status = 'completed'",
            before + 100
        ),
        1,
        Duration::from_secs(120),
    )
    .await;
    let resumed = kill_instant.elapsed();
    stop.set();
    let stall = probe.await.unwrap();
    probe_pool.close().await;
    println!(
        "node 0 (the writer) SIGKILLed: the longest commit on node 1 took {stall:.1?}; 100 more \
         jobs were completed {resumed:.1?} after the kill (on node 1)"
    );

    // 2. Node 0 rejoins; the workers go back to it once it has been Synced for a while.
    let rejoin = tokio::task::block_in_place(|| cluster.rejoin(0));
    println!("node 0 rejoined (state transfer, Synced) in {rejoin:.1?}");
    // Work keeps coming while the workers go back to node 0.
    let feeding = tokio_util_like::Stop::default();
    let feeder = {
        let (app, feeding) = (app.clone(), feeding.clone());
        tokio::spawn(async move {
            while !feeding.is_set() {
                let batch: Vec<NewJob> = (0..10)
                    .map(|_| NewJob::from_job(&Sleepy { ms: 300 }, &EnqueueOptions::new()).unwrap())
                    .collect();
                let _ = mysqlq::enqueue_many(&app, batch).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let synced = Instant::now();
    let deadline = synced + Duration::from_secs(90);
    let mut last = local_commits(&cluster);
    let back = loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = local_commits(&cluster);
        let delta: Vec<u64> = now.iter().zip(&last).map(|(a, b)| a - b).collect();
        last = now;
        if delta[0] >= 10 && delta[1] == 0 && delta[2] == 0 {
            break synced.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "every write should go to node 0 again (commits per node over the last second: {delta:?})"
        );
    };
    println!(
        "{back:.1?} after node 0 was Synced, every commit of the workers went to it again \
         (failback after {:?})",
        ClusterUrl::DEFAULT_FAILBACK_AFTER
    );

    // 3. The leader worker dies holding jobs; the others' reapers bring them back.
    let leader: String = sqlx::query_scalar(
        "SELECT leader_id FROM mysqlq_leader WHERE name = 'maintenance' AND expires_at > UTC_TIMESTAMP(6)",
    )
    .fetch_one(&app)
    .await
    .expect("a leader");
    let dead = leader.split('#').next().unwrap().to_owned();
    let victim = procs
        .iter()
        .position(|p| p.id == dead)
        .expect("the leader is one of ours");
    let holding = format!(
        "SELECT COUNT(*) FROM job_queue WHERE status = 'processing' AND locked_by = '{dead}'"
    );
    wait_count(
        &app,
        "the leader holding jobs",
        &holding,
        1,
        Duration::from_secs(60),
    )
    .await;
    procs[victim].kill();
    feeding.set();
    feeder.await.unwrap();
    let orphans: Vec<u64> = sqlx::query_scalar(
        "SELECT id FROM job_queue WHERE status = 'processing' AND locked_by = ?",
    )
    .bind(&dead)
    .fetch_all(&app)
    .await
    .unwrap();
    assert!(!orphans.is_empty(), "the leader died holding jobs");
    // Their leases as the dead worker left them (the reaper clears them).
    let mut expiries = Vec::new();
    for id in &orphans {
        let at: String =
            sqlx::query_scalar("SELECT CAST(lease_expires_at AS CHAR) FROM job_queue WHERE id = ?")
                .bind(id)
                .fetch_one(&app)
                .await
                .unwrap();
        expiries.push(at);
    }
    procs.push(galera_worker(&url, &db, "g3"));
    wait_count(
        &app,
        "the orphans back",
        &format!("SELECT COUNT(*) = 0 FROM job_queue WHERE status = 'processing' AND locked_by = '{dead}'"),
        1,
        Duration::from_secs(120),
    )
    .await;
    let mut worst = 0.0f64;
    for (id, expired) in orphans.iter().zip(&expiries) {
        let late: Option<f64> = sqlx::query_scalar(
            "SELECT TIMESTAMPDIFF(MICROSECOND, CAST(? AS DATETIME(6)), MIN(finished_at)) / 1e6 \
             FROM mysqlq_job_attempt WHERE job_id = ? AND worker = ? AND started_at IS NULL",
        )
        .bind(expired)
        .bind(id)
        .bind(&dead)
        .fetch_one(&app)
        .await
        .unwrap();
        let late = late.unwrap_or_else(|| panic!("orphan {id} was brought back by a reaper"));
        worst = worst.max(late);
        // lease + one maintenance interval (500 ms) is the bound; scheduling on two shared
        // cores gets a few seconds on top.
        assert!(
            late <= 5.0,
            "orphan {id}: reaped {late:.1} s after its lease ended (bound: one 500 ms interval)"
        );
    }
    println!(
        "the leader (worker {dead}) SIGKILLed holding {} jobs: each was back at most {worst:.2} s \
         after its lease ended (the reaper runs on every worker)",
        orphans.len()
    );

    // 4. Everything ends, and the invariants hold.
    tokio::time::timeout(Duration::from_secs(300), orders)
        .await
        .expect("the orders were placed")
        .unwrap();
    invariants::wait_final(&app, Duration::from_secs(300)).await;
    for p in &mut procs {
        if p.child.try_wait().unwrap().is_none() {
            assert!(
                p.terminate(Duration::from_secs(60)).success(),
                "{} exited cleanly",
                p.id
            );
        }
    }
    invariants::check(&app, 0).await;
    assert_eq!(
        scalar_on(&app, "SELECT COUNT(*) FROM orders").await,
        i64::try_from(orders_n).unwrap(),
        "every order was placed, through the node loss"
    );
    for p in &procs {
        let log = p.log_text();
        assert!(!log.contains("panicked"), "{}:\n{log}", p.id);
        for id in lease_lost_ids(&log) {
            let taken_over = scalar_on(
                &app,
                &format!(
                    "SELECT (SELECT COUNT(DISTINCT claim_token) FROM test_runs WHERE job_id = {id}) > 1 \
                     OR EXISTS (SELECT 1 FROM mysqlq_job_attempt WHERE job_id = {id} AND started_at IS NULL)"
                ),
            )
            .await;
            assert_eq!(
                taken_over, 1,
                "{} said it lost job {id}'s lease, but no other claim took it",
                p.id
            );
        }
    }
    app.close().await;
}

/// A key's rate limit holds across a writer loss: three worker processes on the multi-host URL
/// drain a 5/500ms key while the writer is SIGKILLed mid-run; the survivors decide from the logs
/// the lost writer committed, and no window of 500 ms holds more than 5 handler starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_hold_across_a_writer_loss() {
    let _one = ONE_CLUSTER.lock().await;
    let mut cluster = start_cluster().await;
    let db = TestDb::on(&cluster.node_url(0)).await;
    let url = on_db(&cluster.url(), &db);
    let app = pool_on(&url, 4).await;
    let n = 60;
    let rate: mysqlq::Rate = "5/500ms".parse().unwrap();
    let jobs: Vec<NewJob> = (0..n)
        .map(|_| {
            let opts = EnqueueOptions::new().rate_limit("g", rate);
            NewJob::from_job(&mysqlq_tests::jobs::Rated { tag: "g".into() }, &opts).unwrap()
        })
        .collect();
    mysqlq::enqueue_many(&app, jobs).await.unwrap();
    let mut procs: Vec<Proc> = (0..3)
        .map(|i| {
            Proc::spawn(
                BIN,
                &url,
                &format!("{}-r{i}", db.name),
                &format!("r{i}"),
                &[
                    "--queues",
                    "rated",
                    "--concurrency",
                    "8",
                    "--lease",
                    "12s",
                    "--heartbeat",
                    "500ms",
                    "--poll-ceiling",
                    "100ms",
                ],
            )
        })
        .collect();
    let started = "SELECT COUNT(DISTINCT job_id) FROM test_runs WHERE event = 'start'";
    wait_count(
        &app,
        "the first starts",
        started,
        15,
        Duration::from_secs(60),
    )
    .await;
    tokio::task::block_in_place(|| cluster.kill(0));
    wait_count(
        &app,
        "every job started",
        started,
        n,
        Duration::from_secs(120),
    )
    .await;
    for p in &mut procs {
        p.terminate(Duration::from_secs(20));
    }
    let starts: Vec<i64> = sqlx::query_scalar(
        "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', at) FROM test_runs \
         WHERE event = 'start' ORDER BY at",
    )
    .fetch_all(&app)
    .await
    .unwrap();
    let p = i64::try_from(rate.period().as_micros()).unwrap();
    let count = rate.count() as usize;
    let over = (0..starts.len().saturating_sub(count)).find(|&i| starts[i + count] - starts[i] < p);
    println!(
        "rate limit across a writer loss: {} starts of {n} jobs, first window over the limit: {over:?}",
        starts.len()
    );
    assert_eq!(
        over, None,
        "6 starts of a 5/500ms key within 500 ms across the writer loss"
    );
}
