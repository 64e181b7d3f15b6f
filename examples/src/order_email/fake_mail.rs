//! The order-email example's fake mail API: a local HTTP endpoint with outages, lost answers,
//! idempotency keys and a bouncing address.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Mutex;

use crate::fake_http::{FakeServer, Request, lock};

/// Which requests the fake mail server answers badly. Request numbers count from 1 over all
/// requests; 0 disables a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Faults {
    /// Every n-th request gets `503` and delivers nothing (an outage).
    pub outage_every: u64,
    /// Every n-th request (unless it is an outage) delivers the mail but answers `503`, as if
    /// the answer had been lost: the job retries with the same idempotency key.
    pub lost_ack_every: u64,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            outage_every: 3,
            lost_ack_every: 7,
        }
    }
}

/// One mail the fake server delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The idempotency key it was sent with.
    pub key: String,
    /// The order it confirms.
    pub order_id: u64,
    /// The recipient.
    pub to: String,
}

/// What the fake mail server saw.
#[derive(Debug, Clone, Default)]
pub struct MailStats {
    /// Requests received.
    pub requests: u64,
    /// Mails delivered, by idempotency key (a key is delivered at most once).
    pub deliveries: BTreeMap<String, Delivery>,
    /// Requests answered `503` because of an injected outage.
    pub outages: u64,
    /// Mails delivered whose answer was "lost" (`503`).
    pub lost_acks: u64,
    /// Requests repeating an already delivered key: acknowledged, not delivered again.
    pub duplicates: u64,
    /// Requests rejected with a 4xx.
    pub rejected: u64,
}

/// A minimal mail API on `127.0.0.1:<free port>`: `POST /send` with an `Idempotency-Key` header
/// and a JSON body `{"order_id", "to", "subject"}`. Stops when dropped.
#[derive(Debug)]
pub struct FakeMailServer(FakeServer<MailStats>);

impl FakeMailServer {
    /// Starts the server with the given faults.
    pub async fn start(faults: Faults, verbose: bool) -> std::io::Result<Self> {
        FakeServer::start(move |request, stats| {
            std::future::ready(decide(&request, &stats, faults, verbose))
        })
        .await
        .map(Self)
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.0.addr()
    }

    /// A copy of what it saw so far.
    pub fn stats(&self) -> MailStats {
        self.0.stats()
    }
}

/// The mail server's logic: faults, idempotency, bounces, delivery.
fn decide(
    request: &Request,
    stats: &Mutex<MailStats>,
    faults: Faults,
    verbose: bool,
) -> (u16, String) {
    if request.method != "POST" || request.path != "/send" {
        return (404, "only POST /send".to_owned());
    }
    let Some(key) = request
        .header("idempotency-key")
        .filter(|k| !k.is_empty())
        .map(str::to_owned)
    else {
        return (400, "missing Idempotency-Key header".to_owned());
    };
    let mut s = lock(stats);
    s.requests += 1;
    let n = s.requests;
    if faults.outage_every > 0 && n.is_multiple_of(faults.outage_every) {
        s.outages += 1;
        return (503, "injected outage, try again later".to_owned());
    }
    if let Some(done) = s.deliveries.get(&key) {
        let order_id = done.order_id;
        s.duplicates += 1;
        if verbose {
            println!(
                "  mail      order {order_id:>3}: key {key} seen before → acknowledged, NOT delivered again"
            );
        }
        return (200, r#"{"status":"duplicate"}"#.to_owned());
    }
    let message: serde_json::Value = match serde_json::from_slice(&request.body) {
        Ok(v) => v,
        Err(e) => return (400, format!("bad JSON: {e}")),
    };
    let (Some(order_id), Some(to)) = (message["order_id"].as_u64(), message["to"].as_str()) else {
        return (400, "order_id and to are required".to_owned());
    };
    if to.ends_with("@invalid") {
        s.rejected += 1;
        if verbose {
            println!("  mail      order {order_id:>3}: mailbox {to} does not exist → 422");
        }
        return (422, format!("mailbox {to} does not exist"));
    }
    let to = to.to_owned();
    s.deliveries.insert(
        key.clone(),
        Delivery {
            key: key.clone(),
            order_id,
            to: to.clone(),
        },
    );
    if faults.lost_ack_every > 0 && n.is_multiple_of(faults.lost_ack_every) {
        s.lost_acks += 1;
        if verbose {
            println!(
                "  mail      order {order_id:>3}: ✉ delivered to {to}, but the answer is lost (503)"
            );
        }
        return (503, "gateway timeout after delivery".to_owned());
    }
    if verbose {
        println!("  mail      order {order_id:>3}: ✉ delivered to {to}");
    }
    (200, r#"{"status":"sent"}"#.to_owned())
}
