use mysqlq::{JobContext, JobError};

#[mysqlq::job(cron = "*/5 * * * *")]
async fn refresh_place(ctx: JobContext, place_id: u64) -> Result<(), JobError> {
    let _ = (ctx, place_id);
    Ok(())
}

fn main() {}
