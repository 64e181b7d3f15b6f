//! The periodic-refresh example's round, run against a real server: with the consumers stopped
//! for several ticks the queue holds at most one job per place; after a consumer is stopped with
//! its jobs in flight and a new one takes over, every active place except the poisoned one is
//! refreshed, the poisoned one's jobs are `failed` with a `last_error`, inactive places are never
//! touched.
//!
//! Uses `DATABASE_URL` or `mysql://root@127.0.0.1:3306`; fails (never skips) when no server
//! answers.

use mysqlq_examples::periodic_refresh::{self, Options};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_stays_bounded_and_a_restart_loses_nothing() {
    round(None).await;
}

/// The same round with every worker serving its queue over Redis Streams (the shared Redis at
/// `MYSQLQ_TEST_REDIS_URL` or 127.0.0.1:6379, under a prefix of the round's own): the same
/// invariants, and the streams end empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_redis_streams_the_queue_stays_bounded_and_a_restart_loses_nothing() {
    let url = std::env::var("MYSQLQ_TEST_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    round(Some(url)).await;
}

async fn round(redis_url: Option<String>) {
    let url = mysqlq_examples::server::url_or_local();
    let options = Options {
        verbose: false,
        redis_url,
        ..Options::default()
    };
    let result = periodic_refresh::run_once_with(&url, &options).await;
    // The round's database is its own (unique per run): drop it whatever happened.
    let _ = mysqlq_examples::server::drop_database(&url, &options.database).await;
    let summary = result
        .unwrap_or_else(|e| panic!("the periodic-refresh round against {url} could not run: {e}"));
    println!("{summary}");
    assert!(summary.ok(), "invariants broken: {summary}");
    // Workers stopped for several ticks: at most one job per place, never more jobs than places.
    assert!(summary.ticks_stopped >= 3, "{summary}");
    assert_eq!(summary.active, 10, "{summary}");
    assert!(summary.peak_per_place <= 1, "{summary}");
    assert!(summary.peak_queue <= summary.active, "{summary}");
    assert!(summary.duplicates > 0, "{summary}");
    // The restart: jobs were in flight, released, and finished by the successor.
    assert!(summary.released > 0, "{summary}");
    // Every job in flight at the stop finished (the example checks each, and that no job was
    // released twice); a claim in flight at the stop may add released jobs of its own.
    assert!(summary.released_finished > 0, "{summary}");
    // The end state: the 9 healthy active places refreshed despite the 503s; the poisoned one
    // failed (with a last_error, checked by the round).
    assert_eq!(summary.refreshed, 9, "{summary}");
    assert!(summary.outages > 0, "{summary}");
    assert!(summary.poisoned_failed >= 1, "{summary}");
    assert!(summary.to_string().ends_with("— OK"), "{summary}");
}

/// With `mysqlq::testing`: the producer enqueues one refresh per active place (deduplicated by
/// place); drained with the example's state, the poisoned place fails after its retries and the
/// others are refreshed.
#[tokio::test]
async fn the_producer_and_the_refreshes_through_the_testing_helpers() {
    use std::sync::Arc;

    use mysqlq::testing::{
        DrainOptions, EnqueuedMatch, assert_enqueued, drain, enqueued_with, refute_enqueued,
    };
    use mysqlq_examples::periodic_refresh::{
        FakePlaceApi, PRODUCER_QUEUE, ProduceRefreshes, ProducerStats, QUEUE, RefreshPlace,
        RefreshState,
    };
    use mysqlq_examples::server::{drop_database, fresh_database, unique_database, url_or_local};

    let url = url_or_local();
    let name = unique_database("refresh_testing");
    let result: Result<(), Box<dyn std::error::Error>> = async {
        let pool = fresh_database(&url, &name, 10).await?;
        periodic_refresh::create_places(&pool, 4, 3).await?;
        let api = FakePlaceApi::start(2).await?;
        let state = RefreshState {
            api: api.addr(),
            verbose: false,
            producer: Arc::new(ProducerStats::default()),
            redis: None,
        };
        // Two ticks: the second finds every place's job still queued.
        for _ in 0..2 {
            ProduceRefreshes {}.enqueue(&pool).await?;
        }
        let report = drain(
            &pool,
            DrainOptions::new()
                .queues([PRODUCER_QUEUE])
                .state(state.clone()),
        )
        .await?;
        assert_eq!(report.completed, 2, "{report:?}");
        for place in 1..=3 {
            assert_enqueued::<RefreshPlace, _, _>(&pool, |j| j.place_id == place).await;
        }
        refute_enqueued::<RefreshPlace, _, _>(&pool, |j| j.place_id == 4).await;
        let queued = enqueued_with(&pool, &EnqueuedMatch::of::<RefreshPlace>()).await?;
        assert_eq!(queued.len(), 3, "one per active place");

        let report = drain(
            &pool,
            DrainOptions::new()
                .queues([QUEUE])
                .state(state)
                .with_scheduled(true),
        )
        .await?;
        assert_eq!((report.completed, report.failed), (2, 1), "{report:?}");
        let failed = report
            .attempts
            .iter()
            .find(|a| a.outcome == mysqlq::testing::Outcome::Failed);
        let error = failed.and_then(|a| a.error.clone()).unwrap_or_default();
        assert!(
            error.starts_with("place API unavailable: HTTP 500"),
            "{error}"
        );
        assert!(
            error.ends_with("(attempt 4 of 4; no attempts left)"),
            "{error}"
        );
        let refreshed: Vec<u64> =
            sqlx::query_scalar("SELECT id FROM place WHERE refresh_count = 1 ORDER BY id")
                .fetch_all(&pool)
                .await?;
        assert_eq!(refreshed, [1, 3]);
        Ok(())
    }
    .await;
    let _ = drop_database(&url, &name).await;
    result.unwrap();
}
