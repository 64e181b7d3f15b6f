//! SQL from the command-line client (`mariadb` or `mysql`), for the cluster starters, which
//! must set servers up and wait for them without an async runtime.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::host::which;

/// Runs `sql` as root on `127.0.0.1:port` and returns what it printed (tab-separated, no
/// column names), or the client's error. Gives up after `limit` (a stalled server never hangs
/// the caller).
///
/// # Errors
///
/// When no client is installed, the client fails, or `limit` passes.
pub fn sql(port: u16, sql: &str, limit: Duration) -> Result<String, String> {
    run(port, sql, limit, &["-N", "-B"])
}

/// Like [`sql`], printing each row vertically: `name: value`, one column per line (what
/// `SHOW SLAVE STATUS` needs).
///
/// # Errors
///
/// As [`sql`].
pub fn sql_vertical(port: u16, sql: &str, limit: Duration) -> Result<String, String> {
    run(port, sql, limit, &["-E"])
}

fn run(port: u16, sql: &str, limit: Duration, format: &[&str]) -> Result<String, String> {
    let client = which(&["mariadb", "mysql"]).ok_or("no mariadb or mysql client on PATH")?;
    let mut child = Command::new(client)
        .args(["--no-defaults", "-uroot", "-h127.0.0.1"])
        .args(format)
        .arg(format!("-P{port}"))
        .arg(format!(
            "--connect-timeout={}",
            limit.as_secs().clamp(1, 30)
        ))
        .arg("-e")
        .arg(sql)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run the SQL client: {e}"))?;
    let deadline = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "`{sql}` on port {port}: no answer within {limit:?}"
                ));
            }
            Err(e) => return Err(format!("waiting for the SQL client: {e}")),
        }
    };
    let mut out = String::new();
    let mut err = String::new();
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_string(&mut out);
    }
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_string(&mut err);
    }
    if status.success() {
        Ok(out.trim_end().to_owned())
    } else {
        Err(format!("`{sql}` on port {port}: {}", err.trim()))
    }
}

/// The value of status variable `name` on `127.0.0.1:port` (`SHOW GLOBAL STATUS`).
///
/// # Errors
///
/// As [`sql`], and when the server has no such variable.
pub fn status(port: u16, name: &str, limit: Duration) -> Result<String, String> {
    let out = sql(port, &format!("SHOW GLOBAL STATUS LIKE '{name}'"), limit)?;
    out.split_once('\t')
        .map(|(_, v)| v.trim().to_owned())
        .ok_or_else(|| format!("no status variable {name} on port {port}"))
}
