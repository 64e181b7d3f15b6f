use mysqlq::JobError;

#[mysqlq::job(queue, timeout("30s"))]
async fn send_email(to: String) -> Result<(), JobError> {
    let _ = to;
    Ok(())
}

fn main() {}
