//! `crate = "..."` for a re-exported mysqlq.
mod reexport {
    pub use mysqlq;
}

#[mysqlq::job(crate = "crate::reexport::mysqlq", queue = "reexported")]
async fn reexported(n: u32) -> Result<(), mysqlq::JobError> {
    let _ = n;
    Ok(())
}

fn main() {
    use mysqlq::Job;
    assert_eq!(Reexported::QUEUE, "reexported");
}
