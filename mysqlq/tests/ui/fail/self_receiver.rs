use mysqlq::JobError;

struct Mailer;

impl Mailer {
    #[mysqlq::job]
    async fn send_email(&self, to: String) -> Result<(), JobError> {
        let _ = to;
        Ok(())
    }
}

fn main() {}
