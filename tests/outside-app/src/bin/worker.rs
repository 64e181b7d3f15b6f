//! The documented worker layout: the jobs are in this package's library crate, and the one
//! `use` line below links them (and their registrations) into this binary.
#![deny(warnings)]

use outside_app as _;

fn main() {
    mysqlq_cli::main()
}
