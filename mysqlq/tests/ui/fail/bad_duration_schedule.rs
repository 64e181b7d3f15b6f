use mysqlq::JobError;

#[mysqlq::job(backoff = "5s, 15s, 1.5m")]
async fn send_email(to: String) -> Result<(), JobError> {
    let _ = to;
    Ok(())
}

fn main() {}
