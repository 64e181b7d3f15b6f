//! A claim made by hand, for the test files that drive `mysqlq::store` directly
//! (`tests/foundation.rs`, `tests/cancel.rs`). Not a module of the harness library, which sees
//! only mysqlq's public API (`mysqlq::store` needs the dev-dependency's `__internal-store`
//! feature): those files include it with `#[path = "harness/claim.rs"] mod claim;`.

use std::time::Duration;

use mysqlq::store::{self, ClaimParams, ClaimedJob, Owned};
use mysqlq_tests::TestDb;

/// Claims up to `limit` jobs of `queue` for `lease` as `test-worker`, under a fresh token
/// ([`mysqlq_tests::token`]): the token and the claimed jobs.
pub(crate) async fn claim(
    db: &TestDb,
    queue: &str,
    limit: u32,
    lease: Duration,
) -> (String, Vec<ClaimedJob>) {
    let token = mysqlq_tests::token();
    let mut conn = db.pool.acquire().await.unwrap();
    let jobs = store::job_claim(
        &mut conn,
        &ClaimParams {
            queue,
            limit,
            skip: 0,
            worker_id: "test-worker",
            token: &token,
            lease,
        },
    )
    .await
    .unwrap();
    (token, jobs)
}

/// The jobs of a claim as owned by its `token`: what the token-guarded writes take.
pub(crate) fn owned(token: &str, jobs: &[ClaimedJob]) -> Vec<Owned> {
    jobs.iter()
        .map(|j| Owned {
            id: j.id,
            token: token.to_owned(),
        })
        .collect()
}
