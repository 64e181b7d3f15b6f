//! The job catalogue (`kinds`) in real processes: `worker` (tests/bin/docs_worker.rs, the docs'
//! application binary) and `mysqlq-test-worker` list the kinds linked into them, and
//! `enqueue` accepts exactly the payloads the published JSON Schema accepts.

use std::process::{Command, Output, Stdio};

use mysqlq_tests::TestDb;
use serde_json::{Value, json};

const WORKER: &str = env!("CARGO_BIN_EXE_worker");
const TEST_WORKER: &str = env!("CARGO_BIN_EXE_mysqlq-test-worker");

/// A URL where no server listens: `kinds` reads no database.
const NOWHERE: &str = "mysql://root@127.0.0.1:1/none";

fn run(bin: &str, url: &str, args: &[&str]) -> Output {
    Command::new(bin)
        .args(args)
        .env("DATABASE_URL", url)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("spawn the worker binary")
}

fn ok(bin: &str, url: &str, args: &[&str]) -> String {
    let o = run(bin, url, args);
    assert!(
        o.status.success(),
        "{args:?} failed ({}):\n{}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).expect("UTF-8 output")
}

/// `kinds --json` of `bin`, and its entries by kind.
fn catalogue(bin: &str) -> (Vec<String>, serde_json::Map<String, Value>) {
    let doc: Value = serde_json::from_str(&ok(bin, NOWHERE, &["kinds", "--json"])).unwrap();
    let kinds = doc["kinds"].as_array().expect("a `kinds` array");
    let names = kinds
        .iter()
        .map(|k| k["kind"].as_str().unwrap().to_owned())
        .collect();
    let by_kind = kinds
        .iter()
        .map(|k| (k["kind"].as_str().unwrap().to_owned(), k.clone()))
        .collect();
    (names, by_kind)
}

#[test]
fn kinds_json_lists_every_linked_job_with_its_options_and_payload_schema() {
    let (names, kinds) = catalogue(WORKER);
    assert_eq!(
        names,
        [
            "nightly_export",
            "send_order_email",
            "send_payment_reminder"
        ],
        "every kind of the binary, sorted"
    );
    let reminder = &kinds["send_payment_reminder"];
    // The keys of the first entry as printed (pretty-printed: 6 spaces in), in their order.
    let text = ok(WORKER, NOWHERE, &["kinds", "--json"]);
    let keys: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("      \""))
        .filter_map(|l| l.split('"').next())
        .take(13)
        .collect();
    assert_eq!(
        keys,
        [
            "kind",
            "queue",
            "priority",
            "max_attempts",
            "backoff",
            "timeout_ms",
            "rate_limit",
            "rate_key_argument",
            "ordering_key_argument",
            "cron",
            "arguments",
            "payload_schema",
            "source",
        ],
        "the document's shape is stable: every key, null when not set"
    );
    assert_eq!(reminder["queue"], "order-email");
    assert_eq!(reminder["priority"], 5);
    assert_eq!(reminder["max_attempts"], 3, "retries = 2");
    assert_eq!(
        reminder["backoff"],
        json!({"type": "schedule", "delays_ms": [60_000, 600_000]})
    );
    assert_eq!(reminder["timeout_ms"], 30_000);
    assert_eq!(
        reminder["rate_limit"],
        json!({"count": 100, "period_ms": 60_000, "text": "100/min"})
    );
    assert_eq!(reminder["ordering_key_argument"], "customer_id");
    assert_eq!(reminder["rate_key_argument"], Value::Null);
    assert_eq!(reminder["cron"], Value::Null);
    assert!(
        reminder["source"]
            .as_str()
            .unwrap()
            .contains("docs_worker.rs:"),
        "{}",
        reminder["source"]
    );
    assert_eq!(
        reminder["arguments"],
        json!([
            {"name": "order_id", "type": "u64"},
            {"name": "customer_id", "type": "u64"},
            {"name": "note", "type": "Option<String>"},
        ])
    );

    let schema = &reminder["payload_schema"];
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert_eq!(schema["title"], "send_payment_reminder");
    assert_eq!(
        schema["description"],
        "Reminds a customer of an unpaid order."
    );
    assert_eq!(schema["type"], "object");
    let mut properties: Vec<&str> = schema["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    properties.sort_unstable();
    assert_eq!(properties, ["customer_id", "note", "order_id"]);
    assert_eq!(schema["required"], json!(["order_id", "customer_id"]));
    assert_eq!(schema["properties"]["order_id"]["type"], "integer");
    assert_eq!(schema["properties"]["order_id"]["minimum"], 0);
    assert_eq!(
        schema["properties"]["note"]["type"],
        json!(["string", "null"])
    );
    assert_eq!(schema["additionalProperties"], false);

    let email = &kinds["send_order_email"];
    assert_eq!(email["queue"], "order-email");
    assert_eq!(email["max_attempts"], 6);
    assert_eq!(
        email["backoff"],
        json!({"type": "exponential", "base_ms": 5_000, "max_ms": 3_600_000})
    );
    assert_eq!(email["timeout_ms"], Value::Null);
    assert_eq!(email["rate_limit"], Value::Null);
    assert_eq!(email["payload_schema"]["required"], json!(["order_id"]));
    let export = &kinds["nightly_export"];
    assert_eq!(export["queue"], "reports");
    assert_eq!(export["max_attempts"], 1);
    assert_eq!(export["arguments"], json!([]));
    assert_eq!(export["payload_schema"]["properties"], json!({}));
    assert_eq!(export["payload_schema"]["required"], json!([]));

    // The test binary's jobs, from another crate (the harness library).
    let (names, kinds) = catalogue(TEST_WORKER);
    assert!(names.windows(2).all(|w| w[0] < w[1]), "{names:?}");
    for kind in ["noop", "keyed", "forever", "tick"] {
        assert!(kinds.contains_key(kind), "{kind} missing from {names:?}");
    }
    assert_eq!(kinds["keyed"]["queue"], "keyed");
    assert_eq!(kinds["keyed"]["ordering_key_argument"], "key");
    assert_eq!(
        kinds["keyed"]["payload_schema"]["required"],
        json!(["key", "ms"])
    );
    assert_eq!(kinds["forever"]["timeout_ms"], 1_000);
    assert_eq!(kinds["forever"]["max_attempts"], 2);
    assert_eq!(kinds["noop"]["max_attempts"], 4);
}

#[test]
fn kinds_prints_a_table_for_people() {
    let table = ok(WORKER, NOWHERE, &["kinds"]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{table}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        [
            "KIND",
            "QUEUE",
            "PRIORITY",
            "ATTEMPTS",
            "BACKOFF",
            "TIMEOUT",
            "RATE",
            "ARGUMENTS"
        ]
    );
    let words = |line: &str| line.split_whitespace().collect::<Vec<_>>().join(" ");
    assert_eq!(
        words(lines[1]),
        "nightly_export reports 0 1 exp 5s..1h - - -"
    );
    assert_eq!(
        words(lines[2]),
        "send_order_email order-email 0 6 exp 5s..1h - - order_id: u64"
    );
    assert_eq!(
        words(lines[3]),
        "send_payment_reminder order-email 5 3 1m, 10m 30s 100/min order_id: u64, customer_id: \
         u64, note: Option<String> (ordered by customer_id)"
    );
}

/// What a service in another language does with the catalogue (evaluate the published schema)
/// and what `enqueue` does (decode as the worker would) agree, payload by payload.
#[tokio::test]
async fn enqueue_accepts_exactly_what_the_published_schema_accepts() {
    let db = TestDb::new().await;
    let url = db.url();
    let (_, kinds) = catalogue(WORKER);
    let schema = &kinds["send_payment_reminder"]["payload_schema"];
    let validator = jsonschema::validator_for(schema).expect("a valid JSON Schema");
    // (payload, what enqueue's refusal must say; None: accepted)
    let cases: [(Value, Option<&str>); 12] = [
        (json!({"order_id": 1, "customer_id": 2}), None),
        (
            json!({"order_id": 1, "customer_id": 2, "note": "late"}),
            None,
        ),
        (json!({"order_id": 1, "customer_id": 2, "note": null}), None),
        (
            json!({"order_id": 18_446_744_073_709_551_615_u64, "customer_id": 0}),
            None,
        ),
        (json!({"order_id": 1}), Some("missing field `customer_id`")),
        (
            json!({"order_id": 1, "customer_id": "c-2"}),
            Some("field `customer_id`: invalid type: string \"c-2\", expected u64"),
        ),
        (
            json!({"order_id": -1, "customer_id": 2}),
            Some("field `order_id`: invalid value: integer `-1`, expected u64"),
        ),
        (
            json!({"order_id": 1.5, "customer_id": 2}),
            Some("field `order_id`: invalid type: floating point `1.5`, expected u64"),
        ),
        (
            json!({"order_id": 1, "customer_id": 2, "note": 7}),
            Some("field `note`: invalid type: integer `7`, expected a string"),
        ),
        (
            json!({"order_id": 1, "customer_id": 2, "notes": "late"}),
            Some("the job has no field `notes`"),
        ),
        (json!([1, 2]), Some("must be a JSON object")),
        (json!("order 1"), Some("must be a JSON object")),
    ];
    let mut accepted: i64 = 0;
    for (payload, refusal) in &cases {
        let by_schema = validator.is_valid(payload);
        let o = run(
            WORKER,
            &url,
            &[
                "enqueue",
                "send_payment_reminder",
                "--json",
                &payload.to_string(),
            ],
        );
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        let by_enqueue = o.status.success();
        assert_eq!(
            by_schema, by_enqueue,
            "{payload}: the schema says {by_schema}, enqueue says {by_enqueue}: {err}"
        );
        match refusal {
            None => {
                assert!(by_enqueue, "{payload}: {err}");
                accepted += 1;
            }
            Some(why) => {
                assert_eq!(o.status.code(), Some(2), "{payload}: {err}");
                let line = err.lines().find(|l| l.starts_with("error: ")).unwrap_or("");
                assert!(
                    line.starts_with("error: the payload does not fit job `send_payment_reminder`")
                        && line.contains(why),
                    "{payload}: want {why:?} in {err}"
                );
                assert!(!line.contains(" at line "), "{payload}: {err}");
                assert!(
                    line.contains("order_id: u64, customer_id: u64, note: Option<String>")
                        || why.contains("JSON object"),
                    "{payload}: the fix lists the arguments: {err}"
                );
            }
        }
    }
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_queue").await,
        accepted,
        "exactly the accepted payloads were enqueued"
    );
}

/// docs/cli.md shows one entry of `worker kinds --json` in a ```` ```json ```` block: it is the
/// entry the binary prints, key for key, in its order.
#[test]
fn the_json_entry_in_docs_cli_md_is_what_kinds_prints() {
    let blocks: Vec<_> = mysqlq_tests::docs::blocks("docs/cli.md")
        .into_iter()
        .filter(|b| b.lang == "json" && b.lines.iter().any(|l| l.contains("\"payload_schema\"")))
        .collect();
    assert_eq!(blocks.len(), 1, "one sample entry of `kinds --json`");
    let shown = blocks[0].lines.join("\n");
    let entry: Value = serde_json::from_str(&shown).expect("the sample is JSON");
    let (_, kinds) = catalogue(WORKER);
    let kind = entry["kind"].as_str().expect("the sample names its kind");
    assert_eq!(entry, kinds[kind], "docs/cli.md's entry of `{kind}`");
    let printed = ok(WORKER, NOWHERE, &["kinds", "--json"]);
    let indented: String = shown.lines().map(|l| format!("    {l}\n")).collect();
    assert!(
        printed.contains(indented.trim_start()),
        "the sample's text (keys in their order) is the printed text:\n{printed}"
    );
}
