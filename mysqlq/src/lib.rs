//! # mysqlq — background jobs on MySQL and MariaDB
//!
//! Jobs are typed Rust functions marked [`#[job]`](macro@job). They are enqueued **inside the
//! application's own transaction** — the job row commits or rolls back with the business rows —
//! and executed at least once by workers that claim them with
//! `SELECT … FOR UPDATE SKIP LOCKED` in short READ COMMITTED transactions.
//!
//! ```no_run
//! use mysqlq::JobContext;
//!
//! #[derive(Debug, thiserror::Error)]
//! #[error("mail server said no")]
//! struct EmailError;
//!
//! #[mysqlq::job(queue = "order-email", retries = 5, backoff = "exp")]
//! async fn send_order_email(ctx: JobContext, order_id: u64) -> Result<(), EmailError> {
//!     // ctx.idempotency_key() is stable across retries: hand it to the mail provider.
//!     let _key = ctx.idempotency_key();
//!     let _ = order_id;
//!     Ok(())
//! }
//!
//! # async fn place(pool: sqlx::MySqlPool) -> Result<(), Box<dyn std::error::Error>> {
//! let mut tx = pool.begin().await?;
//! sqlx::query("INSERT INTO orders (id) VALUES (42)").execute(&mut *tx).await?;
//! SendOrderEmail { order_id: 42 }.enqueue(&mut tx).await?; // atomic with the order
//! tx.commit().await?;
//! # Ok(()) }
//! ```
//!
//! Delivery is **at-least-once**: a worker that dies after its handler's side effect but before
//! the completion is written will see the job run again once its lease expires. Make side effects
//! idempotent with [`JobContext::idempotency_key`], which is stable across retries of one job.
//!
//! The schema, the state machine and every guarding statement are documented in `docs/` of the
//! repository (`docs/schema.md`, `docs/state_machine.md`).

mod backoff;
mod context;
mod enqueue;
mod error;
mod job;
mod migrate;
mod registry;
pub mod store;

#[doc(hidden)]
pub mod __private;

pub use backoff::{Backoff, RetryPolicy};
pub use context::{CancelReason, Extensions, JobContext};
pub use enqueue::{
    EnqueueOptions, Enqueued, MAX_KEY_LEN, MAX_PAYLOAD_BYTES, MAX_QUEUE_NAME, NewJob, enqueue_many,
    validate_queue_name,
};
pub use error::{Classify, Error, ErrorClass, JobError};
pub use job::{Job, JobId};
pub use migrate::{check_schema, migrate, schema_version, SCHEMA_VERSION};
pub use mysqlq_macros::job;
pub use registry::{JobRegistration, Registry};
pub use store::server::{ServerFlavor, ServerInfo};
