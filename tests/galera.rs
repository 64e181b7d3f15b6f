//! Galera: a private 3-node MariaDB Galera cluster (galera-4, rsync state transfers, nodes
//! running as the `mysql` user) per test, started by the test. Sizes are small by default so CI
//! stays fast; `MYSQLQ_CLUSTER_SCALE=10` multiplies the job counts. The numbers each test
//! measures are printed (`cargo test --test galera -- --nocapture`) and quoted in
//! `docs/clusters.md`.

use std::time::{Duration, Instant};

use mysqlq::{ClusterUrl, EnqueueOptions, NewJob, WorkerHandle};
use mysqlq_tests::jobs::Noop;
use mysqlq_tests::{GaleraCluster, TestDb};
use sqlx::MySqlPool;
use sqlx::mysql::MySqlPoolOptions;

/// One cluster at a time: three nodes and their workers already fill two cores.
static ONE_CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn scale() -> usize {
    std::env::var("MYSQLQ_CLUSTER_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1)
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

async fn scalar(pool: &MySqlPool, sql: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(pool)
        .await
        .unwrap_or_else(|e| panic!("`{sql}`: {e}"))
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

/// Three in-process workers, one per pool, until `n` jobs completed; returns the lock
/// conflicts they met (deadlocks and certification failures, lock wait timeouts) and how long
/// the drain took, and checks that each worker did some of the work and no job ran twice.
async fn drain_with(db: &TestDb, pools: &[MySqlPool], n: usize) -> (u64, Duration) {
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
    for w in workers {
        let c = w.metrics().counters.snapshot();
        conflicts += c.deadlocks + c.lock_waits;
        w.shutdown().await.unwrap();
    }
    let twice = scalar(
        &db.pool,
        "SELECT COUNT(*) FROM (SELECT job_id FROM test_runs GROUP BY job_id HAVING COUNT(*) > 1) t",
    )
    .await;
    assert_eq!(twice, 0, "no job ran twice");
    let by_worker: Vec<(String, i64)> = sqlx::query_as(
        "SELECT locked_by, COUNT(*) FROM job_queue WHERE status = 'completed' GROUP BY locked_by",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    println!("  jobs completed per worker: {by_worker:?}");
    // Claimers on several Galera nodes race for the head of the queue; a redo that raced for
    // the same rows again let one worker do 8 of 1,500 jobs.
    assert!(
        by_worker.len() == pools.len()
            && by_worker
                .iter()
                .all(|(_, done)| usize::try_from(*done).unwrap() >= n / 20),
        "every worker did at least 5 % of the jobs (none starved): {by_worker:?}"
    );
    sqlx::query("DELETE FROM job_queue")
        .execute(&db.pool)
        .await
        .unwrap();
    (conflicts, took)
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
    let (multi, multi_took) = drain_with(&db, &each_node, n).await;
    println!(
        "three writers (one worker per node): {multi} lock conflicts per {n} jobs, drained in {multi_took:.1?}"
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
    let (single, single_took) = drain_with(&db, &one_node, n).await;
    println!(
        "one writer (three workers, one multi-host URL): {single} lock conflicts per {n} jobs, drained in {single_took:.1?}"
    );
    for p in each_node.iter().chain(&one_node) {
        p.close().await;
    }

    doctor_sees_each_nodes_state(&cluster, &db, multi).await;
    stats_count_a_job_another_node_committed_a_moment_ago(&cluster, &db).await;
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
        scalar(
            &pool,
            "SELECT CAST(@@global.auto_increment_increment AS SIGNED)",
        )
        .await
    };
    assert_eq!(step(node0.clone()).await, 3);
    let n = 40_000 * scale();
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
        let inserting = scalar(
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
