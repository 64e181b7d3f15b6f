//! An application binary as users write it: its jobs linked in, the CLI as its `main`.
//! Integration tests spawn it to run workers and admin commands in real processes.

fn main() {
    mysqlq_tests::jobs::link();
    mysqlq_tests::torture::record_stalls_from_env(); // only when the torture test asks
    mysqlq_cli::main()
}
