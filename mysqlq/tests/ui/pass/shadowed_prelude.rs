//! The generated code survives a scope that shadows prelude names.
#![allow(dead_code, unused_macros)]

struct Result;
struct Option;
struct Box;
struct String;
struct Vec;
struct Send;
struct Sync;
struct Ok;
struct Err;
struct Some;
struct None;
trait Future {}
trait ToString {}
mod serde {}
mod inventory {}
macro_rules! file { () => { 0 } }
macro_rules! line { () => { 0 } }

#[mysqlq::job(queue = "shadowed", timeout = "5s", backoff = "1s, 2s", ordering_key = id)]
async fn shadowed(ctx: mysqlq::JobContext, id: u64, name: std::string::String) -> std::result::Result<(), mysqlq::JobError> {
    let _ = (ctx, id, name);
    std::result::Result::Ok(())
}

fn main() {
    let _ = Shadowed { id: 1, name: std::string::String::new() };
}
