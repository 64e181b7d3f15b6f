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

/// Where [`send_welcome`] delivers: the application's mail client, handed to workers with
/// `.state(...)` (a fake one in the tests, which keep a clone to look inside).
#[derive(Debug, Clone, Default)]
pub struct Outbox {
    /// The mails sent, as `to: text`.
    pub sent: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

/// Sends the welcome mail through the [`Outbox`] state, greeting with the [`AppState`]'s
/// greeting. Without an outbox it fails for good; an address without `@` too.
#[mysqlq::job(queue = "outside-mail", retries = 2)]
pub async fn send_welcome(ctx: JobContext, to: String) -> Result<(), JobError> {
    let outbox = ctx
        .state::<Outbox>()
        .ok_or_else(|| JobError::fail("no Outbox state given to the worker"))?;
    if !to.contains('@') {
        return Err(JobError::fail(format!("`{to}` is not an address")));
    }
    let greeting = ctx
        .state::<AppState>()
        .map_or("Welcome", |s| s.greeting.as_str());
    outbox
        .sent
        .lock()
        .map_err(|_| JobError::fail("the outbox is poisoned"))?
        .push(format!("{to}: {greeting} (attempt {})", ctx.attempt()));
    Ok(())
}

/// The application's sign-up: in the caller's transaction, its welcome mail is enqueued (the
/// users table is left out of this example).
pub async fn sign_up(tx: &mut sqlx::MySqlConnection, email: &str) -> Result<(), mysqlq::Error> {
    SendWelcome {
        to: email.to_owned(),
    }
    .enqueue(&mut *tx)
    .await?;
    Ok(())
}
