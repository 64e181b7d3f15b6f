//! The stream side on the overview page, when the dashboard knows the Redis transport
//! ([`DashboardOptions::redis`](super::DashboardOptions::redis)): each queue's stream with its
//! length, unread and pending entries, the jobs MySQL says are in it, and its consumers.

use maud::{Markup, html};

use super::State;

/// The "Redis streams" section, or nothing without Redis. A Redis that does not answer is shown
/// as such, not as an error of the page.
pub(super) async fn section(state: &State, queues: &[String]) -> Markup {
    let Some(redis) = &state.redis else {
        return html! {};
    };
    let read = async {
        let relayed = mysqlq::redis::relayed(&state.pool).await?;
        let mut all: Vec<String> = queues.to_vec();
        all.extend(relayed.iter().map(|(q, _)| q.clone()));
        all.sort();
        all.dedup();
        Ok::<_, mysqlq::Error>((redis.streams(&all).await?, relayed))
    };
    match read.await {
        Err(e) => html! {
            h2 { "Redis streams" }
            p.muted { "Redis does not answer: " (mysqlq::error_chain(&e)) }
        },
        Ok((streams, relayed)) => html! {
            h2 { "Redis streams" }
            table #streams {
                caption { "Each queue's stream" }
                thead { tr {
                    th scope="col" { "stream" } th.num scope="col" { "length" } th.num scope="col" { "unread" }
                    th.num scope="col" { "pending" } th.num scope="col" { "in stream (MySQL)" }
                    th scope="col" { "consumers (pending, idle)" }
                } }
                tbody {
                    @for s in &streams {
                        tr {
                            td { (s.stream) }
                            td.num { (s.length) " / " (redis.config().stream_cap) }
                            td.num { (s.unread.map_or_else(|| "?".to_owned(), |u| u.to_string())) }
                            td.num { (s.pending) }
                            td.num { (relayed.iter().find(|(q, _)| *q == s.queue).map_or(0, |(_, n)| *n)) }
                            td {
                                @for c in &s.consumers {
                                    span.consumer { (c.name) " (" (c.pending) ", " (c.idle_ms / 1000) "s)" } " "
                                }
                            }
                        }
                    }
                }
            }
        },
    }
}
