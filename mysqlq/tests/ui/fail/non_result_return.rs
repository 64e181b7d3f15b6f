use mysqlq::JobError;

#[mysqlq::job]
async fn send_email(to: String) -> Option<()> {
    let _ = to;
    None
}

#[mysqlq::job]
async fn count_emails(to: String) -> Result<u32, JobError> {
    let _ = to;
    Ok(1)
}

fn main() {}
