//! A private primary → replica pair on loopback: GTID replication, the replica read-only,
//! asynchronous or semi-synchronous, for failover tests (kill the primary, promote the replica).

use std::time::{Duration, Instant};

use crate::client;
use crate::private_server::{PrivateServer, StartError};

/// How long a step of the set-up or of a promotion may take.
const STEP: Duration = Duration::from_secs(30);

/// How the replica acknowledges the primary's commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replication {
    /// The primary's COMMIT returns before the replica has the transaction: a failover loses
    /// what had not reached it.
    Async,
    /// Semi-synchronous (`AFTER_SYNC`): the primary's COMMIT returns only once the replica has
    /// the transaction in its relay log.
    SemiSync,
}

/// A primary and its replica, each a [`PrivateServer`].
#[derive(Debug)]
pub struct ReplicaPair {
    /// The primary (`server_id` 1).
    pub primary: PrivateServer,
    /// The replica (`server_id` 2, `read_only=ON`), replicating from the primary by GTID.
    pub replica: PrivateServer,
}

impl ReplicaPair {
    /// Starts both servers and the replication; panics with the reason if it fails.
    #[must_use]
    pub fn start(mode: Replication) -> Self {
        Self::try_start(mode).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`start`](Self::start), returning the error.
    ///
    /// # Errors
    ///
    /// A server that does not start, or replication that does not run.
    pub fn try_start(mode: Replication) -> Result<Self, String> {
        let common = [
            "--log-bin=mysql-bin",
            "--binlog-format=ROW",
            "--log-slave-updates=ON",
            "--gtid-strict-mode=ON",
        ];
        let semi = mode == Replication::SemiSync;
        let mut primary_args = common.to_vec();
        primary_args.push("--server-id=1");
        if semi {
            primary_args.extend([
                "--rpl-semi-sync-master-enabled=ON",
                "--rpl-semi-sync-master-wait-point=AFTER_SYNC",
                "--rpl-semi-sync-master-timeout=3600000",
            ]);
        }
        let mut replica_args = common.to_vec();
        replica_args.extend(["--server-id=2", "--read-only=ON"]);
        if semi {
            replica_args.push("--rpl-semi-sync-slave-enabled=ON");
        }
        let start = |args: &[&str]| {
            PrivateServer::try_start_with(args).map_err(|e: StartError| e.to_string())
        };
        let primary = start(&primary_args)?;
        let replica = start(&replica_args)?;
        let pair = Self { primary, replica };
        pair.wait_login(pair.primary.port())?;
        pair.wait_login(pair.replica.port())?;
        client::sql(
            pair.replica.port(),
            &format!(
                "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={}, MASTER_USER='root', \
                 MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1; START SLAVE",
                pair.primary.port()
            ),
            STEP,
        )?;
        let deadline = Instant::now() + STEP;
        loop {
            let running = pair.replica_status()?;
            if running.contains("Slave_IO_Running: Yes")
                && running.contains("Slave_SQL_Running: Yes")
            {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("replication did not start:\n{running}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if semi {
            let deadline = Instant::now() + STEP;
            while client::status(pair.primary.port(), "Rpl_semi_sync_master_clients", STEP)? != "1"
            {
                if Instant::now() > deadline {
                    return Err("the replica did not register as a semi-synchronous client".into());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(pair)
    }

    fn wait_login(&self, port: u16) -> Result<(), String> {
        let deadline = Instant::now() + STEP;
        loop {
            match client::sql(port, "SELECT 1", Duration::from_secs(5)) {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// `SHOW SLAVE STATUS` of the replica, one `name: value` per line.
    ///
    /// # Errors
    ///
    /// The client's error.
    pub fn replica_status(&self) -> Result<String, String> {
        let out = client::sql_vertical(self.replica.port(), "SHOW SLAVE STATUS", STEP)?;
        Ok(out
            .lines()
            .map(str::trim)
            .filter(|l| !l.starts_with('*'))
            .collect::<Vec<_>>()
            .join("\n"))
    }

    /// `mysql://root@127.0.0.1:<primary>,127.0.0.1:<replica>`.
    #[must_use]
    pub fn url(&self) -> String {
        format!(
            "mysql://root@127.0.0.1:{},127.0.0.1:{}",
            self.primary.port(),
            self.replica.port()
        )
    }

    /// Waits until the replica has applied everything the primary committed (its GTID
    /// position equals the primary's `gtid_binlog_pos`).
    ///
    /// # Errors
    ///
    /// Replication broke, or did not catch up within 30 s.
    pub fn wait_caught_up(&self) -> Result<(), String> {
        let target = client::sql(self.primary.port(), "SELECT @@global.gtid_binlog_pos", STEP)?;
        let sql = format!("SELECT MASTER_GTID_WAIT('{target}', 30)");
        match client::sql(self.replica.port(), &sql, Duration::from_secs(35))?.as_str() {
            "0" => Ok(()),
            other => Err(format!("the replica did not reach {target} ({other})")),
        }
    }

    /// Promotes the replica after the primary died: stops fetching, applies everything the
    /// relay log already holds, forgets the primary and turns `read_only` off. What never
    /// reached the relay log is gone (asynchronous replication's loss window; with
    /// [`Replication::SemiSync`], every acknowledged commit is there).
    ///
    /// # Errors
    ///
    /// The client's error, or a relay log that is not applied within 30 s.
    pub fn promote_replica(&self) -> Result<(), String> {
        let port = self.replica.port();
        client::sql(port, "STOP SLAVE IO_THREAD", STEP)?;
        let deadline = Instant::now() + STEP;
        loop {
            let st = self.replica_status()?;
            let field = |name: &str| {
                st.lines()
                    .find_map(|l| l.strip_prefix(&format!("{name}: ")))
                    .unwrap_or_default()
                    .to_owned()
            };
            // Applied: up to the position read, or (the IO thread stopped in the middle of a
            // transaction, which never fully arrived and so never commits here) the SQL thread
            // has applied every whole transaction and waits for more.
            let applied = (field("Master_Log_File") == field("Relay_Master_Log_File")
                && field("Read_Master_Log_Pos") == field("Exec_Master_Log_Pos"))
                || field("Slave_SQL_Running_State").contains("has read all relay log");
            if applied || field("Slave_SQL_Running") != "Yes" {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("the relay log was not applied within 30 s:\n{st}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        client::sql(
            port,
            "STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = OFF",
            STEP,
        )?;
        Ok(())
    }
}
