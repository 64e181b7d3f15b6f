//! `#[job]` end to end without a database: what it registers, and how the generated `run` calls
//! the function and classifies its errors.

use std::sync::Mutex;
use std::time::Duration;

use mysqlq::{Backoff, Classify, ErrorClass, Job, JobContext, JobError, JobId, Registry};

/// The arguments the jobs below were last run with.
static RAN: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn ran(what: String) {
    RAN.lock().unwrap().push(what);
}

#[derive(Debug, thiserror::Error)]
enum EmailError {
    #[error("address rejected")]
    BadAddress,
    #[error("server busy")]
    Busy,
}

impl Classify for EmailError {
    fn class(&self) -> ErrorClass {
        match self {
            EmailError::BadAddress => ErrorClass::Fail,
            EmailError::Busy => ErrorClass::Retry,
        }
    }
}

#[mysqlq::job(queue = "order-email", retries = 5, backoff = "exp")]
async fn send_order_email(ctx: JobContext, order_id: u64, to: String) -> Result<(), EmailError> {
    ran(format!(
        "send_order_email {} {order_id} {to}",
        ctx.idempotency_key()
    ));
    match to.as_str() {
        "bad" => Err(EmailError::BadAddress),
        "busy" => Err(EmailError::Busy),
        _ => Ok(()),
    }
}

#[derive(Debug, thiserror::Error)]
#[error("disk full")]
struct PlainError;

#[mysqlq::job(name = "plain.v1", retries = 0, backoff = "fixed", priority = -5, timeout = "90s")]
async fn plain(fail: bool) -> Result<(), PlainError> {
    ran(format!("plain {fail}"));
    if fail { Err(PlainError) } else { Ok(()) }
}

#[mysqlq::job(queue = "reports", backoff = "5s, 15s, 1m, 5m", timeout = "1h30m")]
async fn with_anyhow(fail: bool) -> anyhow::Result<()> {
    if fail {
        anyhow::bail!("report generator crashed");
    }
    Ok(())
}

#[mysqlq::job(backoff = "linear", retries = 1000, priority = 7, ordering_key = account)]
async fn snoozer(account: u32) -> Result<(), JobError> {
    let _ = account;
    Err(JobError::snooze(Duration::from_secs(7)))
}

mod nested {
    pub(crate) mod deeper {
        #[mysqlq::job]
        pub(crate) async fn no_args(ctx: mysqlq::JobContext) -> Result<(), mysqlq::JobError> {
            super::super::ran(format!("no_args {}", ctx.kind()));
            Ok(())
        }
    }
}

fn ctx(kind: &str) -> JobContext {
    JobContext::detached(JobId(101), kind, "test")
}

#[test]
fn registry_lists_every_job_sorted_with_its_settings() {
    let registry = Registry::from_inventory().expect("no duplicate kinds");
    let kinds: Vec<&str> = registry.iter().map(|r| r.kind()).collect();
    assert_eq!(
        kinds,
        [
            "no_args",
            "plain.v1",
            "send_order_email",
            "snoozer",
            "with_anyhow"
        ]
    );

    let email = registry.get("send_order_email").unwrap();
    assert_eq!(email.queue(), "order-email");
    assert_eq!(email.priority(), 0);
    assert_eq!(email.retry_policy().max_attempts, 6);
    assert_eq!(email.retry_policy().backoff, Backoff::exponential());
    assert_eq!(email.timeout(), None);
    assert!(
        email.location().contains("registry.rs:"),
        "{}",
        email.location()
    );

    let plain = registry.get("plain.v1").unwrap();
    assert_eq!(plain.queue(), "default");
    assert_eq!(plain.priority(), -5);
    assert_eq!(plain.retry_policy().max_attempts, 1);
    assert_eq!(plain.retry_policy().backoff, Backoff::fixed());
    assert_eq!(plain.timeout(), Some(Duration::from_secs(90)));

    let anyhow_job = registry.get("with_anyhow").unwrap();
    assert_eq!(anyhow_job.queue(), "reports");
    assert_eq!(
        anyhow_job.retry_policy().max_attempts,
        5,
        "default: 4 retries"
    );
    const SCHEDULE: &[Duration] = &[
        Duration::from_secs(5),
        Duration::from_secs(15),
        Duration::from_secs(60),
        Duration::from_secs(300),
    ];
    assert_eq!(
        anyhow_job.retry_policy().backoff,
        Backoff::Schedule(SCHEDULE)
    );
    assert_eq!(anyhow_job.timeout(), Some(Duration::from_secs(5400)));

    let snoozer = registry.get("snoozer").unwrap();
    assert_eq!(snoozer.priority(), 7);
    assert_eq!(snoozer.retry_policy().max_attempts, 1001);
    assert_eq!(snoozer.retry_policy().backoff, Backoff::linear());

    let no_args = registry.get("no_args").unwrap();
    assert_eq!(no_args.queue(), "default");
    assert_eq!(no_args.retry_policy(), mysqlq::RetryPolicy::default());

    assert_eq!(registry.queues(), ["default", "order-email", "reports"]);
}

