//! Every pass case of `#[job]`, each in a module of its own: the test binary `macro_pass`
//! (`harness = false` in mysqlq/Cargo.toml), built with the rest of the suite; `main` runs them. The cases are written as a user's crate
//! writes jobs (`pub` items, a job of twelve arguments), so the workspace's lints for our own code
//! do not apply to them.
#![allow(unreachable_pub, clippy::too_many_arguments)]

mod crate_path {
    //! `crate = "..."` for a re-exported mysqlq.
    mod reexport {
        pub use mysqlq;
    }

    #[mysqlq::job(
        crate = "crate::crate_path::reexport::mysqlq",
        queue = "reexported",
        rate_limit = "3/1s",
        rate_key = n
    )]
    async fn reexported(n: u32) -> Result<(), mysqlq::JobError> {
        let _ = n;
        Ok(())
    }

    pub fn main() {
        use mysqlq::Job;
        assert_eq!(Reexported::QUEUE, "reexported");
        assert_eq!(
            Reexported::RATE_LIMIT,
            Some(mysqlq::Rate::__validated(3, 1_000))
        );
        assert_eq!(Reexported { n: 7 }.rate_key().as_deref(), Some("7"));
    }
}

mod error_types {
    //! Every kind of handler error: `JobError`, `anyhow::Error`, a `thiserror` type, a `Classify` type.
    use mysqlq::{Classify, ErrorClass, JobError};

    #[mysqlq::job]
    async fn with_job_error(n: u32) -> Result<(), JobError> {
        if n == 0 {
            return Err(JobError::fail(std::io::Error::other("zero")));
        }
        Ok(())
    }

    #[mysqlq::job]
    async fn with_anyhow(n: u32) -> Result<(), anyhow::Error> {
        anyhow::ensure!(n > 0, "zero");
        Ok(())
    }

    #[mysqlq::job]
    async fn with_anyhow_alias(n: u32) -> anyhow::Result<()> {
        anyhow::ensure!(n > 0, "zero");
        Ok(())
    }

    #[derive(Debug, thiserror::Error)]
    enum FetchError {
        #[error("http error")]
        Http(#[from] std::io::Error),
    }

    #[mysqlq::job]
    async fn with_thiserror(n: u32) -> Result<(), FetchError> {
        if n == 0 {
            Err(std::io::Error::other("zero"))?;
        }
        Ok(())
    }

    #[derive(Debug, thiserror::Error)]
    #[error("bad input")]
    struct BadInput;

    impl Classify for BadInput {
        fn class(&self) -> ErrorClass {
            ErrorClass::Fail
        }
    }

    #[mysqlq::job]
    async fn with_classify(n: u32) -> Result<(), BadInput> {
        if n == 0 { Err(BadInput) } else { Ok(()) }
    }

    #[mysqlq::job]
    async fn with_boxed(n: u32) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let _ = n;
        Ok(())
    }

    pub fn main() {}
}

mod many_arguments {
    //! Many arguments of many serde-able types.
    use std::collections::{BTreeMap, HashMap};

    use mysqlq::{JobContext, JobError};

    #[derive(serde::Serialize, serde::Deserialize)]
    pub struct Address {
        pub street: String,
        pub zip: Option<String>,
    }

    #[mysqlq::job(queue = "many", retries = 0, priority = 32767, name = "many.v2", ordering_key = customer)]
    async fn many(
        ctx: JobContext,
        customer: u64,
        mut name: String,
        tags: Vec<String>,
        address: Address,
        scores: HashMap<String, f64>,
        ordered: BTreeMap<u32, (bool, char)>,
        maybe: Option<i64>,
        pair: (u8, u16),
        bytes: [u8; 4],
        json: serde_json::Value,
        r#type: String,
    ) -> Result<(), JobError> {
        name.push('!');
        let _ = (
            ctx,
            customer,
            name,
            tags,
            address.street,
            address.zip,
            scores,
            ordered,
        );
        let _ = (maybe, pair, bytes, json, r#type);
        Ok(())
    }

    pub fn main() {
        let _ = Many {
            customer: 1,
            name: String::new(),
            tags: vec![],
            address: Address {
                street: String::new(),
                zip: None,
            },
            scores: HashMap::new(),
            ordered: BTreeMap::new(),
            maybe: None,
            pair: (1, 2),
            bytes: [0; 4],
            json: serde_json::Value::Null,
            r#type: String::new(),
        };
    }
}

mod nested_modules {
    //! Jobs in nested modules, with every visibility.
    mod a {
        pub mod b {
            #[mysqlq::job(queue = "deep")]
            pub async fn deep(n: u32) -> Result<(), mysqlq::JobError> {
                let _ = n;
                Ok(())
            }

            #[mysqlq::job]
            pub(crate) async fn crate_visible(n: u32) -> Result<(), mysqlq::JobError> {
                let _ = n;
                Ok(())
            }

            #[mysqlq::job]
            pub(super) async fn parent_visible(n: u32) -> Result<(), mysqlq::JobError> {
                let _ = n;
                Ok(())
            }
        }

        pub fn make() {
            let _ = b::ParentVisible { n: 1 };
        }
    }

