//! The doctor's checks of a Galera node (MariaDB Galera Cluster, Percona XtraDB Cluster): its
//! place in the cluster, the settings Galera needs, and what a cluster means for mysqlq
//! (single writer, ids that are not contiguous). `docs/clusters.md` explains each.

use super::check::{Check, Level, check};
use crate::store::server::{GaleraState, NodeState};

/// The Galera checks of `node`, whose wsrep state is `g`.
pub(super) fn checks(node: &NodeState, g: &GaleraState) -> Vec<Check> {
    let mut out = Vec::new();
    let place = match g.local_index {
        Some(i) => format!("node {} of {}", i + 1, g.cluster_size),
        None => format!("a node of {}", g.cluster_size),
    };
    out.push(match node.writable() {
        Ok(()) => check(
            Level::Ok,
            "galera node",
            format!("{place}, Synced, in the primary component"),
            None,
        ),
        Err(why) => check(
            Level::Fail,
            "galera node",
            format!(
                "{place}: {why}; writes here {}",
                if g.local_state.starts_with("Donor") {
                    "wait behind the state transfer it is sending"
                } else {
                    "fail (error 1047) or wait"
                }
            ),
            Some(
                "point the workers at a Synced node of the primary component: list every node in \
                 one multi-host DATABASE_URL (mysql://user:pw@node1,node2,node3/db) and mysqlq skips \
                 nodes in this state",
            ),
        ),
    });
    out.push(match g.cluster_size {
        0..=1 => check(
            Level::Warn,
            "galera cluster",
            format!("{} node: no other node holds the data", g.cluster_size),
            Some("run at least three nodes (or two and a garbd arbitrator)"),
        ),
        2 => check(
            Level::Warn,
            "galera cluster",
            "2 nodes: when either dies the other loses its quorum and stops taking queries",
            Some("run at least three nodes (or add a garbd arbitrator)"),
        ),
        n => check(
            Level::Ok,
            "galera cluster",
            format!("{n} nodes in the primary component"),
            None,
        ),
    });
    let fmt = node.binlog_format.to_ascii_uppercase();
    out.push(if fmt == "ROW" {
        check(
            Level::Ok,
            "galera binlog",
            "binlog_format=ROW (Galera replicates row images, whether or not log_bin is on)",
            None,
        )
    } else {
        check(
            Level::Fail,
            "galera binlog",
            format!(
                "binlog_format={fmt}: Galera replicates the rows a claim changed only as row events; \
                 whether log_bin is on does not matter"
            ),
            Some("set binlog_format=ROW in every node's my.cnf and restart the nodes one at a time"),
        )
    });
    out.push(match node.autoinc_lock_mode {
        Some(2) => check(
            Level::Ok,
            "galera autoinc",
            "innodb_autoinc_lock_mode=2 (interleaved)",
            None,
        ),
        other => check(
            Level::Fail,
            "galera autoinc",
            format!(
                "innodb_autoinc_lock_mode={}: Galera needs 2; the table-level AUTO-INC lock of the \
                 other modes can deadlock the appliers",
                other.map_or_else(|| "unknown".to_owned(), |m| m.to_string())
            ),
            Some("set innodb_autoinc_lock_mode=2 in every node's my.cnf and restart the nodes one at a time"),
        ),
    });
    out.push(if g.cert_failures + g.bf_aborts > 0 {
        check(
            Level::Warn,
            "galera writers",
            format!(
                "{} certification failures and {} brute-force aborts on this node since it \
                 started: more than one node takes writes that touch the same rows, and claims \
                 through several nodes can run a job twice (docs/clusters.md)",
                g.cert_failures, g.bf_aborts
            ),
            Some(SINGLE_WRITER),
        )
    } else {
        check(
            Level::Info,
            "galera writers",
            "no certification conflicts on this node since it started; keep it so: claims through \
             several nodes abort each other (error 1213) and can run a job twice",
            Some(SINGLE_WRITER),
        )
    });
    let (step, offset) = node.auto_increment;
    out.push(if g.auto_increment_control {
        check(
            Level::Info,
            "galera ids",
            format!(
                "wsrep_auto_increment_control=ON: ids step by auto_increment_increment={step} from \
                 offset {offset}, and the step changes when nodes join or leave; job ids have gaps \
                 and, across nodes, do not follow enqueue order (mysqlq reads the step around each \
                 bulk INSERT, and claims order by priority, available_at, id)"
            ),
            None,
        )
    } else {
        check(
            Level::Info,
            "galera ids",
            format!(
                "wsrep_auto_increment_control=OFF (auto_increment_increment={step}, offset \
                 {offset}): with one writer ids stay contiguous; give every node its own offset \
                 before letting a second node take inserts"
            ),
            None,
        )
    });
    out.push(check(
        Level::Info,
        "galera reads",
        "stats and the dashboard read with wsrep_sync_wait=1: they count every job the cluster \
         committed, whichever node took it",
        None,
    ));
    out
}

const SINGLE_WRITER: &str = "run claims, completions and maintenance through one node: give every worker \
     the same multi-host DATABASE_URL (mysql://user:pw@node1,node2,node3/db, nodes in the same \
     order), which uses the first Synced node and moves on only when it fails";