#[test]
fn trait_constants_and_payload() {
    assert_eq!(SendOrderEmail::KIND, "send_order_email");
    assert_eq!(SendOrderEmail::QUEUE, "order-email");
    assert_eq!(Plain::KIND, "plain.v1");
    assert_eq!(Plain::PRIORITY, -5);
    assert_eq!(nested::deeper::NoArgs::KIND, "no_args");

    let job = SendOrderEmail {
        order_id: 42,
        to: "a@example.com".to_owned(),
    };
    let json = serde_json::to_string(&job).unwrap();
    assert_eq!(json, r#"{"order_id":42,"to":"a@example.com"}"#);
    let back: SendOrderEmail = serde_json::from_str(&json).unwrap();
    assert_eq!((back.order_id, back.to.as_str()), (42, "a@example.com"));
    assert_eq!(
        serde_json::to_string(&nested::deeper::NoArgs {}).unwrap(),
        "{}"
    );

    assert_eq!(job.ordering_key(), None);
    assert_eq!(Snoozer { account: 9 }.ordering_key().as_deref(), Some("9"));
}

#[tokio::test]
async fn run_calls_the_function_with_context_and_arguments() {
    let job = SendOrderEmail {
        order_id: 7,
        to: "ok@example.com".to_owned(),
    };
    job.run(ctx("send_order_email"))
        .await
        .expect("the handler succeeds");
    nested::deeper::NoArgs {}.run(ctx("no_args")).await.unwrap();
    Plain { fail: false }.run(ctx("plain.v1")).await.unwrap();
    let ran = RAN.lock().unwrap().clone();
    assert!(
        ran.contains(&"send_order_email mysqlq-job-101 7 ok@example.com".to_owned()),
        "{ran:?}"
    );
    assert!(ran.contains(&"no_args no_args".to_owned()), "{ran:?}");
    assert!(ran.contains(&"plain false".to_owned()), "{ran:?}");
}

#[tokio::test]
async fn run_maps_errors_by_their_class() {
    let fail = SendOrderEmail {
        order_id: 1,
        to: "bad".to_owned(),
    }
    .run(ctx("e"))
    .await
    .unwrap_err();
    assert_eq!(fail.class(), ErrorClass::Fail, "Classify chose Fail");
    assert_eq!(fail.to_string(), "address rejected");

    let busy = SendOrderEmail {
        order_id: 1,
        to: "busy".to_owned(),
    }
    .run(ctx("e"))
    .await
    .unwrap_err();
    assert_eq!(busy.class(), ErrorClass::Retry, "Classify chose Retry");

    let plain = Plain { fail: true }.run(ctx("p")).await.unwrap_err();
    assert_eq!(
        plain.class(),
        ErrorClass::Retry,
        "a plain std error is retried"
    );
    assert_eq!(plain.to_string(), "disk full");

    let anyhow_err = WithAnyhow { fail: true }.run(ctx("a")).await.unwrap_err();
    assert_eq!(
        anyhow_err.class(),
        ErrorClass::Retry,
        "anyhow errors are retried"
    );
    assert_eq!(anyhow_err.to_string(), "report generator crashed");
    WithAnyhow { fail: false }.run(ctx("a")).await.unwrap();

    let snoozed = Snoozer { account: 1 }.run(ctx("s")).await.unwrap_err();
    assert_eq!(snoozed.class(), ErrorClass::Snooze(Duration::from_secs(7)));
}
