use mysqlq::JobError;

#[mysqlq::job(queue = "", retries = "3", backoff = "sometimes", bogus = 1)]
fn send_email(to: &str) -> Result<(), JobError> {
    let _ = to;
    Ok(())
}

fn main() {}
