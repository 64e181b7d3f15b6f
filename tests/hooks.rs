//! Hooks: enqueue hooks stamping meta (a request id, the W3C `traceparent`) or refusing a job,
//! `around_run` in registration order seeing each attempt's result (panics included), and the
//! dead and cancelled hooks after the outcome is recorded.

use std::collections::HashMap;
use std::sync::{Mutex, Once};
use std::time::Duration;

use mysqlq::hooks::{BoxFuture, Hook, Hooks, JobRun, Next, set_global_hooks};
use mysqlq::{EnqueueOptions, Error, JobError, JobId, NewJob};
use mysqlq_tests::TestDb;
use serde_json::json;
use tokio::sync::mpsc;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt as _};

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[mysqlq::job(queue = "hooked", retries = 0)]
async fn hooked_ok(n: u32) -> Result<(), JobError> {
    let _ = n;
    Ok(())
}

#[mysqlq::job(queue = "hooked", retries = 0)]
async fn hooked_fails() -> Result<(), JobError> {
    Err(JobError::retry("upstream said 503"))
}

#[mysqlq::job(queue = "hooked", retries = 0)]
async fn hooked_panics() -> Result<(), JobError> {
    panic!("boom in the handler")
}

#[mysqlq::job(queue = "hooked", retries = 3)]
async fn hooked_cancels() -> Result<(), JobError> {
    Err(JobError::cancel("order was deleted"))
}

#[mysqlq::job(queue = "hooked", retries = 0)]
async fn refused_by_hook() -> Result<(), JobError> {
    Ok(())
}

/// The process-wide enqueue hook of this test binary: stamps jobs of queue `hooked` with a
/// request id and a trace context, and refuses `refused_by_hook`.
struct Stamp;

impl Hook for Stamp {
    fn on_enqueue<'a>(&'a self, job: &'a mut NewJob) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            if job.queue() != "hooked" {
                return Ok(());
            }
            if job.kind() == "refused_by_hook" {
                return Err(Error::Invalid {
                    what: "job",
                    reason: "refused by the test's enqueue hook".into(),
                });
            }
            if !job.meta().contains_key("request_id") {
                job.set_meta("request_id", json!("req-7"))?;
            }
            job.set_traceparent(TRACEPARENT)
        })
    }
}

fn install_global_hooks() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| set_global_hooks(Hooks::new().with(Stamp)));
}

/// A worker-side hook that reports what it sees, named so that the order shows.
struct Report {
    name: &'static str,
    tx: mpsc::UnboundedSender<(JobId, String)>,
}

impl Hook for Report {
    fn around_run<'a>(&'a self, job: &'a JobRun, next: Next<'a>) -> Next<'a> {
        Box::pin(async move {
            let _ = self.tx.send((
                job.id(),
                format!(
                    "{} start {} tp={}",
                    self.name,
                    job.kind(),
                    job.traceparent().unwrap_or("-")
                ),
            ));
            let result = next.await;
            let shown = match &result {
                Ok(()) => "ok".to_owned(),
                Err(e) => format!("err {e}"),
            };
            let _ = self
                .tx
                .send((job.id(), format!("{} end {shown}", self.name)));
            result
        })
    }

    fn on_dead<'a>(&'a self, job: &'a JobRun, error: &'a str) -> BoxFuture<'a, ()> {
        let _ = self
            .tx
            .send((job.id(), format!("{} dead {error}", self.name)));
        Box::pin(async {})
    }

    fn on_cancelled<'a>(&'a self, job: &'a JobRun, reason: &'a str) -> BoxFuture<'a, ()> {
        let _ = self
            .tx
            .send((job.id(), format!("{} cancelled {reason}", self.name)));
        Box::pin(async {})
    }
}

async fn meta(db: &TestDb, id: JobId) -> serde_json::Value {
    mysqlq::admin::Admin::new(db.pool.clone())
        .job(id)
        .await
        .unwrap()
        .unwrap()
        .meta
        .unwrap_or_default()
}

