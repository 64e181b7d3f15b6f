//! The periodic-refresh example's fake place API: slow, `503` on a quarter of the requests, `500`
//! for the poisoned place.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::fake_http::{FakeServer, Request, lock};

/// What the fake place API saw.
#[derive(Debug, Clone, Default)]
pub struct ApiStats {
    /// Requests per place.
    pub requests: BTreeMap<u64, u64>,
    /// `200` answers per place.
    pub ok: BTreeMap<u64, u64>,
    /// `503` answers (injected outages).
    pub outages: u64,
    /// `500` answers (the poisoned place).
    pub poisoned: u64,
}

/// A slow, flaky place API on `127.0.0.1:<free port>`: `GET /places/<id>` answers the place's
/// "population" after 20–100 ms; the k-th request for place p gets `503` when `(p + k) % 4 == 0`
/// (a quarter of the requests, never twice in a row for one place), and the poisoned place always
/// gets `500`. Stops when dropped.
#[derive(Debug)]
pub struct FakePlaceApi(FakeServer<ApiStats>);

impl FakePlaceApi {
    /// Starts the API; `poisoned` always gets `500`.
    pub async fn start(poisoned: u64) -> std::io::Result<Self> {
        FakeServer::start(move |request, stats| answer(request, stats, poisoned))
            .await
            .map(Self)
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.0.addr()
    }

    /// A copy of what it saw so far.
    pub fn stats(&self) -> ApiStats {
        self.0.stats()
    }
}

/// The place API's logic: slowness, outages, the poisoned place.
async fn answer(request: Request, stats: Arc<Mutex<ApiStats>>, poisoned: u64) -> (u16, String) {
    let Some(place_id) = request
        .path
        .strip_prefix("/places/")
        .and_then(|id| id.parse::<u64>().ok())
        .filter(|_| request.method == "GET")
    else {
        return (404, "only GET /places/<id>".to_owned());
    };
    let k = {
        let mut s = lock(&stats);
        let k = s.requests.entry(place_id).or_default();
        *k += 1;
        *k
    };
    // Slow: 20–100 ms, deterministic per place and request.
    let delay = 20 + (place_id * 37 + k * 11) % 81;
    tokio::time::sleep(Duration::from_millis(delay)).await;
    let mut s = lock(&stats);
    if place_id == poisoned {
        s.poisoned += 1;
        (500, "upstream exploded for this place".to_owned())
    } else if (place_id + k).is_multiple_of(4) {
        s.outages += 1;
        (503, "busy, try again later".to_owned())
    } else {
        *s.ok.entry(place_id).or_default() += 1;
        (200, (1_000 + place_id * 17 + k).to_string())
    }
}
