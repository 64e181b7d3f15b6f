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
//! # Features
//!
//! - **Enqueue options** ([`EnqueueOptions`]): delay or run-at, priority (lower runs first),
//!   max attempts, queue, and:
//! - **Dedupe keys**: at most one job per key while pending or processing
//!   ([`DedupeScope::UntilFinished`], the default) or only until first claimed
//!   ([`DedupeScope::UntilStarted`]); a second enqueue returns [`Enqueued::Duplicate`] with the
//!   holder's id. Enforced by a unique index on a generated column, also in [`enqueue_many`] and
//!   under concurrent enqueuers.
//!   [`EnqueueOptions::dedupe_window`] keeps the key taken for a window after the job completes;
//!   [`EnqueueOptions::dedupe_replace`] rewrites a pending holder instead of refusing (debounce,
//!   [`Enqueued::Replaced`]).
//! - **Job meta**: a small JSON object on the row ([`EnqueueOptions::meta`], at most
//!   [`MAX_META_BYTES`]) that the running handler updates with [`JobContext::set_meta`] and
//!   [`JobContext::progress`] (token-guarded writes), shown by [`admin`] and the dashboard.
//! - **Hooks** ([`hooks`]): around enqueueing and each attempt, on dead and cancelled jobs; the
//!   enqueuing span's W3C `traceparent` travels in the meta to the job's span.
//! - **Ordering keys**: jobs sharing a key run one at a time in enqueue order; other keys go on
//!   (no head-of-line blocking). A job waiting for its retry keeps its key until it completes or
//!   fails for good. Also `#[job(ordering_key = argument)]`.
//! - **Per-key concurrency limits**: at most `n` jobs of a key run at once, across all workers.
//! - **Periodic jobs** ([`Periodic`], `#[job(cron = "...")]`): cron in UTC, enqueued exactly once
//!   per tick by a ledger row written in the enqueue transaction; after downtime the latest missed
//!   tick runs once.
//! - **Job catalogue**: each `#[job]` describes its payload in JSON Schema
//!   ([`Job::payload_schema`]); `mysqlq-cli kinds --json` publishes every linked kind with its
//!   options and schema for services that enqueue by kind name.
//! - **Pause/resume** per queue (`mysqlq-cli pause QUEUE`), seen by workers on their next claim.
//! - **Redis Streams transport** (cargo feature `redis`, module `redis`): a relay moves committed
//!   jobs into `mysqlq:<queue>` streams, workers read them with the consumer group `mysqlq`; MySQL
//!   stays the source of truth (`WorkerBuilder::redis`, `docs/redis.md`).
//! - **OpenTelemetry** (cargo feature `otel`, module `otel`): an enqueue span and a span per
//!   attempt, linked across processes through the job's `traceparent`, and the worker's metrics
//!   as OpenTelemetry instruments (`docs/hooks.md`); `mysqlq-cli work --otel` exports them over
//!   OTLP.
//! - **Testing** ([`testing`], `docs/testing.md`): a handler's context for unit tests
//!   ([`testing::TestContext`]), assertions on what was enqueued inside the test's transaction,
//!   and [`testing::drain`] / [`testing::work_one`], which run jobs through the worker's own path.
//!
//! The schema, the state machine and every guarding statement, with each feature's SQL and
//! limits, are documented in `docs/` of the repository (`docs/schema.md`,
//! `docs/state_machine.md`, `docs/guarantees.md`).

// docs.rs (`--cfg docsrs`, nightly) marks each feature-gated item with the feature it needs;
// not the private `__internal-store`, whose absence gates the store's re-exported types.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(docsrs, doc(auto_cfg(hide(feature = "__internal-store"))))]

/// This build's version of mysqlq (`CARGO_PKG_VERSION`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

pub mod admin;
mod backoff;
pub mod cluster;
mod context;
mod enqueue;
mod error;
mod error_chain;
pub mod filter;
pub mod hooks;
mod job;
mod job_id;
pub mod latency;
mod meta;
mod metrics;
mod migrate;
mod new_job;
#[cfg(feature = "otel")]
pub mod otel;
mod payload_schema;
mod periodic;
mod queue;
mod rate;
#[cfg(feature = "redis")]
pub mod redis;
mod registry;
mod state;
/// Every SQL statement mysqlq runs. **Internal**: crate-private, except with the private
/// feature `__internal-store` (mysqlq's own test suite only, not covered by semver), which makes
/// it `pub` but hidden from the docs so the integration tests can drive the guarded writes
/// directly. The operator API is [`admin`].
///
/// The store's items are written `pub`: that is their visibility when the feature is on, and
/// Rust has no per-item `cfg` on visibility short of duplicating each item. Without the feature
/// the module itself is private, so `unreachable_pub` would flag every one of them; allowed
/// for that configuration only. `dead_code` stays on: items only the tests use are gated on
/// the feature where they are defined.
#[cfg(feature = "__internal-store")]
#[doc(hidden)]
pub mod store;
#[cfg(not(feature = "__internal-store"))]
#[allow(unreachable_pub)]
mod store;
pub mod testing;
mod traceparent;
mod wake;
mod worker;
pub mod workflow;