#[tokio::test]
async fn enqueue_hooks_stamp_single_and_bulk_enqueues_and_can_refuse_a_job() {
    install_global_hooks();
    let db = TestDb::new().await;
    let one = HookedOk { n: 1 }.enqueue(&db.pool).await.unwrap().id();
    assert_eq!(
        meta(&db, one).await,
        json!({ "request_id": "req-7", "traceparent": TRACEPARENT })
    );
    // Meta from the options is kept; the hook sees it.
    let mut tx = db.pool.begin().await.unwrap();
    let two = HookedOk { n: 2 }
        .enqueue_with(
            &mut tx,
            &EnqueueOptions::new().meta("request_id", json!("req-from-caller")),
        )
        .await
        .unwrap()
        .id();
    tx.commit().await.unwrap();
    assert_eq!(
        meta(&db, two).await,
        json!({ "request_id": "req-from-caller", "traceparent": TRACEPARENT })
    );
    let bulk = mysqlq::enqueue_many(
        &db.pool,
        (10..13).map(|n| NewJob::from_job(&HookedOk { n }, &EnqueueOptions::new()).unwrap()),
    )
    .await
    .unwrap();
    for e in bulk {
        assert_eq!(
            meta(&db, e.id()).await,
            json!({ "request_id": "req-7", "traceparent": TRACEPARENT })
        );
    }
    // Jobs of other queues are left alone by this hook.
    let plain = mysqlq_tests::jobs::Noop { n: 1 }
        .enqueue(&db.pool)
        .await
        .unwrap()
        .id();
    assert_eq!(meta(&db, plain).await, serde_json::Value::Null);

    // A refusing hook fails the enqueue, single or bulk, and writes nothing.
    let err = RefusedByHook {}.enqueue(&db.pool).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("refused by the test's enqueue hook"),
        "{err}"
    );
    let before = db.count("pending").await;
    let err = mysqlq::enqueue_many(
        &db.pool,
        [
            NewJob::from_job(&HookedOk { n: 20 }, &EnqueueOptions::new()).unwrap(),
            NewJob::from_job(&RefusedByHook {}, &EnqueueOptions::new()).unwrap(),
        ],
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("refused"), "{err}");
    assert_eq!(db.count("pending").await, before, "all or nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_hooks_wrap_each_attempt_in_order_and_dead_and_cancelled_hooks_follow_the_outcome() {
    install_global_hooks();
    let db = TestDb::new().await;
    let ok = HookedOk { n: 1 }.enqueue(&db.pool).await.unwrap().id();
    let fails = HookedFails {}.enqueue(&db.pool).await.unwrap().id();
    let panics = HookedPanics {}.enqueue(&db.pool).await.unwrap().id();
    let cancels = HookedCancels {}.enqueue(&db.pool).await.unwrap().id();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let hooks = Hooks::new()
        .with(Report {
            name: "outer",
            tx: tx.clone(),
        })
        .with(Report { name: "inner", tx });
    let w = db
        .worker()
        .queues(["hooked"])
        .hooks(hooks)
        .start()
        .await
        .unwrap();
    // 4 jobs × 4 around events, 2 dead and 1 cancelled job × 2 hooks.
    let mut seen: HashMap<JobId, Vec<String>> = HashMap::new();
    for _ in 0..(16 + 6) {
        let (id, event) = tokio::time::timeout(Duration::from_secs(60), rx.recv())
            .await
            .expect("hook events arrive")
            .expect("channel open");
        seen.entry(id).or_default().push(event);
    }
    let panics_counted = w.metrics().counters.snapshot().panics;
    w.shutdown().await.unwrap();
    let tp = format!("tp={TRACEPARENT}");
    assert_eq!(
        seen[&ok],
        [
            format!("outer start hooked_ok {tp}"),
            format!("inner start hooked_ok {tp}"),
            "inner end ok".to_owned(),
            "outer end ok".to_owned(),
        ]
    );
    let f = &seen[&fails];
    assert_eq!(f.len(), 6, "{f:?}");
    assert_eq!(f[2], "inner end err upstream said 503");
    assert!(f[4].starts_with("outer dead upstream said 503"), "{f:?}");
    assert!(f[5].starts_with("inner dead upstream said 503"), "{f:?}");
    let p = &seen[&panics];
    assert_eq!(
        p[2], "inner end err handler panicked: boom in the handler",
        "{p:?}"
    );
    assert!(
        p[4].starts_with("outer dead handler panicked: boom"),
        "{p:?}"
    );
    let c = &seen[&cancels];
    assert_eq!(c[4], "outer cancelled order was deleted", "{c:?}");
    assert_eq!(c[5], "inner cancelled order was deleted", "{c:?}");
    assert_eq!(db.count("failed").await, 2);
    assert_eq!(db.count("cancelled").await, 1);
    assert_eq!(db.count("completed").await, 1);
    assert_eq!(panics_counted, 1);
}

/// The `traceparent` fields recorded on `job` spans, by job id.
static JOB_SPANS: Mutex<Vec<(u64, String)>> = Mutex::new(Vec::new());

/// A tracing layer keeping the `id` and `traceparent` fields of every `job` span.
struct JobSpans;

#[derive(Default)]
struct Fields {
    id: Option<u64>,
    traceparent: Option<String>,
}

impl Visit for Fields {
    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "id" {
            self.id = Some(value);
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "traceparent" {
            self.traceparent = Some(value.to_owned());
        }
    }

    fn record_debug(&mut self, _field: &Field, _value: &dyn std::fmt::Debug) {}
}

impl<S> tracing_subscriber::Layer<S> for JobSpans
where
    S: tracing::Subscriber + for<'l> tracing_subscriber::registry::LookupSpan<'l>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.metadata().name() == "job" {
            let mut fields = Fields::default();
            attrs.record(&mut fields);
            if let Some(span) = ctx.span(id) {
                span.extensions_mut().insert(fields);
            }
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut ext = span.extensions_mut();
        let Some(fields) = ext.get_mut::<Fields>() else {
            return;
        };
        values.record(fields);
        if let (Some(job), Some(tp)) = (fields.id, fields.traceparent.clone()) {
            JOB_SPANS
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push((job, tp));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_job_span_records_the_enqueuing_traceparent() {
    install_global_hooks();
    // Process-wide, for the worker's tasks on every thread; it only records.
    let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry().with(JobSpans));
    let db = TestDb::new().await;
    let id = HookedOk { n: 5 }.enqueue(&db.pool).await.unwrap().id();
    // No hooks on this worker: the span records the trace context all the same.
    let w = db.worker().queues(["hooked"]).start().await.unwrap();
    db.wait_for(
        "completed",
        &format!("SELECT COUNT(*) FROM job_queue WHERE id = {id} AND status = 'completed'"),
        Duration::from_secs(30),
    )
    .await;
    w.shutdown().await.unwrap();
    let seen = JOB_SPANS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    assert!(
        seen.contains(&(id.0, TRACEPARENT.to_owned())),
        "job {id}'s span records its traceparent: {seen:?}"
    );
}
