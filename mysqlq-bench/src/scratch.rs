//! The scratch database: created on the server, every pool opened on it, dropped at the end.

use std::sync::Mutex;
use std::time::Duration;

use sqlx::MySqlPool;

use crate::error::BenchError;
use crate::probe::lock;
use crate::{db, sql};

/// The scratch database and every pool opened on it (closed before the drop).
pub(crate) struct Scratch {
    pub(crate) name: String,
    pub(crate) url: String,
    pub(crate) pools: Mutex<Vec<MySqlPool>>,
}

impl Scratch {
    pub(crate) async fn pool(&self, max: u32) -> Result<MySqlPool, BenchError> {
        let pool = db::pool(&self.url, max).await?;
        lock(&self.pools).push(pool.clone());
        Ok(pool)
    }

    /// Closes every pool (waiting a little for connections in use) and drops the database.
    pub(crate) async fn drop_database(&self, admin: &MySqlPool) -> Result<(), BenchError> {
        let pools: Vec<MySqlPool> = lock(&self.pools).drain(..).collect();
        for p in pools {
            let _ = tokio::time::timeout(Duration::from_secs(5), p.close()).await;
        }
        let mut conn = db::acquire(admin).await?;
        sql::bench_drop_database(&mut conn, &self.name, 10)
            .await
            .map_err(|e| {
                BenchError::db(
                    &format!("cannot drop the bench database `{}`", self.name),
                    &e,
                )
            })
    }
}

/// Waits for SIGINT (Ctrl-C) or SIGTERM.
pub(crate) async fn interrupted() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
