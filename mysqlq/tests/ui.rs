//! Compile-time behaviour of `#[job]`: the diagnostics of what does not compile. What compiles is
//! `ui/pass/all.rs`, the test binary `macro_pass` (built and run with the rest of the suite, so
//! that trybuild's own project only *checks* its dependencies: without pass cases it runs
//! `cargo check`, not `cargo build`, a large part of a cold run's time).
//!
//! The cases are grouped to keep this fast: each `fail/*.rs` holds many independent fail cases
//! (one module each; the macro and the compiler report all of them), so one `TestCases` run
//! compiles four files, not 30. Add a case as a new module in the file of its kind; regenerate
//! the snapshots with `TRYBUILD=overwrite cargo test -p mysqlq --test ui` and check that every
//! diagnostic is there.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/*.rs");
}
