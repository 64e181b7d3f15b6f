//! Runnable examples of mysqlq, and the helpers they share.
//!
//! Each example is a `[[example]]` of this package (`cargo run --example order-email`) whose
//! scenario lives in a module of this library, so that an integration test can run the very same
//! code and assert on its outcome. Each such module tells its story at the top of its file (the
//! jobs and the transactions that touch mysqlq); its `scenario` and `checks` submodules drive a
//! round and check the invariants, and its fake HTTP API is served with axum.
//!
//! `examples/basic.rs` (`cargo run --example basic`) is the smallest whole program and uses only
//! [`server`]'s database helpers; read it first.
//!
//! - [`runner`]: the `main` of every example (the common `--once` flag for clap, logging, the round under Ctrl-C, `--once` or
//!   keep running, graceful shutdown, the summary and the exit code).
//! - [`server`]: finds a MySQL/MariaDB server (`DATABASE_URL`, else `127.0.0.1:3306`, else a
//!   private throwaway `mariadbd`/`mysqld` started in a temp dir by `mysqlq-testkit`, the starter
//!   the integration tests use too) and creates fresh databases.
//! - [`checkout_workflow`]: the inventory reservation as a step of a checkout workflow (charge →
//!   reserve & receipt → ship), enqueued with its order in one transaction; a sold-out
//!   reservation fails and cancels the shipment.
//! - [`order_email`]: an order and its e-mail job committed in one transaction; a flaky fake mail
//!   server; retries, the idempotency key, and the `failed` state.
//! - [`inventory`]: one row per sellable unit reserved with `SKIP LOCKED` in READ COMMITTED, claim
//!   on checkout, abandoned reservations released by a delayed job, single-flight replenishment.
//! - [`periodic_refresh`]: a periodic producer enqueues one refresh job per active place (deduped,
//!   so nothing piles up while consumers are down); a flaky API; a worker killed mid-run.

pub mod checkout_workflow;
mod fake_http;
pub mod inventory;
mod job_rows;
pub mod order_email;
pub mod periodic_refresh;
pub mod runner;
pub mod server;
