use mysqlq::JobError;

#[mysqlq::job(backoff = "exponential")]
async fn send_email(to: String) -> Result<(), JobError> {
    let _ = to;
    Ok(())
}

fn main() {}
