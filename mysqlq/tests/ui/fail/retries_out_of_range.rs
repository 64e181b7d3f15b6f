use mysqlq::JobError;

#[mysqlq::job(retries = 1001)]
async fn send_email(to: String) -> Result<(), JobError> {
    let _ = to;
    Ok(())
}

#[mysqlq::job(retries = -1)]
async fn send_sms(to: String) -> Result<(), JobError> {
    let _ = to;
    Ok(())
}

fn main() {}
