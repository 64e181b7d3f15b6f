//! `#[job(...)]` arguments the macro rejects: one case per module, all reported by one compilation.

mod bad_backoff {
    use mysqlq::JobError;

    #[mysqlq::job(backoff = "exponential")]
    async fn send_email(to: String) -> Result<(), JobError> {
        let _ = to;
        Ok(())
    }
}

mod bad_cron {
    use mysqlq::JobError;

    #[mysqlq::job(cron = "61 * * * *")]
    async fn nightly_report() -> Result<(), JobError> {
        Ok(())
    }
}

mod bad_duration_schedule {
    use mysqlq::JobError;

    #[mysqlq::job(backoff = "5s, 15s, 1m30")]
    async fn send_email(to: String) -> Result<(), JobError> {
        let _ = to;
        Ok(())
    }
}

mod bad_duration_timeout {
    use mysqlq::JobError;

    #[mysqlq::job(timeout = "30 parsecs")]
    async fn send_email(to: String) -> Result<(), JobError> {
        let _ = to;
        Ok(())
    }
}

mod cron_with_arguments {
    use mysqlq::{JobContext, JobError};

    #[mysqlq::job(cron = "*/5 * * * *")]
    async fn refresh_place(ctx: JobContext, place_id: u64) -> Result<(), JobError> {
        let _ = (ctx, place_id);
        Ok(())
    }
}

mod duplicate_option {
    use mysqlq::JobError;

    #[mysqlq::job(queue = "emails", retries = 3, queue = "mail")]
    async fn send_email(to: String) -> Result<(), JobError> {
        let _ = to;
        Ok(())
    }
}

mod invalid_queue_name {
    use mysqlq::JobError;

    #[mysqlq::job(queue = "order emails")]
    async fn send_email(to: String) -> Result<(), JobError> {
        let _ = to;
        Ok(())
    }
}

mod missing_value {
    use mysqlq::JobError;

    #[mysqlq::job(queue, timeout("30s"))]
    async fn send_email(to: String) -> Result<(), JobError> {
        let _ = to;
        Ok(())
    }
}

mod ordering_key_unknown {
    use mysqlq::JobError;

    #[mysqlq::job(ordering_key = customer)]
    async fn send_email(customer_id: u64, to: String) -> Result<(), JobError> {
        let _ = (customer_id, to);
        Ok(())
    }
}

mod priority_out_of_range {
    use mysqlq::JobError;

    #[mysqlq::job(priority = 40000)]
    async fn send_email(to: String) -> Result<(), JobError> {
        let _ = to;
        Ok(())
    }
}

mod rate_key_quoted {
    use mysqlq::JobError;

    #[mysqlq::job(rate_limit = "10/s", rate_key = "provider")]
    async fn send_email(provider: String, to: String) -> Result<(), JobError> {
        let _ = (provider, to);
        Ok(())
    }
}

mod rate_key_unknown {
    use mysqlq::JobError;

    #[mysqlq::job(rate_limit = "10/s", rate_key = nope)]
    async fn send_email(provider: String, to: String) -> Result<(), JobError> {
        let _ = (provider, to);
        Ok(())
    }
}

mod rate_key_without_limit {
    use mysqlq::JobError;

    #[mysqlq::job(rate_key = provider)]
    async fn send_email(provider: String, to: String) -> Result<(), JobError> {
        let _ = (provider, to);
        Ok(())
    }
}

mod rate_limit_count_out_of_range {
    use mysqlq::JobError;

    #[mysqlq::job(rate_limit = "0/s")]
    async fn send_email(to: String) -> Result<(), JobError> {
        let _ = to;
        Ok(())
    }

    #[mysqlq::job(rate_limit = "2000000/s")]
    async fn send_sms(to: String) -> Result<(), JobError> {
        let _ = to;
        Ok(())
    }
}

mod rate_limit_no_period {
    use mysqlq::JobError;

    #[mysqlq::job(rate_limit = "10")]
    async fn send_email(to: String) -> Result<(), JobError> {
        let _ = to;
        Ok(())
    }

    #[mysqlq::job(rate_limit = "10 per s")]
    async fn send_sms(to: String) -> Result<(), JobError> {
        let _ = to;
        Ok(())
    }
}

mod rate_limit_not_a_string {
    use mysqlq::JobError;

    #[mysqlq::job(rate_limit = 10)]
    async fn send_email(to: String) -> Result<(), JobError> {
        let _ = to;
        Ok(())
    }
}

mod rate_limit_not_whole {
    use mysqlq::JobError;

    #[mysqlq::job(rate_limit = "ten/s")]
    async fn send_email(to: String) -> Result<(), JobError> {
        let _ = to;
        Ok(())
    }

    #[mysqlq::job(rate_limit = "1.5/s")]
    async fn send_sms(to: String) -> Result<(), JobError> {
        let _ = to;
        Ok(())
    }
}

mod rate_limit_period_out_of_range {
    use mysqlq::JobError;

    #[mysqlq::job(rate_limit = "10/5ms")]
    async fn send_email(to: String) -> Result<(), JobError> {
        let _ = to;
        Ok(())
    }

    #[mysqlq::job(rate_limit = "10/2d")]
    async fn send_sms(to: String) -> Result<(), JobError> {
        let _ = to;
        Ok(())
    }

    #[mysqlq::job(rate_limit = "1/1500us")]
    async fn send_fax(to: String) -> Result<(), JobError> {
        let _ = to;
        Ok(())
    }
}

mod rate_limit_unknown_unit {
    use mysqlq::JobError;

    #[mysqlq::job(rate_limit = "10/fortnight")]
    async fn send_email(to: String) -> Result<(), JobError> {
        let _ = to;
        Ok(())
    }
}

mod retries_out_of_range {
    use mysqlq::JobError;

    #[mysqlq::job(retries = 1001)]
    async fn send_email(to: String) -> Result<(), JobError> {
        let _ = to;
        Ok(())
    }

    #[mysqlq::job(retries = -1)]
    async fn send_sms(to: String) -> Result<(), JobError> {
        let _ = to;
        Ok(())
    }
}

mod unknown_option {
    use mysqlq::JobError;

    #[mysqlq::job(queue = "emails", retry = 5)]
    async fn send_email(to: String) -> Result<(), JobError> {
        let _ = to;
        Ok(())
    }
}

mod wrong_literal_queue {
    use mysqlq::JobError;

    #[mysqlq::job(queue = 5)]
    async fn send_email(to: String) -> Result<(), JobError> {
        let _ = to;
        Ok(())
    }
}

mod wrong_literal_retries {
    use mysqlq::JobError;

    #[mysqlq::job(retries = "5")]
    async fn send_email(to: String) -> Result<(), JobError> {
        let _ = to;
        Ok(())
    }
}

fn main() {}
