use mysqlq::JobError;

#[mysqlq::job]
async fn send_email(to: &str, cc: Vec<&'static str>, ids: &[u64]) -> Result<(), JobError> {
    let _ = (to, cc, ids);
    Ok(())
}

fn main() {}
