//! Every kind of handler error: `JobError`, `anyhow::Error`, a `thiserror` type, a `Classify` type.
use mysqlq::{Classify, ErrorClass, JobError};

#[mysqlq::job]
async fn with_job_error(n: u32) -> Result<(), JobError> {
    if n == 0 {
        return Err(JobError::fail(std::io::Error::other("zero")));
    }
    Ok(())
}

#[mysqlq::job]
async fn with_anyhow(n: u32) -> Result<(), anyhow::Error> {
    anyhow::ensure!(n > 0, "zero");
    Ok(())
}

#[mysqlq::job]
async fn with_anyhow_alias(n: u32) -> anyhow::Result<()> {
    anyhow::ensure!(n > 0, "zero");
    Ok(())
}

#[derive(Debug, thiserror::Error)]
enum FetchError {
    #[error("http error")]
    Http(#[from] std::io::Error),
}

#[mysqlq::job]
async fn with_thiserror(n: u32) -> Result<(), FetchError> {
    if n == 0 {
        Err(std::io::Error::other("zero"))?;
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
#[error("bad input")]
struct BadInput;

impl Classify for BadInput {
    fn class(&self) -> ErrorClass {
        ErrorClass::Fail
    }
}

#[mysqlq::job]
async fn with_classify(n: u32) -> Result<(), BadInput> {
    if n == 0 { Err(BadInput) } else { Ok(()) }
}

#[mysqlq::job]
async fn with_boxed(n: u32) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let _ = n;
    Ok(())
}

fn main() {}
