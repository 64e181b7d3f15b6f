//! A private, throwaway database server for tests that kill, pause or restart it: the one
//! starter in `mysqlq-testkit`, shared with the examples.

pub use mysqlq_testkit::{PrivateServer, signal};
