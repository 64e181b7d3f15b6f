use mysqlq::JobError;

#[mysqlq::job(cron = "61 * * * *")]
async fn nightly_report() -> Result<(), JobError> {
    Ok(())
}

fn main() {}
