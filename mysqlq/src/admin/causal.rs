//! Reads that must see the latest writes: on a Galera node, `stats` and the dashboard's
//! counts read with `wsrep_sync_wait = 1`, so that a job committed through another node a
//! moment ago is counted (a node applies the others' writes shortly after they commit). On a
//! server without wsrep nothing changes.

use std::ops::{Deref, DerefMut};

use sqlx::pool::PoolConnection;
use sqlx::{MySql, MySqlConnection, MySqlPool};

use crate::Error;
use crate::store::server::{session_causal_reads, session_causal_reads_off};

/// A pooled connection with causal reads on (on Galera). [`CausalReads::done`] turns them off
/// again; one dropped without it (an error on the way) closes its connection instead of
/// handing the setting to the pool's next user.
pub(super) struct CausalReads {
    conn: PoolConnection<MySql>,
    on: bool,
}

impl CausalReads {
    pub(super) async fn acquire(pool: &MySqlPool) -> Result<Self, Error> {
        let mut conn = pool.acquire().await?;
        let on = session_causal_reads(&mut conn).await?;
        Ok(Self { conn, on })
    }

    /// Back to the server's default, and the connection back to the pool.
    pub(super) async fn done(mut self) {
        if self.on && session_causal_reads_off(&mut self.conn).await.is_ok() {
            self.on = false;
        }
    }
}

impl Drop for CausalReads {
    fn drop(&mut self) {
        if self.on {
            self.conn.close_on_drop();
        }
    }
}

impl Deref for CausalReads {
    type Target = MySqlConnection;

    fn deref(&self) -> &MySqlConnection {
        &self.conn
    }
}

impl DerefMut for CausalReads {
    fn deref_mut(&mut self) -> &mut MySqlConnection {
        &mut self.conn
    }
}
