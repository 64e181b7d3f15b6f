use mysqlq::JobError;

#[mysqlq::job(ordering_key = customer)]
async fn send_email(customer_id: u64, to: String) -> Result<(), JobError> {
    let _ = (customer_id, to);
    Ok(())
}

fn main() {}
