//! Runs `examples/basic.rs` (its `main`, as `cargo run --example basic` does) against a real
//! server: `DATABASE_URL` or `mysql://root@127.0.0.1:3306`; fails (never skips) when no server
//! answers. The example drops its own database; this test checks that it did.

#[path = "../basic.rs"]
mod basic;

#[test]
fn basic_example_runs_its_job_and_drops_its_database() {
    if let Err(e) = basic::main() {
        panic!("the basic example failed: {e}");
    }
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| mysqlq_examples::server::LOCAL_URL.to_owned());
    let left: Vec<String> = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let admin = sqlx::MySqlPool::connect(&mysqlq_examples::server::server_part(&url))
            .await
            .unwrap_or_else(|e| panic!("cannot reach the server at {url}: {e}"));
        let pattern = format!("mysqlq_example_basic_{}_%", std::process::id());
        sqlx::query_scalar(
            "SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE ?",
        )
        .bind(pattern)
        .fetch_all(&admin)
        .await
        .expect("listing databases")
    });
    assert!(
        left.is_empty(),
        "the basic example left its database behind: {left:?}"
    );
}
