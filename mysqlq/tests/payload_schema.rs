//! The JSON Schema of a job's payload without a database: what `#[job]` generates from the
//! arguments' types, what a hand-written job may say, and what the registry publishes.

use mysqlq::schemars::JsonSchema;
use mysqlq::{Job, JobContext, JobError, PayloadError, Registry};
use serde_json::{Value, json};

/// An address with a schema of its own (derived through mysqlq's re-export).
#[derive(serde::Serialize, serde::Deserialize, JsonSchema)]
#[schemars(crate = "mysqlq::schemars")]
pub struct Address {
    city: String,
    zip: Option<String>,
}

/// A type that only serde knows: described as any value, by its name.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Opaque(u8);

/// Ships an order.
///
/// Idempotent per order.
#[mysqlq::job(queue = "shipping", name = "ship_order.v2")]
async fn ship_order(
    ctx: JobContext,
    order_id: u64,
    to: Address,
    note: Option<String>,
    tags: Vec<String>,
    extra: Value,
    legacy: Opaque,
) -> Result<(), JobError> {
    let _ = (ctx, order_id, to, note, tags, extra, legacy.0);
    Ok(())
}

#[mysqlq::job]
async fn no_arguments() -> Result<(), JobError> {
    Ok(())
}

/// A hand-written job that says nothing of its payload.
#[derive(serde::Serialize, serde::Deserialize)]
struct Silent {
    n: u32,
}

impl Job for Silent {
    const KIND: &'static str = "silent";

    async fn run(self, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// A hand-written job that opts in, and lists its fields (so enqueueing tools refuse others).
#[derive(serde::Serialize, serde::Deserialize, JsonSchema)]
#[schemars(crate = "mysqlq::schemars")]
struct Described {
    n: u32,
    label: Option<String>,
}

impl Job for Described {
    const KIND: &'static str = "described";
    const FIELDS: Option<&'static [(&'static str, &'static str)]> =
        Some(&[("n", "u32"), ("label", "Option<String>")]);

    fn payload_schema() -> Option<Value> {
        Some(mysqlq::payload_schema_of::<Self>())
    }

    async fn run(self, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[test]
fn job_generates_an_object_schema_of_its_arguments() {
    let schema = ShipOrder::payload_schema().expect("#[job] always describes its payload");
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert_eq!(schema["title"], "ship_order.v2");
    assert_eq!(
        schema["description"],
        "Ships an order.\n\nIdempotent per order."
    );
    assert_eq!(schema["type"], "object");
    let properties = schema["properties"].as_object().unwrap();
    let names: Vec<&str> = properties.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        ["extra", "legacy", "note", "order_id", "tags", "to"],
        "the arguments (keys sorted), without the context"
    );
    assert_eq!(
        schema["required"],
        json!(["order_id", "to", "tags", "extra", "legacy"]),
        "in the arguments' order; only the Option may be left out"
    );
    assert_eq!(properties["order_id"]["type"], "integer");
    assert_eq!(properties["order_id"]["minimum"], 0);
    assert_eq!(properties["note"]["type"], json!(["string", "null"]));
    assert_eq!(properties["tags"]["type"], "array");
    assert_eq!(properties["tags"]["items"]["type"], "string");
    assert_eq!(properties["extra"], json!(true), "any JSON value");
    assert!(
        properties["legacy"]["description"]
            .as_str()
            .unwrap()
            .contains("the Rust type `Opaque`"),
        "{}",
        properties["legacy"]
    );
    assert!(properties["legacy"].get("type").is_none());
    // A type with a schema of its own is a definition, referenced.
    assert_eq!(properties["to"]["$ref"], "#/$defs/Address");
    assert_eq!(schema["$defs"]["Address"]["required"], json!(["city"]));
    // The job itself stays lenient; the registry's schema is what enqueueing tools check.
    assert!(schema.get("additionalProperties").is_none());

    let empty = NoArguments::payload_schema().unwrap();
    assert_eq!(empty["properties"], json!({}));
    assert_eq!(empty["required"], json!([]));
    assert!(empty.get("description").is_none());
}

#[test]
fn the_registry_publishes_what_check_payload_accepts() {
    let registry = Registry::from_inventory().unwrap();
    let ship = registry.get("ship_order.v2").unwrap();
    let schema = ship.payload_schema().unwrap();
    assert_eq!(
        schema["additionalProperties"], false,
        "check_payload refuses fields the job does not have"
    );

    let registry = Registry::new()
        .register::<Silent>()
        .unwrap()
        .register::<Described>()
        .unwrap();
    assert_eq!(registry.get("silent").unwrap().payload_schema(), None);
    let described = registry.get("described").unwrap().payload_schema().unwrap();
    assert_eq!(described["title"], "Described");
    assert_eq!(described["required"], json!(["n"]));
    assert_eq!(described["additionalProperties"], false, "it lists FIELDS");
}

#[test]
fn check_payload_names_the_field_that_does_not_decode() {
    let registry = Registry::from_inventory().unwrap();
    let ship = registry.get("ship_order.v2").unwrap();
    let payload = json!({
        "order_id": 1, "to": {"city": 7}, "tags": [], "extra": null, "legacy": 3
    });
    match ship.check_payload(&payload.to_string()) {
        Err(e @ PayloadError::Field { .. }) => {
            let text = e.to_string();
            assert!(
                text.starts_with("field `to.city`: invalid type: integer `7`, expected a string"),
                "{text}"
            );
        }
        other => panic!("{other:?}"),
    }
    let e = ship
        .check_payload(r#"{"order_id": 1, "to": {"city": "Oslo"}, "tags": []}"#)
        .unwrap_err();
    assert!(e.to_string().starts_with("missing field `extra`"), "{e}");
    let ok = json!({
        "order_id": 1, "to": {"city": "Oslo"}, "tags": ["a"], "extra": [1], "legacy": 3
    });
    ship.check_payload(&ok.to_string()).unwrap();
}
