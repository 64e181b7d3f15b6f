//! One line for an error and its sources, shared by the runtime's logs and the CLI's messages.

/// An error and its sources, joined by `: `, leaving out a source whose text the message
/// before it already carries (sqlx repeats its source's text in its own message).
///
/// ```
/// let e = std::io::Error::other("disk full");
/// assert_eq!(mysqlq::error_chain(&e), "disk full");
/// ```
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = c.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::error_chain;

    /// An error with a message and an optional source.
    #[derive(Debug)]
    struct Link(&'static str, Option<Box<Link>>);

    impl std::fmt::Display for Link {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Link {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|l| l as _)
        }
    }

    #[test]
    fn sources_are_joined_and_repeats_left_out() {
        let reset = Link("connection reset", None);
        let io = Link("i/o error: connection reset", Some(Box::new(reset)));
        let top = Link("cannot claim", Some(Box::new(io)));
        assert_eq!(
            error_chain(&top),
            "cannot claim: i/o error: connection reset"
        );
    }
}
