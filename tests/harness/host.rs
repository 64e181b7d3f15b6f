//! What the test host offers: a free TCP port, a program on `PATH` — `mysqlq-testkit`'s, the
//! copies the private server and the examples use too.

pub use mysqlq_testkit::{free_port, which};
