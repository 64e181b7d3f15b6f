//! `cargo run --example basic`: the whole of mysqlq in one page.
//!
//! Migrate, declare a `#[job]`, start a worker, enqueue the job in the same transaction as a
//! business row, wait until the worker ran it, stop. The server is `DATABASE_URL` (default
//! `mysql://root@127.0.0.1:3306`); the run uses a database of its own,
//! `mysqlq_example_basic_<pid>_<random>`, and drops it at the end.

use mysqlq::{JobContext, JobError, Registry, Worker, WorkerEvent};
use mysqlq_examples::server;
use sqlx::MySqlPool;

/// A job is an `async fn`; its arguments after the context are the payload, stored as JSON.
#[mysqlq::job(queue = "welcome", retries = 3)]
async fn send_welcome(ctx: JobContext, user: String) -> Result<(), JobError> {
    println!("job {}: welcome, {user}!", ctx.id());
    Ok(())
}

async fn run(pool: &MySqlPool) -> Result<(), Box<dyn std::error::Error>> {
    // 1. The schema: mysqlq's `job_queue` table (idempotent), and the application's own table.
    mysqlq::migrate(pool).await?;
    sqlx::query("CREATE TABLE users (name VARCHAR(100) PRIMARY KEY)")
        .execute(pool)
        .await?;

    // 2. A worker that runs the jobs of queue `welcome`.
    let registry = Registry::new().register::<SendWelcome>()?;
    let worker = Worker::builder(pool.clone())
        .registry(registry)
        .queues(["welcome"])
        .start()
        .await?;
    let mut events = worker.events();

    // 3. The user and their welcome job commit together, or not at all.
    let mut tx = pool.begin().await?;
    sqlx::query("INSERT INTO users (name) VALUES (?)")
        .bind("ada")
        .execute(&mut *tx)
        .await?;
    let job = SendWelcome { user: "ada".into() }.enqueue(&mut tx).await?;
    tx.commit().await?;

    // 4. Wait until the worker has run it, then stop: running jobs finish, nothing is lost.
    while !matches!(events.recv().await?, WorkerEvent::Completed { id } if id == job.id()) {}
    worker.shutdown().await?;
    println!("job {} completed; worker stopped", job.id());
    Ok(())
}

#[tokio::main]
pub(crate) async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| server::LOCAL_URL.to_owned());
    let database = server::unique_database("basic");
    let pool = server::create_database(&url, &database).await?;
    let result = run(&pool).await;
    pool.close().await;
    server::drop_database(&url, &database).await?;
    result
}
