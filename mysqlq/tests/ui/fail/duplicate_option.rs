use mysqlq::JobError;

#[mysqlq::job(queue = "emails", retries = 3, queue = "mail")]
async fn send_email(to: String) -> Result<(), JobError> {
    let _ = to;
    Ok(())
}

fn main() {}
