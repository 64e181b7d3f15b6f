//! W3C Trace Context `traceparent` values (<https://www.w3.org/TR/trace-context/>): checked
//! before they are stored in a job's meta, so a hook on the worker side can hand them to an
//! OpenTelemetry propagator without checking again.

use std::fmt;

use crate::Error;

/// The meta key under which a job carries the `traceparent` of the span that enqueued it.
pub const TRACEPARENT_KEY: &str = "traceparent";

/// A valid `traceparent` header value: `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`,
/// lowercase, neither id all zeros. Only version `00` is accepted (the version every
/// OpenTelemetry SDK writes).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Traceparent(String);

impl Traceparent {
    /// Checks `value`; the error names what is wrong.
    pub fn parse(value: &str) -> Result<Self, Error> {
        let bad = |why: &str| {
            Error::invalid(
                "traceparent",
                format!(
                    "`{value}` {why}; expected `00-<32 hex trace id>-<16 hex span id>-<2 hex flags>` \
                     (W3C Trace Context), e.g. from an OpenTelemetry TraceContextPropagator"
                ),
            )
        };
        let parts: Vec<&str> = value.split('-').collect();
        let [version, trace, parent, flags] = parts.as_slice() else {
            return Err(bad("does not have 4 dash-separated fields"));
        };
        let hex = |s: &str, len: usize| {
            s.len() == len
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        if *version != "00" {
            return Err(bad("has a version other than `00`"));
        }
        if !hex(trace, 32) || trace.bytes().all(|b| b == b'0') {
            return Err(bad(
                "has no valid trace id (32 lowercase hex digits, not all zero)",
            ));
        }
        if !hex(parent, 16) || parent.bytes().all(|b| b == b'0') {
            return Err(bad(
                "has no valid parent id (16 lowercase hex digits, not all zero)",
            ));
        }
        if !hex(flags, 2) {
            return Err(bad("has no valid flags (2 lowercase hex digits)"));
        }
        Ok(Self(value.to_owned()))
    }

    /// The header value.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The 32-hex-digit trace id.
    pub fn trace_id(&self) -> &str {
        &self.0[3..35]
    }

    /// The 16-hex-digit id of the span that enqueued the job.
    pub fn parent_id(&self) -> &str {
        &self.0[36..52]
    }

    /// `true` when the trace was sampled (flag bit 0).
    pub fn sampled(&self) -> bool {
        u8::from_str_radix(&self.0[53..55], 16).is_ok_and(|f| f & 1 == 1)
    }
}

impl fmt::Display for Traceparent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_values_parse_and_expose_their_fields() {
        let tp =
            Traceparent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(tp.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(tp.parent_id(), "00f067aa0ba902b7");
        assert!(tp.sampled());
        let unsampled =
            Traceparent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").unwrap();
        assert!(!unsampled.sampled());
    }

    #[test]
    fn malformed_values_are_refused_with_the_reason() {
        for (value, why) in [
            ("", "4 dash-separated"),
            (
                "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                "version",
            ),
            (
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                "trace id",
            ),
            (
                "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                "trace id",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                "parent id",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
                "flags",
            ),
        ] {
            let e = Traceparent::parse(value).unwrap_err().to_string();
            assert!(e.contains(why), "{value}: {e}");
            assert!(e.starts_with("invalid traceparent"), "{e}");
        }
    }
}
