use mysqlq::JobError;

#[mysqlq::job]
async fn send_email(to: String) -> Result<(), JobError>
where
    String: Clone,
{
    let _ = to;
    Ok(())
}

fn main() {}
