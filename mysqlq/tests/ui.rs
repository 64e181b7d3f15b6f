//! Compile-time behaviour of `#[job]`: what compiles, and the diagnostics of what does not.
//!
//! The cases are grouped to keep this fast: `pass/all.rs` holds every pass case in a module of
//! its own, and each `fail/*.rs` holds many independent fail cases (one module each; the macro
//! and the compiler report all of them), so one `TestCases` run compiles five files, not 37.
//! Add a case as a new module in the file of its kind; regenerate the snapshots with
//! `TRYBUILD=overwrite cargo test -p mysqlq --test ui` and check that every diagnostic is there.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