    pub fn main() {
        use mysqlq::Job;
        let _ = a::b::Deep { n: 1 };
        let _ = a::b::CrateVisible { n: 2 };
        a::make();
        assert_eq!(a::b::Deep::QUEUE, "deep");
    }
}

mod no_arguments {
    //! A job without arguments, with and without the context.
    use mysqlq::{JobContext, JobError};

    #[mysqlq::job]
    async fn nightly_cleanup() -> Result<(), JobError> {
        Ok(())
    }

    #[mysqlq::job]
    async fn heartbeat_only(ctx: JobContext) -> Result<(), JobError> {
        let _ = ctx.attempt();
        Ok(())
    }

    pub fn main() {
        let _ = NightlyCleanup {};
        let _ = HeartbeatOnly {};
    }
}

mod periodic {
    use mysqlq::{Job, JobContext, JobError};

    /// Every five minutes, UTC.
    #[mysqlq::job(queue = "reports", cron = "*/5 * * * *")]
    async fn refresh_stats(ctx: JobContext) -> Result<(), JobError> {
        let _ = ctx;
        Ok(())
    }

    /// Every ten seconds (six fields: seconds first).
    #[mysqlq::job(cron = "*/10 * * * * *")]
    async fn heartbeat_ping() -> Result<(), JobError> {
        Ok(())
    }

    pub fn main() {
        assert_eq!(RefreshStats::CRON, Some("*/5 * * * *"));
        assert_eq!(HeartbeatPing::CRON, Some("*/10 * * * * *"));
    }
}

mod rate_limited {
    //! `rate_limit` with and without `rate_key`: the rates the macro checked are the runtime's.
    use mysqlq::{Job, JobContext, JobError, Rate};

    #[mysqlq::job(queue = "emails", rate_limit = "10/s", rate_key = provider)]
    async fn send_email(ctx: JobContext, provider: String, to: String) -> Result<(), JobError> {
        let _ = (ctx, provider, to);
        Ok(())
    }

    /// Keyed by an argument that is not a `String`: any `Display` works.
    #[mysqlq::job(rate_limit = "600/min", rate_key = tenant)]
    async fn sync_tenant(tenant: u64) -> Result<(), JobError> {
        let _ = tenant;
        Ok(())
    }

    /// Without a key: the kind as a whole is limited.
    #[mysqlq::job(rate_limit = "5/100ms")]
    async fn ping(host: String) -> Result<(), JobError> {
        let _ = host;
        Ok(())
    }

    #[mysqlq::job(rate_limit = "1/1h30m")]
    async fn digest() -> Result<(), JobError> {
        Ok(())
    }

    pub fn main() {
        assert_eq!(
            <SendEmail as Job>::RATE_LIMIT,
            Some(Rate::__validated(10, 1000))
        );
        assert_eq!(SyncTenant::RATE_LIMIT, Some(Rate::__validated(600, 60_000)));
        assert_eq!(Ping::RATE_LIMIT, Some(Rate::__validated(5, 100)));
        assert_eq!(Digest::RATE_LIMIT, Some(Rate::__validated(1, 5_400_000)));
        // The macro's grammar is a copy of the runtime's: the same text, the same rate.
        assert_eq!(SendEmail::RATE_LIMIT, "10/s".parse::<Rate>().ok());
        assert_eq!(SyncTenant::RATE_LIMIT, "600/min".parse::<Rate>().ok());
        assert_eq!(Ping::RATE_LIMIT, "5/100ms".parse::<Rate>().ok());
        assert_eq!(Digest::RATE_LIMIT, "1/1h30m".parse::<Rate>().ok());
        let job = SendEmail {
            provider: "sendgrid".into(),
            to: "ada@example.com".into(),
        };
        assert_eq!(job.rate_key().as_deref(), Some("sendgrid"));
        assert_eq!(SyncTenant { tenant: 42 }.rate_key().as_deref(), Some("42"));
        assert_eq!(Ping { host: "a".into() }.rate_key(), None);
        assert_eq!(Digest {}.rate_key(), None);
    }
}

mod shadowed_prelude {
    //! The generated code survives a scope that shadows prelude names.
    #![allow(dead_code, unused_macros)]

    struct Result;
    struct Option;
    struct Box;
    struct String;
    struct Vec;
    struct Send;
    struct Sync;
    struct Ok;
    struct Err;
    struct Some;
    struct None;
    trait Future {}
    trait ToString {}
    mod serde {}
    mod inventory {}
    macro_rules! file {
        () => {
            0
        };
    }
    macro_rules! line {
        () => {
            0
        };
    }

    #[mysqlq::job(
        queue = "shadowed",
        timeout = "5sec",
        backoff = "1s, 1.5 min",
        ordering_key = id,
        rate_limit = "4/300ms",
        rate_key = name
    )]
    async fn shadowed(
        ctx: mysqlq::JobContext,
        id: u64,
        name: std::string::String,
    ) -> std::result::Result<(), mysqlq::JobError> {
        let _ = (ctx, id, name);
        std::result::Result::Ok(())
    }

    pub fn main() {
        let _ = Shadowed {
            id: 1,
            name: std::string::String::new(),
        };
    }
}

fn main() {
    crate_path::main();
    error_types::main();
    many_arguments::main();
    nested_modules::main();
    no_arguments::main();
    periodic::main();
    rate_limited::main();
    shadowed_prelude::main();
}
