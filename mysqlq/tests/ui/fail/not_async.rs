use mysqlq::JobError;

#[mysqlq::job]
fn send_email(to: String) -> Result<(), JobError> {
    let _ = to;
    Ok(())
}

fn main() {}
