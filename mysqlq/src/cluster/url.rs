//! Database URLs listing several hosts: `mysql://user:pw@host1:3306,host2:3306/db?…`.
//!
//! sqlx's `MySqlConnectOptions` holds one host, and its URL parser refuses a host list. The
//! list is cut out here; the URL with the first host in its place is parsed by sqlx (so user,
//! password, database and every query parameter mean exactly what they mean to sqlx), and each
//! host gets a copy of those options with its own host and port.

use std::str::FromStr;

use sqlx::mysql::MySqlConnectOptions;

use crate::Error;

/// The default MySQL port, for hosts written without one.
const DEFAULT_PORT: u16 = 3306;

/// One host of a URL: its name and port as written, and the connect options to reach it.
#[derive(Clone)]
pub(crate) struct Host {
    pub(crate) name: String,
    pub(crate) port: u16,
    pub(crate) options: MySqlConnectOptions,
}

impl Host {
    /// `host:port`, with IPv6 addresses in brackets.
    pub(crate) fn label(&self) -> String {
        if self.name.contains(':') {
            format!("[{}]:{}", self.name, self.port)
        } else {
            format!("{}:{}", self.name, self.port)
        }
    }
}

fn invalid(reason: impl Into<String>) -> Error {
    Error::invalid("database URL", reason)
}

/// A URL cut into its parts: the user information, the host list, and what follows the hosts
/// (`/database?parameters`).
#[derive(Clone)]
pub(crate) struct Parsed {
    userinfo: String,
    list: Vec<(String, u16)>,
    tail: String,
}

impl Parsed {
    /// Cuts `url`. Messages never contain the URL (it may hold a password).
    pub(crate) fn new(url: &str) -> Result<Self, Error> {
        let url = url.trim();
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(invalid(
                "not a URL; write it as mysql://user:password@host:3306/database",
            ));
        };
        if !matches!(scheme.to_ascii_lowercase().as_str(), "mysql" | "mariadb") {
            return Err(invalid(format!(
                "scheme `{scheme}` is not mysql://; write it as mysql://user:password@host:3306/database"
            )));
        }
        // The user information runs to the last `@` (a password may hold `/`, `?`, `#`, `@`).
        let (userinfo, after) = match rest.rsplit_once('@') {
            Some((u, a)) => (format!("{u}@"), a),
            None => (String::new(), rest),
        };
        let end = after.find(['/', '?', '#']).unwrap_or(after.len());
        let (authority, tail) = after.split_at(end);
        let mut list = Vec::new();
        for entry in authority.split(',') {
            let entry = entry.trim();
            if entry.is_empty() {
                if authority.contains(',') {
                    return Err(invalid(
                        "an empty host in the host list; write host1:3306,host2:3306",
                    ));
                }
                continue;
            }
            list.push(split_host_port(entry)?);
        }
        Ok(Self {
            userinfo,
            list,
            tail: tail.to_owned(),
        })
    }

    /// The same URL without its database (the server itself), parameters kept.
    pub(crate) fn without_database(&self) -> Self {
        let query = self.tail.find('?').map_or("", |i| &self.tail[i..]);
        Self {
            tail: query.to_owned(),
            ..self.clone()
        }
    }

    /// One entry per host (one for a URL without a host: sqlx's default, `localhost`), each
    /// with the URL's user, password, database and parameters.
    pub(crate) fn hosts(&self) -> Result<Vec<Host>, Error> {
        let first = self
            .list
            .first()
            .map_or_else(String::new, |(h, p)| host_port(h, *p));
        let base = MySqlConnectOptions::from_str(&format!(
            "mysql://{}{first}{}",
            self.userinfo, self.tail
        ))
        .map_err(|e| invalid(crate::error_chain(&e)))?;
        if self.list.is_empty() {
            return Ok(vec![Host {
                name: base.get_host().to_owned(),
                port: base.get_port(),
                options: base,
            }]);
        }
        Ok(self
            .list
            .iter()
            .map(|(name, port)| Host {
                options: base.clone().host(name).port(*port),
                name: name.clone(),
                port: *port,
            })
            .collect())
    }
}

