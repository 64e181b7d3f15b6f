//! What mysqlq's tests (`tests/harness`) and examples (`examples/src/server.rs`) share to get a
//! database server of their own: one private-server starter, not two copies.
//!
//! - [`PrivateServer`]: a throwaway `mariadbd`/`mysqld` from `PATH` (or `/usr/sbin`) with its own
//!   data directory in a temp dir and a free port; it can be killed, paused, resumed and
//!   restarted, and is stopped and deleted on drop.
//! - [`GaleraCluster`]: a throwaway Galera cluster of `n` MariaDB nodes (`galera-4`, rsync state
//!   transfers, nodes running as the `mysql` user); nodes can be killed, stopped, paused and
//!   rejoined.
//! - [`ReplicaPair`]: a primary and a GTID replica, asynchronous or semi-synchronous
//!   ([`Replication`]), with the promotion a failover runs.
//! - [`PrivateRedis`]: a throwaway `redis-server` without persistence on a free port, to kill,
//!   restart empty or flush (the Redis transport's fault tests).
//! - [`remove_template`]: deletes the data directory private servers are copied from.
//! - [`signal`]: sends a signal to a process by name (`KILL`, `STOP`, `TERM`, …).
//! - [`free_port`], [`which`]: what the host offers; [`client`]: SQL through the command-line
//!   client, for set-up without an async runtime.

pub mod client;
mod galera;
mod host;
mod private_redis;
mod private_server;
mod replication;

pub use galera::GaleraCluster;
pub use host::{free_port, which};
pub use private_redis::PrivateRedis;
pub use private_server::{PrivateServer, StartError, remove_template, signal};
pub use replication::{ReplicaPair, Replication};
