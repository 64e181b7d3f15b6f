//! What mysqlq's tests (`tests/harness`) and examples (`examples/src/server.rs`) share to get a
//! database server of their own: one private-server starter, not two copies.
//!
//! - [`PrivateServer`]: a throwaway `mariadbd`/`mysqld` from `PATH` (or `/usr/sbin`) with its own
//!   data directory in a temp dir and a free port; it can be killed, paused, resumed and
//!   restarted, and is stopped and deleted on drop.
//! - [`PrivateRedis`]: a throwaway `redis-server` without persistence on a free port, to kill,
//!   restart empty or flush (the Redis transport's fault tests).
//! - [`remove_template`]: deletes the data directory private servers are copied from.
//! - [`signal`]: sends a signal to a process by name (`KILL`, `STOP`, `TERM`, …).
//! - [`free_port`], [`which`]: what the host offers.

mod host;
mod private_redis;
mod private_server;

pub use host::{free_port, which};
pub use private_redis::PrivateRedis;
pub use private_server::{PrivateServer, StartError, remove_template, signal};
