use std::rc::Rc;

use mysqlq::JobError;

async fn pause() {}

#[mysqlq::job]
async fn send_email(to: String) -> Result<(), JobError> {
    let shared = Rc::new(to);
    pause().await;
    let _ = shared;
    Ok(())
}

fn main() {}
