use mysqlq::JobError;

#[mysqlq::job(queue = "order emails")]
async fn send_email(to: String) -> Result<(), JobError> {
    let _ = to;
    Ok(())
}

fn main() {}
