//! Enqueue from other languages: a Python service (PyMySQL) and a Node.js service (mysql2)
//! write an order and its job in one transaction through `CALL mysqlq_enqueue`, roll one
//! back, get a refused job's error; a worker then runs exactly the jobs of the committed
//! orders. The snippets in `docs/other-languages.md` are the ones these scripts run.
//!
//! The clients' packages are installed by the README's test command (`tests/run`) into
//! `tests/clients/.python` and `tests/clients/node_modules`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use mysqlq_tests::TestDb;
use serde_json::{Value, json};

fn clients() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("clients")
}

/// Runs a client script against `db`; its one line of JSON.
fn run_client(db: &TestDb, program: &str, script: &str, env: &[(&str, String)]) -> Value {
    let dir = clients();
    let installed = match program {
        "python3" => dir.join(".python/pymysql"),
        _ => dir.join("node_modules/mysql2"),
    };
    assert!(
        installed.exists(),
        "{} is missing: run the README's test command `tests/run` once (it installs the \
         clients' packages: pip --target tests/clients/.python, npm ci in tests/clients)",
        installed.display()
    );
    let url = url::Url::parse(&db.url()).unwrap();
    let out = Command::new(program)
        .arg(dir.join(script))
        .current_dir(&dir)
        .env("PYTHONPATH", dir.join(".python"))
        .env("MYSQLQ_DB_HOST", url.host_str().unwrap())
        .env("MYSQLQ_DB_PORT", url.port().unwrap_or(3306).to_string())
        .env("MYSQLQ_DB_USER", url.username())
        .env("MYSQLQ_DB_PASSWORD", url.password().unwrap_or(""))
        .env("MYSQLQ_DB_NAME", &db.name)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {script} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{script} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// The script's committed orders have their jobs, the rolled-back and the refused ones have
/// none, the refusal named the queue; then a worker runs exactly the committed orders' jobs.
async fn check_client(program: &str, script: &str) {
    let db = TestDb::new().await;
    db.exec(
        "CREATE TABLE orders (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, total INT NOT NULL)",
    )
    .await;
    let out = run_client(&db, program, script, &[]);
    let ids = |k: &str| -> Vec<u64> {
        out[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect()
    };
    let committed = ids("committed");
    assert_eq!(committed.len(), 2, "{out}");
    let error = out["error"]
        .as_array()
        .expect("the refused enqueue's error");
    assert_eq!(
        error[0].as_u64(),
        Some(1644),
        "SIGNAL's error number: {out}"
    );
    assert!(
        error[1]
            .as_str()
            .unwrap()
            .starts_with("mysqlq_enqueue: queue name `bad queue` must be"),
        "{out}"
    );
    for job in out["jobs"].as_array().unwrap() {
        assert_eq!(job[1], "inserted", "{out}");
    }
    let orders: Vec<u64> = sqlx::query_scalar("SELECT id FROM orders ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(orders, committed, "only the committed orders stay");
    let jobs: Vec<(u64, u64)> = sqlx::query_as(
        "SELECT id, CAST(JSON_EXTRACT(payload, '$.n') AS UNSIGNED) FROM job_queue ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let reported: Vec<u64> = out["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j[0].as_u64().unwrap())
        .collect();
    assert_eq!(
        jobs,
        reported
            .iter()
            .copied()
            .zip(committed.iter().copied())
            .collect::<Vec<_>>(),
        "one job per committed order, with the id the client was given"
    );

    let worker = db.worker().start().await.unwrap();
    db.wait_for(
        "the clients' jobs",
        "SELECT COUNT(*) >= 2 FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(30),
    )
    .await;
    worker.shutdown().await.unwrap();
    let ran: Vec<u64> = sqlx::query_scalar(
        "SELECT CAST(JSON_EXTRACT(j.payload, '$.n') AS UNSIGNED) FROM test_runs r \
         JOIN job_queue j ON j.id = r.job_id ORDER BY r.job_id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        ran, committed,
        "the worker ran exactly the committed orders' jobs, once each"
    );
}

#[tokio::test]
async fn a_python_service_enqueues_in_its_transaction() {
    check_client("python3", "enqueue.py").await;
}

#[tokio::test]
async fn a_node_service_enqueues_in_its_transaction() {
    check_client("node", "enqueue.mjs").await;
}

/// A Python service validates payloads against the catalogue `worker kinds --json` prints
/// (python-jsonschema), before it enqueues: it refuses exactly what `worker enqueue` (the Rust
/// check, decoding as the job would) refuses, naming the field; what it accepts is enqueued to
/// the job's queue, and nothing of a refused payload is written.
#[tokio::test]
async fn a_python_service_validates_with_the_published_catalogue() {
    const WORKER: &str = env!("CARGO_BIN_EXE_worker");
    let db = TestDb::new().await;
    let kinds = Command::new(WORKER)
        .args(["kinds", "--json"])
        .output()
        .expect("run `worker kinds --json`");
    assert!(kinds.status.success(), "{kinds:?}");
    let catalogue = std::env::temp_dir().join(format!("{}-kinds.json", db.name));
    std::fs::write(&catalogue, &kinds.stdout).unwrap();
    // (payload, the path python-jsonschema names for a refusal; None: accepted)
    let cases: Vec<(Value, Option<Value>)> = vec![
        (json!({"order_id": 1, "customer_id": 2}), None),
        (
            json!({"order_id": 3, "customer_id": 4, "note": "late"}),
            None,
        ),
        (json!({"order_id": 5, "customer_id": 6, "note": null}), None),
        (json!({"order_id": 7}), Some(json!([]))),
        (
            json!({"order_id": 8, "customer_id": "c-2"}),
            Some(json!(["customer_id"])),
        ),
        (
            json!({"order_id": -1, "customer_id": 2}),
            Some(json!(["order_id"])),
        ),
        (
            json!({"order_id": 1.5, "customer_id": 2}),
            Some(json!(["order_id"])),
        ),
        (
            json!({"order_id": 9, "customer_id": 2, "note": 7}),
            Some(json!(["note"])),
        ),
        (
            json!({"order_id": 10, "customer_id": 2, "notes": "x"}),
            Some(json!([])),
        ),
        (json!([1, 2]), Some(json!([]))),
    ];
    let input: Vec<Value> = cases
        .iter()
        .map(|(p, _)| json!(["send_payment_reminder", p]))
        .collect();
    let out = run_client(
        &db,
        "python3",
        "validate.py",
        &[
            ("MYSQLQ_CATALOGUE", catalogue.display().to_string()),
            ("MYSQLQ_CASES", Value::from(input).to_string()),
        ],
    );
    let results = out.as_array().expect("one result per case");
    assert_eq!(results.len(), cases.len(), "{out}");
    let mut enqueued = Vec::new();
    for ((payload, refusal), result) in cases.iter().zip(results) {
        // The Rust check: `enqueue` decodes the payload as the job would (and, accepted,
        // enqueues it too).
        let rust = Command::new(WORKER)
            .args([
                "enqueue",
                "send_payment_reminder",
                "--json",
                &payload.to_string(),
            ])
            .env("DATABASE_URL", db.url())
            .output()
            .unwrap();
        match refusal {
            None => {
                let id = result["job_id"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("{payload}: {result}"));
                enqueued.push((id, payload.clone()));
                assert!(
                    rust.status.success(),
                    "{payload}: Python accepted it, enqueue refused: {rust:?}"
                );
            }
            Some(path) => {
                assert_eq!(&result["path"], path, "{payload}: {result}");
                assert!(
                    result["message"].as_str().is_some_and(|m| !m.is_empty()),
                    "{result}"
                );
                assert_eq!(
                    rust.status.code(),
                    Some(2),
                    "{payload}: Python refused it ({result}), enqueue did not: {rust:?}"
                );
            }
        }
    }
    std::fs::remove_file(&catalogue).unwrap();
    let rows: Vec<(u64, String, String)> =
        sqlx::query_as("SELECT id, queue_name, CAST(payload AS CHAR) FROM job_queue ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        rows.len(),
        enqueued.len() * 2,
        "Python's rows and `enqueue`'s: {rows:?}"
    );
    for (id, payload) in &enqueued {
        let row = rows
            .iter()
            .find(|r| r.0 == *id)
            .expect("the job Python was given");
        let stored: Value = serde_json::from_str(&row.2).unwrap();
        assert_eq!(
            (row.1.as_str(), &stored),
            ("order-email", payload),
            "job {id}"
        );
    }
}

/// The snippets `docs/other-languages.md` shows are the ones the scripts run.
#[test]
fn the_docs_show_the_snippets_the_tests_run() {
    let docs = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/other-languages.md"),
    )
    .unwrap();
    for (script, name) in [
        ("enqueue.py", "python"),
        ("enqueue.mjs", "node"),
        ("validate.py", "python-validate"),
    ] {
        let text = std::fs::read_to_string(clients().join(script)).unwrap();
        let marker = format!("snippet: {name}\n");
        let start = text.find(&marker).expect("the snippet's start marker") + marker.len();
        let end = start + text[start..].find("end snippet").expect("its end marker");
        let snippet = &text[start..text[..end].rfind('\n').unwrap() + 1];
        assert!(
            docs.contains(snippet),
            "docs/other-languages.md must show {script}'s snippet exactly:\n{snippet}"
        );
    }
}
