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
    let _ = (ctx, customer, name, tags, address.street, address.zip, scores, ordered);
    let _ = (maybe, pair, bytes, json, r#type);
    Ok(())
}

fn main() {
    let _ = Many {
        customer: 1,
        name: String::new(),
        tags: vec![],
        address: Address { street: String::new(), zip: None },
        scores: HashMap::new(),
        ordered: BTreeMap::new(),
        maybe: None,
        pair: (1, 2),
        bytes: [0; 4],
        json: serde_json::Value::Null,
        r#type: String::new(),
    };
}
