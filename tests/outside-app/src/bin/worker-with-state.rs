//! A worker binary that hands application state to its jobs (`JobContext::state`).
#![deny(warnings)]

fn main() {
    mysqlq_cli::Cli::new()
        .state(outside_app::AppState {
            greeting: "hello from the app".to_owned(),
        })
        .run()
}
