//! Queue names: what a queue may be called, checked wherever a name enters mysqlq.

use crate::Error;

/// Longest queue name (the `queue_name` column is `VARCHAR(64)`).
pub const MAX_QUEUE_NAME: usize = 64;

/// Checks a queue name: 1–64 characters of `a-z A-Z 0-9 _ - . :`.
pub fn validate_queue_name(queue: &str) -> Result<(), Error> {
    let ok_chars = queue
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'));
    if queue.is_empty() || queue.len() > MAX_QUEUE_NAME || !ok_chars {
        return Err(Error::invalid(
            "queue name",
            format!(
                "`{queue}` must be 1 to {MAX_QUEUE_NAME} characters of letters, digits, `_`, `-`, `.` or `:`"
            ),
        ));
    }
    Ok(())
}