#[doc(hidden)]
pub mod __private;

pub use backoff::{Backoff, RetryPolicy};
pub use cluster::ClusterUrl;
pub use context::{CancelReason, Extensions, JobContext};
pub use enqueue::enqueue_many;
pub use error::{Classify, Error, ErrorClass, JobError};
#[doc(hidden)]
pub use error_chain::error_chain;
pub use job::Job;
pub use job_id::{Enqueued, JobId};
pub use meta::{MAX_META_BYTES, Meta};
pub use metrics::{CounterSnapshot, Counters, HISTOGRAM_BUCKETS, KindStats, Metrics, QueueGauges};
pub use migrate::{SCHEMA_VERSION, check_schema, migrate, migrate_to, schema_version};
/// Turns an `async fn` into a job: a struct holding its arguments, a [`Job`] implementation, and
/// a registration that [`Registry::from_inventory`] finds.
///
/// ```no_run
/// use mysqlq::JobContext;
///
/// #[derive(Debug, thiserror::Error)]
/// #[error("mail server said no")]
/// struct EmailError;
///
/// #[mysqlq::job(queue = "order-email", retries = 5, backoff = "exp", timeout = "30s")]
/// async fn send_order_email(ctx: JobContext, order_id: u64, to: String) -> Result<(), EmailError> {
///     let _ = (ctx.idempotency_key(), order_id, to);
///     Ok(())
/// }
///
/// # async fn place(pool: sqlx::MySqlPool) -> Result<(), Box<dyn std::error::Error>> {
/// // Generated: `struct SendOrderEmail { order_id: u64, to: String }`.
/// let mut tx = pool.begin().await?;
/// let job = SendOrderEmail { order_id: 42, to: "ada@example.com".into() };
/// let enqueued = job.enqueue(&mut tx).await?; // commits or rolls back with `tx`
/// tx.commit().await?;
/// println!("job {}", enqueued.id());
/// # Ok(()) }
/// ```
///
/// # What it generates
/// - The function itself, unchanged: call it directly in tests.
/// - A struct named after the function in PascalCase (`send_order_email` → `SendOrderEmail`),
///   with the function's visibility, one field per argument (same name, type and visibility),
///   serialised as the job's JSON payload. It implements `Serialize` and `Deserialize` and
///   nothing else, so that any serde-able argument type works (derive-style `Debug`/`Clone` would
///   demand them of every argument).
/// - `impl Job` for the struct, and inherent `enqueue` / `enqueue_with` methods (no trait import
///   needed) that take `&mut tx`, `&pool` or `&mut conn`.
/// - An [`inventory`](https://docs.rs/inventory) registration at the attribute's `file:line`.
/// - [`Job::payload_schema`]: the payload's JSON Schema (below).
///
/// # The payload's JSON Schema
/// The payload is a JSON object of the arguments (the context is not one). `#[job]` describes
/// it in JSON Schema (draft 2020-12), for services that enqueue the job by kind name
/// (`mysqlq-cli kinds --json` publishes every linked job's; [`JobRegistration::payload_schema`]):
/// `title` is the kind, `description` the function's doc comment, `properties` one schema per
/// argument — the type's [`JsonSchema`](schemars::JsonSchema) (std types, `serde_json::Value`,
/// and yours once derived) — and `required` every argument a payload may not leave out (all but
/// `Option`s, as serde decides). Your crate needs no `schemars` of its own: an argument type
/// without `JsonSchema` still compiles and is described as any value, named by its Rust type;
/// to describe it, derive it through mysqlq's re-export:
///
/// ```
/// #[derive(serde::Serialize, serde::Deserialize, mysqlq::schemars::JsonSchema)]
/// #[schemars(crate = "mysqlq::schemars")]
/// pub struct Address {
///     city: String,
///     zip: Option<String>,
/// }
///
/// /// Ships an order.
/// #[mysqlq::job(queue = "shipping")]
/// async fn ship(order_id: u64, to: Address) -> Result<(), mysqlq::JobError> {
///     let _ = (order_id, to);
///     Ok(())
/// }
///
/// use mysqlq::Job as _;
/// let schema = Ship::payload_schema().unwrap();
/// assert_eq!(schema["description"], "Ships an order.");
/// assert_eq!(schema["required"], serde_json::json!(["order_id", "to"]));
/// assert_eq!(schema["properties"]["to"]["$ref"], "#/$defs/Address");
/// ```
///
/// # The function
/// - `async`, not generic, no `self`; each argument a plain name with an owned,
///   `Serialize + DeserializeOwned + Send + Sync + 'static` type (`String`, not `&str`).
/// - Optionally a first argument of type [`JobContext`] (by any path), not part of the payload.
/// - Returns `Result<(), E>` (any path ending in `Result`, so `anyhow::Result<()>` works), where
///   `E` is [`JobError`] (its class is kept), `anyhow::Error` (retried, unless it wraps a
///   `JobError`), an error implementing [`Classify`] (its class is used), or any other
///   `std::error::Error + Send + Sync + 'static` (retried).
/// - Its future must be `Send + 'static`: do not hold an `Rc` or a `std` mutex guard across an
///   `.await`.
///
/// # Options
/// | option | meaning | default |
/// |---|---|---|
/// | `queue = "order-email"` | the queue: 1–64 of `a-z A-Z 0-9 _ - . :` | `"default"` |
/// | `retries = 5` | retries after the first attempt (0–1000): `max_attempts = retries + 1` | [`RetryPolicy::DEFAULT_RETRIES`] (4, so 5 attempts) |
/// | `backoff = "exp"` | `"exp"`, `"linear"`, `"fixed"` (see [`Backoff`]), or a schedule `"5s, 15s, 1m, 5m"` (the last entry repeats) | `"exp"` |
/// | `timeout = "30s"` | per-attempt time limit | none: the worker's default |
/// | `priority = -10` | claim priority, an `i16`; lower runs first | `0` |
/// | `name = "send_email.v1"` | the kind name stored in each row (1–128 characters, no spaces); keep it stable | the function's name |
/// | `ordering_key = customer_id` | an argument (implementing `Display`) whose value orders jobs: jobs sharing it run one at a time, in enqueue order | none |
/// | `cron = "*/5 * * * *"` | enqueue this job on a cron schedule (UTC; 5 fields, or 6 with seconds first), once per tick across all workers; only for jobs without arguments (see [`Periodic`]) | none |
/// | `rate_limit = "10/s"` | at most this many handler starts per period, across every worker (see [`Rate`]): `"<count>/<period>"`, a count of 1–1,000,000 and a period of 10 ms–1 day in whole milliseconds, written with the units `ms`, `s`/`sec`, `m`/`min`, `h`, `d` (`"5/100ms"`, `"1/1h30m"`; a bare unit means one: `"600/min"`) | none: unlimited |
/// | `rate_key = provider` | an argument (implementing `Display`) whose value partitions `rate_limit`: each value has its own limit, and a value at its limit holds back no other; needs `rate_limit` | none: one limit for the kind as a whole |
/// | `crate = "::my_app::mysqlq"` | path of this crate, when it is re-exported | `::mysqlq` |
///
/// Durations are written in humantime's grammar, the one the CLI's flags use: `"250ms"`, `"30s"`
/// (or `"30sec"`), `"5m"`, `"1h30m"`, `"1.5s"`, `"2d"`; counted in whole milliseconds.
///
/// # Misuse is a compile error
/// Spanned on the offending token, with a hint; every problem is reported at once:
///
/// ```compile_fail
/// # use mysqlq::JobError;
/// #[mysqlq::job(queue = "emails")]
/// fn send_email(to: String) -> Result<(), JobError> { // error: `#[job]` functions must be `async`
///     Ok(())
/// }
/// ```
///
/// ```compile_fail
/// # use mysqlq::JobError;
/// #[mysqlq::job(retry = 5)] // error: unknown `job` argument `retry`; expected one of `queue`, `retries`, …
/// async fn send_email(to: &str) -> Result<(), JobError> { // error: … take an owned `String` instead
///     Ok(())
/// }
/// ```
pub use mysqlq_macros::job;
pub use new_job::{DedupeScope, EnqueueOptions, MAX_KEY_LEN, MAX_PAYLOAD_BYTES, NewJob};
pub use payload_schema::payload_schema_of;
pub use periodic::{Periodic, parse_schedule};
pub use queue::{MAX_QUEUE_NAME, validate_queue_name};
pub use rate::Rate;
pub use registry::{JobRegistration, PayloadError, Registry};
/// The [`schemars`](https://docs.rs/schemars) crate (1.x) that describes job payloads
/// ([`Job::payload_schema`]): derive `mysqlq::schemars::JsonSchema` on an argument type, with
/// `#[schemars(crate = "mysqlq::schemars")]`, to describe it without a dependency of your own.
pub use schemars;
pub use store::server::{ServerFlavor, ServerInfo};
pub use traceparent::{TRACEPARENT_KEY, Traceparent};
pub use worker::{
    Config as WorkerConfig, RESERVED_CONNECTIONS, ShutdownReport, Worker, WorkerBuilder,
    WorkerEvent, WorkerHandle,
};
