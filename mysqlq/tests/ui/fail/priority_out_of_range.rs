use mysqlq::JobError;

#[mysqlq::job(priority = 40000)]
async fn send_email(to: String) -> Result<(), JobError> {
    let _ = to;
    Ok(())
}

fn main() {}
