//! Private, throwaway database servers for tests that kill, pause or restart them: the
//! starters in `mysqlq-testkit`, shared with the examples — one server, a Galera cluster, a
//! primary → replica pair.

pub use mysqlq_testkit::{GaleraCluster, PrivateServer, ReplicaPair, Replication, client, signal};
