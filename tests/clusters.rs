//! More than one database host: multi-host URLs, Galera clusters and primary → replica
//! failover, each on private servers started by the test (never the shared one).

use std::time::{Duration, Instant};

use mysqlq::ClusterUrl;
use mysqlq_tests::invariants;
use mysqlq_tests::{PrivateServer, Proc, ReplicaPair, Replication, TestDb, client, scalar_on};
use sqlx::MySqlPool;
use sqlx::mysql::MySqlPoolOptions;

/// `SELECT @@port` through `pool`: which server answered.
async fn port_of(pool: &MySqlPool) -> u16 {
    sqlx::query_scalar::<_, u32>("SELECT @@port")
        .fetch_one(pool)
        .await
        .map(|p| u16::try_from(p).unwrap())
        .expect("ask the server its port")
}

/// Waits (at most `limit`) until `pool`'s writer is `host`.
async fn wait_writer(pool: &MySqlPool, host: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let status = mysqlq::cluster::status(pool).expect("a multi-host pool");
        if status.writer == host && status.writer_confirmed {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the pool did not move to {host} within {limit:?}: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn sql(server: &PrivateServer, stmt: &str) {
    client::sql(server.port(), stmt, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{stmt}: {e}"));
}

/// A read-only server, a writable one, each with an empty database `app`, and a port nothing
/// listens on; and the URL listing the three: nothing, read-only, writable.
async fn three_hosts() -> (PrivateServer, PrivateServer, u16, String) {
    let (read_only, writable) = tokio::task::spawn_blocking(|| {
        (
            PrivateServer::start_with(&["--read-only=ON"]),
            PrivateServer::start(),
        )
    })
    .await
    .unwrap();
    for s in [&read_only, &writable] {
        sql(s, "CREATE DATABASE app");
    }
    let nothing = mysqlq_tests::host::free_port();
    let url = format!(
        "mysql://root@127.0.0.1:{nothing},127.0.0.1:{},127.0.0.1:{}/app",
        read_only.port(),
        writable.port()
    );
    (read_only, writable, nothing, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_host_pool_uses_the_first_writable_host_and_moves_on() {
    let (a, b, _, url) = three_hosts().await;
    let url = ClusterUrl::parse(&url)
        .unwrap()
        .check_interval(Duration::from_millis(50));
    assert_eq!(url.hosts().len(), 3);
    let pool = url
        .connect(MySqlPoolOptions::new().max_connections(4))
        .await
        .expect("b takes writes");
    let b_host = format!("127.0.0.1:{}", b.port());
    let a_host = format!("127.0.0.1:{}", a.port());
    wait_writer(&pool, &b_host, Duration::from_secs(10)).await;
    assert_eq!(
        port_of(&pool).await,
        b.port(),
        "skipped the dead host and the read-only one"
    );
    let status = mysqlq::cluster::status(&pool).unwrap();
    assert!(
        status.hosts[0].1.is_some() && status.hosts[1].1.as_deref() == Some("read_only ON"),
        "each unfit host says why: {status:?}"
    );

    // Four connections held open on b, then b stops taking writes and a starts.
    let held: Vec<_> = {
        let mut v = Vec::new();
        for _ in 0..4 {
            v.push(pool.acquire().await.unwrap());
        }
        v
    };
    drop(held);
    sql(&a, "SET GLOBAL read_only = OFF");
    sql(&b, "SET GLOBAL read_only = ON");
    wait_writer(&pool, &a_host, Duration::from_secs(10)).await;
    for _ in 0..8 {
        assert_eq!(
            port_of(&pool).await,
            a.port(),
            "connections opened on b before the switch are retired, new ones go to a"
        );
    }

    // a dies: b (writable again) takes over.
    sql(&b, "SET GLOBAL read_only = OFF");
    drop(a);
    wait_writer(&pool, &b_host, Duration::from_secs(10)).await;
    assert_eq!(port_of(&pool).await, b.port());
    assert!(mysqlq::cluster::status(&pool).unwrap().switches >= 2);
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_host_url_with_no_writer_names_every_host_and_its_problem() {
    let a = tokio::task::spawn_blocking(|| PrivateServer::start_with(&["--read-only=ON"]))
        .await
        .unwrap();
    sql(
        &a,
        "CREATE USER app IDENTIFIED BY 'pw-x9'; GRANT ALL ON *.* TO app",
    );
    let nothing = mysqlq_tests::host::free_port();
    let url = format!(
        "mysql://app:pw-x9@127.0.0.1:{nothing},127.0.0.1:{}",
        a.port()
    );
    let err = ClusterUrl::parse(&url)
        .unwrap()
        .connect(MySqlPoolOptions::new())
        .await
        .expect_err("no host takes writes");
    assert!(err.is_transient(), "a failover may be under way: {err}");
    let text = err.to_string();
    assert!(
        text.contains(&format!("127.0.0.1:{nothing} (Connection refused"))
            && text.contains(&format!("127.0.0.1:{} (read_only ON)", a.port()))
            && !text.contains("pw-x9"),
        "{text}"
    );
}

const BIN: &str = env!("CARGO_BIN_EXE_mysqlq-test-worker");

fn scale() -> u64 {
    mysqlq_tests::scale("MYSQLQ_CLUSTER_SCALE") as u64
}

/// Places orders `0, 1, 2, …` (each with its job, in one transaction) through `pool` from
/// `tasks` tasks until `stop`, retrying a failed one (a duplicate order number means that
/// commit did land). Returns the orders whose COMMIT the server acknowledged, with when.
async fn place_orders_until(
    pool: MySqlPool,
    tasks: u64,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Vec<(u64, Instant)> {
    use std::sync::atomic::Ordering;
    let mut handles = Vec::new();
    for t in 0..tasks {
        let (pool, stop) = (pool.clone(), stop.clone());
        handles.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut order_no = t;
            while !stop.load(Ordering::SeqCst) {
                let attempt = invariants::place_order(&pool, order_no).await;
                match attempt {
                    Ok(()) => {
                        acked.push((order_no, Instant::now()));
                        order_no += tasks;
                    }
                    Err(e) if invariants::already_placed(&e) => order_no += tasks,
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
            acked
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    all
}

/// How long the replica stops fetching before the primary dies.
const LAG: Duration = Duration::from_millis(500);

/// Workers (real processes) given both hosts keep going when the primary is killed and the
/// replica promoted. With asynchronous replication, orders the old primary acknowledged but
/// had not yet sent are lost (measured and printed: the loss window); with semi-synchronous
/// replication, none is.
async fn primary_failover(mode: Replication) {
    let mut pair = tokio::task::spawn_blocking(move || ReplicaPair::start(mode))
        .await
        .unwrap();
    let db = TestDb::on(&pair.primary.url()).await;
    invariants::install(&db).await;
    pair.wait_caught_up().unwrap();
    let url = format!("{}/{}", pair.url(), db.name);
    let app = ClusterUrl::parse(&url)
        .unwrap()
        .connect(MySqlPoolOptions::new().max_connections(8))
        .await
        .unwrap();
    let mut procs: Vec<Proc> = (0..2)
        .map(|i| {
            let mut args = mysqlq_tests::FAST_TIMINGS.to_vec();
            args.extend(["--queues", "test", "--concurrency", "8"]);
            Proc::spawn(
                BIN,
                &url,
                &format!("{}-r{i}", db.name),
                &format!("r{i}"),
                &args,
            )
        })
        .collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let orders = tokio::spawn(place_orders_until(app.clone(), 4, stop.clone()));
    let completed = format!(
        "SELECT COUNT(*) >= {} FROM job_queue WHERE status = 'completed'",
        300 * scale()
    );
    wait_for(&app, "work under way", &completed, Duration::from_secs(120)).await;

    // The replica falls behind (it stops fetching for LAG), then the primary dies and the
    // replica is promoted. Asynchronously, the primary went on acknowledging commits the
    // replica never got; semi-synchronously, those commits wait for the replica.
    client::sql(
        pair.replica.port(),
        "STOP SLAVE IO_THREAD",
        Duration::from_secs(30),
    )
    .unwrap();
    tokio::time::sleep(LAG).await;
    let killed = Instant::now();
    tokio::task::block_in_place(|| pair.primary.kill());
    pair.promote_replica().unwrap();
    let promoted = killed.elapsed();
    let replica = format!("127.0.0.1:{}", pair.replica.port());
    wait_writer(&app, &replica, Duration::from_secs(30)).await;
    // New orders land on the new primary and their jobs run there.
    let before = scalar_on(
        &app,
        "SELECT CAST(COALESCE(MAX(order_no), 0) AS SIGNED) FROM orders",
    )
    .await;
    wait_for(
        &app,
        "orders placed and run on the new primary",
        &format!(
            "SELECT COUNT(*) >= {} FROM orders o JOIN job_queue j ON j.id = o.job_id \
             WHERE j.status = 'completed' AND o.order_no > {before}",
            100 * scale()
        ),
        Duration::from_secs(120),
    )
    .await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let acked = orders.await.unwrap();
    let present: std::collections::HashSet<u64> =
        sqlx::query_scalar::<_, u64>("SELECT order_no FROM orders")
            .fetch_all(&app)
            .await
            .unwrap()
            .into_iter()
            .collect();
    let lost: Vec<&(u64, Instant)> = acked.iter().filter(|(n, _)| !present.contains(n)).collect();
    let window = lost
        .iter()
        .map(|(_, at)| killed.saturating_duration_since(*at))
        .max()
        .unwrap_or_default();
    println!(
        "{mode:?} replication, replica {LAG:?} behind: primary killed and replica promoted in \
         {promoted:.1?}; {} of {} acknowledged orders (each with its job) were lost, the oldest \
         acknowledged {window:.0?} before the kill",
        lost.len(),
        acked.len()
    );
    if mode == Replication::SemiSync {
        assert!(
            lost.is_empty(),
            "semi-synchronous replication loses no acknowledged commit: {lost:?}"
        );
    }
    invariants::wait_final(&app, Duration::from_secs(120)).await;
    for p in &mut procs {
        assert!(
            p.terminate(Duration::from_secs(30)).success(),
            "{} exited cleanly",
            p.id
        );
        assert!(!p.log_text().contains("panicked"), "{}", p.log_text());
    }
    invariants::check(&app, 0).await;
    app.close().await;
}

/// Waits until `sql` (a truth value) holds on `pool`, at most `limit`; errors (a failover) are
/// waited out.
async fn wait_for(pool: &MySqlPool, what: &str, sql: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(true) = sqlx::query_scalar::<_, bool>(sqlx::AssertSqlSafe(sql.to_owned()))
            .fetch_one(pool)
            .await
        {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asynchronous_failover_continues_on_the_replica_and_measures_the_loss_window() {
    primary_failover(Replication::Async).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semi_synchronous_failover_loses_no_acknowledged_commit() {
    primary_failover(Replication::SemiSync).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_takes_a_multi_host_database_url() {
    let (replica, primary, nothing, url) = three_hosts().await;
    let run = |args: &[&str]| {
        let out = std::process::Command::new(BIN)
            .args(args)
            .env("DATABASE_URL", &url)
            .output()
            .expect("run the CLI");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, _, err) = run(&["migrate"]);
    assert_eq!(code, Some(0), "{err}");
    let (code, out, err) = run(&["doctor"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let hosts: Vec<&str> = out.lines().filter(|l| l.contains(" host ")).collect();
    assert_eq!(hosts.len(), 3, "a line per host:\n{out}");
    assert!(
        hosts[0].starts_with("warn") && hosts[0].contains(&format!("127.0.0.1:{nothing}")),
        "{out}"
    );
    assert!(
        hosts[1].starts_with("info") && hosts[1].contains("read_only ON"),
        "{out}"
    );
    assert!(
        hosts[2].starts_with("ok") && hosts[2].contains("the writer"),
        "{out}"
    );
    // docs/clusters.md shows these three lines, with addresses of its own.
    let sample = mysqlq_tests::docs::block("docs/clusters.md", "warn  host");
    let ours: Vec<String> = hosts
        .iter()
        .map(|l| {
            l.replace(&format!(" 127.0.0.1:{nothing}:"), " 10.0.0.1:3306:")
                .replace(
                    &format!(" 127.0.0.1:{}:", replica.port()),
                    " 10.0.0.2:3306:",
                )
                .replace(
                    &format!(" 127.0.0.1:{}:", primary.port()),
                    " 10.0.0.3:3306:",
                )
        })
        .collect();
    assert_eq!(
        sample.lines,
        ours,
        "{} shows other lines than doctor prints",
        sample.place()
    );
    let (code, out, err) = run(&["stats", "--json"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("\"queues\""), "{out}");
}
