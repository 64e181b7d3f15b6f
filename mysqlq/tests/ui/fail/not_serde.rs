use mysqlq::JobError;

pub struct Address {
    pub to: String,
}

#[mysqlq::job]
async fn send_email(address: Address) -> Result<(), JobError> {
    let _ = address.to;
    Ok(())
}

fn main() {}
