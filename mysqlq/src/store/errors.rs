//! Classifying database errors: redo the transaction (deadlock, lock wait timeout), reconnect
//! and retry (transient), duplicate key.

use sqlx::mysql::MySqlDatabaseError;

use crate::Error;

/// `true` for a deadlock (1213) or lock wait timeout (1205): roll back and redo the whole
/// transaction from the start, at the outermost level.
pub fn is_lock_error(e: &Error) -> bool {
    matches!(db_error_number(e), Some(1213 | 1205))
}

/// `true` for errors that mean "reconnect and retry": I/O, a closed or timed-out pool, server
/// gone (2006, 2013), can't connect (2002, 2003), Galera node not ready (1047), server shutdown
/// in progress (1053), read-only during failover (1290, 1836).
pub fn is_transient(e: &Error) -> bool {
    match e {
        Error::Database(
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
            | sqlx::Error::Protocol(_)
            | sqlx::Error::Tls(_),
        ) => true,
        _ => matches!(
            db_error_number(e),
            Some(1047 | 1053 | 1205 | 1213 | 1290 | 1836 | 2002 | 2003 | 2006 | 2013)
        ),
    }
}

/// The server's error number, when `e` is a server error.
pub fn db_error_number(e: &Error) -> Option<u16> {
    match e {
        Error::Database(e) => sqlx_error_number(e),
        _ => None,
    }
}

pub(crate) fn sqlx_error_number(e: &sqlx::Error) -> Option<u16> {
    match e {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<MySqlDatabaseError>()
            .map(|d| d.number()),
        _ => None,
    }
}

pub(crate) fn is_duplicate_key(e: &sqlx::Error) -> bool {
    sqlx_error_number(e) == Some(1062)
}
