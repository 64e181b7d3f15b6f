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

    #[derive(Debug)]
    struct Outer(Inner);
    #[derive(Debug)]
    struct Inner;
    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("cannot claim")
        }
    }
    impl std::fmt::Display for Inner {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("connection reset")
        }
    }
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
    impl std::error::Error for Inner {}

    #[test]
    fn sources_are_joined_with_colons() {
        assert_eq!(error_chain(&Outer(Inner)), "cannot claim: connection reset");
    }
}
