//! More than one database host: multi-host URLs, Galera clusters and primary → replica
//! failover, each on private servers started by the test (never the shared one).

use std::time::{Duration, Instant};

use mysqlq::ClusterUrl;
use mysqlq_tests::{PrivateServer, client};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_host_pool_uses_the_first_writable_host_and_moves_on() {
    let (a, b) = tokio::task::spawn_blocking(|| {
        let a = PrivateServer::start_with(&["--read-only=ON"]);
        let b = PrivateServer::start();
        (a, b)
    })
    .await
    .unwrap();
    for s in [&a, &b] {
        sql(s, "CREATE DATABASE app");
    }
    let nothing = mysqlq_tests::host::free_port();
    let url = format!(
        "mysql://root@127.0.0.1:{nothing},127.0.0.1:{},127.0.0.1:{}/app",
        a.port(),
        b.port()
    );
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
