use mysqlq::JobError;

#[mysqlq::job(queue = 5)]
async fn send_email(to: String) -> Result<(), JobError> {
    let _ = to;
    Ok(())
}

fn main() {}
