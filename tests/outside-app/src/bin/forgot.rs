//! The mistake the layout invites: this binary never refers to the library crate, so none of
//! its jobs are linked in. `work` must refuse at once and name the line to add.
#![deny(warnings)]

fn main() {
    mysqlq_cli::main()
}
