//! `mysqlq-cli`: the standalone binary. It links no jobs of its own, so its `work` command
//! refuses to start; applications call [`mysqlq_cli::main`] from their own binary instead.

fn main() {
    mysqlq_cli::main()
}
