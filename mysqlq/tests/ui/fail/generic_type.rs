use mysqlq::JobError;

#[mysqlq::job]
async fn send_email<T: serde::Serialize>(to: T) -> Result<(), JobError> {
    let _ = to;
    Ok(())
}

fn main() {}
