//! A job's meta: the small JSON object a job carries beside its payload (progress, checkpoints,
//! a request id, a trace context), set at enqueue time, by hooks and by the running handler.

use crate::Error;

/// Largest accepted job meta (the serialised JSON object), 16 KiB: progress, checkpoints, a
/// request id, a trace context. Larger data belongs in your own table.
pub const MAX_META_BYTES: usize = 16 * 1024;

/// A job's meta: a JSON object.
pub type Meta = serde_json::Map<String, serde_json::Value>;

/// Serialises `meta` for the row (`None` when empty), refusing more than [`MAX_META_BYTES`].
pub(crate) fn meta_json(kind: &str, meta: &Meta) -> Result<Option<String>, Error> {
    if meta.is_empty() {
        return Ok(None);
    }
    let text = serde_json::Value::Object(meta.clone()).to_string();
    if text.len() > MAX_META_BYTES {
        return Err(Error::invalid(
            "job meta",
            format!(
                "the meta of job `{kind}` is {} bytes of JSON, over the limit of {MAX_META_BYTES} \
                 bytes; keep progress and checkpoints small and store large data in your own table",
                text.len()
            ),
        ));
    }
    Ok(Some(text))
}
