use mysqlq::JobError;

#[mysqlq::job(timeout = "30 sec")]
async fn send_email(to: String) -> Result<(), JobError> {
    let _ = to;
    Ok(())
}

fn main() {}
