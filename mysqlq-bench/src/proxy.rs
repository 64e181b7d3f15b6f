//! A tiny counting TCP proxy between a consumer's pool and the server, for the idle
//! measurement: it forwards bytes both ways unchanged and counts the commands the clients send.
//!
//! The server is shared (other sessions, the bench's own bookkeeping), so server-wide counters
//! such as `Questions` cannot say what one consumer sent. In the MySQL protocol every packet
//! starts with a 3-byte length and a 1-byte sequence id; a client packet whose sequence id is 0
//! starts a new command (COM_QUERY, COM_STMT_PREPARE, COM_STMT_EXECUTE, COM_PING, …; its first
//! payload byte says which), while the handshake and authentication packets of a client carry
//! sequence ids 1 and up. Counting client packets with sequence id 0 therefore counts exactly
//! the commands sent. TLS would hide the headers, so the pools using the proxy connect without
//! it (`ssl-mode=DISABLED`), over loopback.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// Commands seen, in total and by command byte.
#[derive(Debug)]
pub(crate) struct Counts {
    total: AtomicU64,
    by_command: [AtomicU64; 256],
}

impl Default for Counts {
    fn default() -> Self {
        Self {
            total: AtomicU64::new(0),
            by_command: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl Counts {
    fn add(&self, command: u8) {
        self.total.fetch_add(1, Ordering::Relaxed);
        self.by_command[usize::from(command)].fetch_add(1, Ordering::Relaxed);
    }

    /// Commands per command byte, for those seen at least once.
    pub(crate) fn snapshot(&self) -> (u64, Vec<(u8, u64)>) {
        let by = (0..=255u8)
            .filter_map(|c| {
                let n = self.by_command[usize::from(c)].load(Ordering::Relaxed);
                (n > 0).then_some((c, n))
            })
            .collect();
        (self.total.load(Ordering::Relaxed), by)
    }
}

/// The name of a command byte (`COM_QUERY`, …), or its number.
pub(crate) fn command_name(c: u8) -> String {
    match c {
        0x01 => "COM_QUIT".to_owned(),
        0x02 => "COM_INIT_DB".to_owned(),
        0x03 => "COM_QUERY".to_owned(),
        0x0e => "COM_PING".to_owned(),
        0x11 => "COM_CHANGE_USER".to_owned(),
        0x16 => "COM_STMT_PREPARE".to_owned(),
        0x17 => "COM_STMT_EXECUTE".to_owned(),
        0x19 => "COM_STMT_CLOSE".to_owned(),
        0x1a => "COM_STMT_RESET".to_owned(),
        0x1f => "COM_RESET_CONNECTION".to_owned(),
        c => format!("command 0x{c:02x}"),
    }
}

/// Splits a client→server byte stream into packets and counts those that start a command.
#[derive(Debug, Default)]
struct Parser {
    header: [u8; 4],
    have: usize,
    /// Payload bytes of the current packet still to pass.
    remaining: usize,
    /// The current packet starts a command whose first payload byte is still to come.
    command_next: bool,
}

impl Parser {
    fn feed(&mut self, mut buf: &[u8], counts: &Counts) {
        while !buf.is_empty() {
            if self.remaining == 0 {
                let take = (4 - self.have).min(buf.len());
                self.header[self.have..self.have + take].copy_from_slice(&buf[..take]);
                self.have += take;
                buf = &buf[take..];
                if self.have == 4 {
                    self.have = 0;
                    let len = usize::from(self.header[0])
                        | usize::from(self.header[1]) << 8
                        | usize::from(self.header[2]) << 16;
                    let seq = self.header[3];
                    self.remaining = len;
                    self.command_next = seq == 0 && len > 0;
                }
            } else {
                if self.command_next {
                    counts.add(buf[0]);
                    self.command_next = false;
                }
                let take = self.remaining.min(buf.len());
                self.remaining -= take;
                buf = &buf[take..];
            }
        }
    }
}

/// A running proxy on `127.0.0.1:<port>`; stopped (with every connection) when dropped.
pub(crate) struct Proxy {
    addr: SocketAddr,
    counts: Arc<Counts>,
    task: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards every connection to `host:port`.
    pub(crate) async fn start(host: &str, port: u16) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let counts = Arc::new(Counts::default());
        let upstream = (host.to_owned(), port);
        let c = counts.clone();
        let task = tokio::spawn(async move {
            // Dropped with this task, aborting every connection.
            let mut conns = JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let (upstream, counts) = (upstream.clone(), c.clone());
                conns.spawn(async move {
                    if let Ok(server) = TcpStream::connect((upstream.0.as_str(), upstream.1)).await
                    {
                        forward(client, server, &counts).await;
                    }
                });
                // Reap finished connections.
                while conns.try_join_next().is_some() {}
            }
        });
        Ok(Self { addr, counts, task })
    }

    pub(crate) fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Commands seen so far: the total and per command byte.
    pub(crate) fn counts(&self) -> (u64, Vec<(u8, u64)>) {
        self.counts.snapshot()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies both ways until either side closes, counting the client's commands.
async fn forward(client: TcpStream, server: TcpStream, counts: &Counts) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_rd, mut client_wr) = client.into_split();
    let (mut server_rd, mut server_wr) = server.into_split();
    let up = async {
        let mut parser = Parser::default();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match client_rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    parser.feed(&buf[..n], counts);
                    if server_wr.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = server_wr.shutdown().await;
    };
    let down = async {
        let _ = tokio::io::copy(&mut server_rd, &mut client_wr).await;
        let _ = client_wr.shutdown().await;
    };
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(seq: u8, payload: &[u8]) -> Vec<u8> {
        let len = payload.len();
        let byte = |shift: usize| u8::try_from((len >> shift) & 0xff).unwrap();
        let mut v = vec![byte(0), byte(8), byte(16), seq];
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn counts_commands_not_handshake_packets_across_any_split() {
        let mut stream = Vec::new();
        stream.extend(packet(1, b"handshake response"));
        stream.extend(packet(3, b"auth switch response"));
        stream.extend(packet(0, b"\x03SELECT 1"));
        stream.extend(packet(0, b"\x16SELECT ?"));
        stream.extend(packet(0, b"\x17\x01\x00\x00\x00"));
        stream.extend(packet(0, b"\x0e"));
        for chunk in [1, 2, 3, 5, 7, stream.len()] {
            let counts = Counts::default();
            let mut p = Parser::default();
            for part in stream.chunks(chunk) {
                p.feed(part, &counts);
            }
            let (total, by) = counts.snapshot();
            assert_eq!(total, 4, "chunk {chunk}");
            assert_eq!(by, vec![(0x03, 1), (0x0e, 1), (0x16, 1), (0x17, 1)]);
        }
        assert_eq!(command_name(0x17), "COM_STMT_EXECUTE");
    }
}
