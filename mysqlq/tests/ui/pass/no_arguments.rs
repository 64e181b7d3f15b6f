//! A job without arguments, with and without the context.
use mysqlq::{JobContext, JobError};

#[mysqlq::job]
async fn nightly_cleanup() -> Result<(), JobError> {
    Ok(())
}

#[mysqlq::job]
async fn heartbeat_only(ctx: JobContext) -> Result<(), JobError> {
    let _ = ctx.attempt();
    Ok(())
}

fn main() {
    let _ = NightlyCleanup {};
    let _ = HeartbeatOnly {};
}
