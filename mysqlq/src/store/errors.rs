//! Classifying database errors the store acts on: redo the transaction (deadlock, lock wait
//! timeout), duplicate key. Transient errors and server error numbers are
//! [`Error::is_transient`] and [`Error::server_code`].

use crate::Error;
pub(crate) use crate::error::sqlx_error_number;

/// `true` for a deadlock (1213) or lock wait timeout (1205): roll back and redo the whole
/// transaction from the start, at the outermost level.
pub fn is_lock_error(e: &Error) -> bool {
    matches!(e.server_code(), Some(1213 | 1205))
}

pub(crate) fn is_duplicate_key(e: &sqlx::Error) -> bool {
    sqlx_error_number(e) == Some(1062)
}
