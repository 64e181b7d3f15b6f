//! function signatures the macro rejects: one case per module, all reported by one compilation.

mod ctx_not_first {
    use mysqlq::{JobContext, JobError};

    #[mysqlq::job]
    async fn send_email(to: String, ctx: JobContext) -> Result<(), JobError> {
        let _ = (to, ctx);
        Ok(())
    }
}

mod ctx_twice {
    use mysqlq::{JobContext, JobError};

    #[mysqlq::job]
    async fn send_email(ctx: JobContext, to: String, again: mysqlq::JobContext) -> Result<(), JobError> {
        let _ = (ctx, to, again);
        Ok(())
    }
}

mod generic_lifetime {
    use mysqlq::JobError;

    #[mysqlq::job]
    async fn send_email<'a>(to: std::borrow::Cow<'a, str>) -> Result<(), JobError> {
        let _ = to;
        Ok(())
    }
}

mod generic_type {
    use mysqlq::JobError;

    #[mysqlq::job]
    async fn send_email<T: serde::Serialize>(to: T) -> Result<(), JobError> {
        let _ = to;
        Ok(())
    }
}

mod missing_return {
    #[mysqlq::job]
    async fn send_email(to: String) {
        let _ = to;
    }
}

mod non_result_return {
    use mysqlq::JobError;

    #[mysqlq::job]
    async fn send_email(to: String) -> Option<()> {
        let _ = to;
        None
    }

    #[mysqlq::job]
    async fn count_emails(to: String) -> Result<u32, JobError> {
        let _ = to;
        Ok(1)
    }
}

mod not_a_fn {
    #[mysqlq::job(queue = "emails")]
    struct SendEmail {
        to: String,
    }
}

mod not_async {
    use mysqlq::JobError;

    #[mysqlq::job]
    fn send_email(to: String) -> Result<(), JobError> {
        let _ = to;
        Ok(())
    }
}

mod pattern_arg {
    use mysqlq::JobError;

    #[mysqlq::job]
    async fn resize((width, height): (u32, u32), _: bool) -> Result<(), JobError> {
        let _ = (width, height);
        Ok(())
    }
}

mod reference_arg {
    use mysqlq::JobError;

    #[mysqlq::job]
    async fn send_email(to: &str, cc: Vec<&'static str>, ids: &[u64]) -> Result<(), JobError> {
        let _ = (to, cc, ids);
        Ok(())
    }
}

mod self_receiver {
    use mysqlq::JobError;

    struct Mailer;

    impl Mailer {
        #[mysqlq::job]
        async fn send_email(&self, to: String) -> Result<(), JobError> {
            let _ = to;
            Ok(())
        }
    }
}

mod where_clause {
    use mysqlq::JobError;

    #[mysqlq::job]
    async fn send_email(to: String) -> Result<(), JobError>
    where
        String: Clone,
    {
        let _ = to;
        Ok(())
    }
}

fn main() {}
