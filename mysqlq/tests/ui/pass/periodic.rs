use mysqlq::{Job, JobContext, JobError};

/// Every five minutes, UTC.
#[mysqlq::job(queue = "reports", cron = "*/5 * * * *")]
async fn refresh_stats(ctx: JobContext) -> Result<(), JobError> {
    let _ = ctx;
    Ok(())
}

/// Every ten seconds (six fields: seconds first).
#[mysqlq::job(cron = "*/10 * * * * *")]
async fn heartbeat_ping() -> Result<(), JobError> {
    Ok(())
}

fn main() {
    assert_eq!(RefreshStats::CRON, Some("*/5 * * * *"));
    assert_eq!(HeartbeatPing::CRON, Some("*/10 * * * * *"));
}
