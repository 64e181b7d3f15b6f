use mysqlq::JobError;

#[mysqlq::job]
async fn resize((width, height): (u32, u32), _: bool) -> Result<(), JobError> {
    let _ = (width, height);
    Ok(())
}

fn main() {}
