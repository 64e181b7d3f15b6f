//! What the host offers: a free TCP port, a program on `PATH`.

use std::net::TcpListener;
use std::path::PathBuf;

/// A TCP port on 127.0.0.1 that nothing listens on right now.
///
/// # Panics
///
/// When no port can be bound at all.
#[must_use]
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("find a free port")
}

/// The first of `names` found as a file on `PATH` or in `/usr/bin`, `/usr/sbin`,
/// `/usr/local/sbin` (server binaries live in `sbin`, which is often not on `PATH`).
#[must_use]
pub fn which(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    dirs.extend(["/usr/bin", "/usr/sbin", "/usr/local/sbin"].map(PathBuf::from));
    names
        .iter()
        .flat_map(|name| dirs.iter().map(move |d| d.join(name)))
        .find(|p| p.is_file())
}
