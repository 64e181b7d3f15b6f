//! An application's library crate: its jobs live here, its worker binaries in `src/bin/`.
#![deny(warnings)]

use mysqlq::{JobContext, JobError};

/// Application state handed to every job by `worker-with-state` through
/// `mysqlq_cli::Cli::new().state(...)`.
#[derive(Debug, Clone)]
pub struct AppState {
    /// Recorded by [`record_visit`] to prove that the job saw the state.
    pub greeting: String,
}

/// Records that it ran, and the greeting of the [`AppState`] it was given (`none` without one),
/// in the table `outside_app_runs (n BIGINT UNSIGNED, greeting VARCHAR(100))` that the test
/// creates.
#[mysqlq::job(queue = "outside-app")]
pub async fn record_visit(ctx: JobContext, n: u64) -> Result<(), JobError> {
    let greeting = ctx
        .state::<AppState>()
        .map_or_else(|| "none".to_owned(), |s| s.greeting.clone());
    let pool = ctx
        .pool()
        .ok_or_else(|| JobError::fail("the worker gave this job no pool"))?;
    sqlx::query("INSERT INTO outside_app_runs (n, greeting) VALUES (?, ?)")
        .bind(n)
        .bind(greeting)
        .execute(pool)
        .await?;
    Ok(())
}
