use mysqlq::JobError;

#[mysqlq::job]
async fn send_email<'a>(to: std::borrow::Cow<'a, str>) -> Result<(), JobError> {
    let _ = to;
    Ok(())
}

fn main() {}
