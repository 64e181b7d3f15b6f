//! type errors reported by the compiler through the generated assertions: one case per module, all reported by one compilation.

mod bad_error_type {
    #[mysqlq::job]
    async fn send_email(to: String) -> Result<(), String> {
        let _ = to;
        Ok(())
    }
}

mod not_send {
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
}

mod not_serde {
    use mysqlq::JobError;

    pub struct Address {
        pub to: String,
    }

    #[mysqlq::job]
    async fn send_email(address: Address) -> Result<(), JobError> {
        let _ = address.to;
        Ok(())
    }
}

fn main() {}