/// Splits `url` into its hosts (see [`Parsed::hosts`]).
#[cfg(test)]
fn parse_hosts(url: &str) -> Result<Vec<Host>, Error> {
    Parsed::new(url)?.hosts()
}

fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`.
fn split_host_port(entry: &str) -> Result<(String, u16), Error> {
    let (host, port) = if let Some(v6) = entry.strip_prefix('[') {
        let Some((host, rest)) = v6.split_once(']') else {
            return Err(invalid(format!(
                "`{entry}`: an IPv6 address without its `]`"
            )));
        };
        match rest.strip_prefix(':') {
            Some(port) => (host, Some(port)),
            None if rest.is_empty() => (host, None),
            None => return Err(invalid(format!("`{entry}`: text after the `]`"))),
        }
    } else {
        match entry.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (entry, None),
        }
    };
    if host.is_empty() {
        return Err(invalid(format!("`{entry}`: no host name")));
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => p.parse::<u16>().ok().filter(|&p| p > 0).ok_or_else(|| {
            invalid(format!(
                "`{entry}`: port `{p}` is not a number from 1 to 65535"
            ))
        })?,
    };
    Ok((host.to_owned(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(url: &str) -> Vec<String> {
        parse_hosts(url).unwrap().iter().map(Host::label).collect()
    }

    #[test]
    fn one_host_or_several() {
        assert_eq!(
            labels("mysql://root@127.0.0.1:3306/app"),
            ["127.0.0.1:3306"]
        );
        assert_eq!(labels("mysql://root@db/app"), ["db:3306"]);
        assert_eq!(
            labels("mysql://u:p@h1:3306,h2:3307, h3 /app?ssl-mode=disabled"),
            ["h1:3306", "h2:3307", "h3:3306"]
        );
        assert_eq!(
            labels("mariadb://[::1]:3310,[fe80::2]/x"),
            ["[::1]:3310", "[fe80::2]:3306"]
        );
        assert_eq!(labels("mysql://h1,h2"), ["h1:3306", "h2:3306"]);
    }

    #[test]
    fn every_host_shares_user_password_database_and_parameters() {
        let hosts =
            parse_hosts("mysql://app:p%40ss,w@rd@h1:3306,h2:4406/shop?charset=utf8mb4").unwrap();
        assert_eq!(hosts.len(), 2);
        for h in &hosts {
            assert_eq!(h.options.get_username(), "app");
            assert_eq!(h.options.get_database(), Some("shop"));
            assert_eq!(h.options.get_charset(), "utf8mb4");
        }
        assert_eq!(hosts[1].options.get_host(), "h2");
        assert_eq!(hosts[1].options.get_port(), 4406);
    }

    #[test]
    fn the_server_part_drops_the_database_and_keeps_the_parameters() {
        let p = Parsed::new("mysql://u:pw@h1,h2:3307/shop?charset=utf8mb4").unwrap();
        let hosts = p.without_database().hosts().unwrap();
        assert_eq!(hosts.len(), 2);
        assert!(hosts.iter().all(|h| h.options.get_database().is_none()));
        assert_eq!(hosts[0].options.get_charset(), "utf8mb4");
        assert_eq!(hosts[1].options.get_port(), 3307);
    }

    #[test]
    fn bad_urls_say_what_is_wrong_without_the_password() {
        for (url, says) in [
            ("postgres://u:secret@h/db", "scheme"),
            ("h1,h2/db", "not a URL"),
            ("mysql://u:secret@h1,,h2/db", "empty host"),
            ("mysql://u:secret@h1:33o6,h2/db", "port `33o6`"),
            ("mysql://u:secret@h1:0/db", "port `0`"),
            ("mysql://u:secret@[::1/db", "IPv6"),
            ("mysql://u:secret@:3306,h2/db", "no host name"),
        ] {
            let e = parse_hosts(url).err().unwrap().to_string();
            assert!(e.contains(says), "{url}: {e}");
            assert!(!e.contains("secret"), "{url}: {e}");
        }
    }
}
