use mysqlq::{JobContext, JobError};

#[mysqlq::job]
async fn send_email(ctx: JobContext, to: String, again: mysqlq::JobContext) -> Result<(), JobError> {
    let _ = (ctx, to, again);
    Ok(())
}

fn main() {}
