//! Syntax checks for network addresses in the configuration: a server's `host` (a host
//! name or an IP address, no port) and a listener's `address` (`IPv4:port`, `[IPv6]:port` or
//! `hostname:port`). Nothing is resolved here; the listener binds and the backend connects
//! later, but a malformed address is reported at load time with its line.

use std::net::{Ipv6Addr, SocketAddr};

/// A server host: a host name, an IPv4 address or an IPv6 address without brackets.
pub(crate) fn check_host(host: &str) -> Result<(), String> {
    if host.contains(':') {
        if host.parse::<Ipv6Addr>().is_ok() {
            return Ok(());
        }
        return Err(format!(
            "invalid host {host:?}; give a host name or an IP address without a port \
             (IPv6 without brackets) and the port in `port`"
        ));
    }
    if is_host_name(host) {
        Ok(())
    } else {
        Err(format!(
            "invalid host {host:?}; expected a host name or an IP address"
        ))
    }
}

/// A listen address: `IPv4:port`, `[IPv6]:port` or `hostname:port`.
pub(crate) fn check_listen_address(address: &str) -> Result<(), String> {
    if address.parse::<SocketAddr>().is_ok() {
        return Ok(());
    }
    let hint = "expected host:port, e.g. \"127.0.0.1:6432\", \"[::1]:6432\" or \"localhost:6432\"";
    let Some((host, port)) = address.rsplit_once(':') else {
        return Err(format!("invalid address {address:?}: missing port; {hint}"));
    };
    if port.parse::<u16>().is_err() {
        return Err(format!(
            "invalid address {address:?}: bad port {port:?}; {hint}"
        ));
    }
    if host.starts_with('[') {
        return Err(format!(
            "invalid address {address:?}: bad IPv6 address; {hint}"
        ));
    }
    if host.contains(':') {
        return Err(format!(
            "invalid address {address:?}: write an IPv6 address in brackets; {hint}"
        ));
    }
    if !is_host_name(host) {
        return Err(format!(
            "invalid address {address:?}: bad host {host:?}; {hint}"
        ));
    }
    Ok(())
}

/// Dot-separated labels of ASCII letters, digits, `-` and `_`.
fn is_host_name(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses() {
        for ok in [
            "127.0.0.1:6432",
            "0.0.0.0:0",
            "[::1]:6432",
            "[::]:5432",
            "localhost:6432",
            "db-1.example.com:1",
        ] {
            assert!(check_listen_address(ok).is_ok(), "{ok}");
        }
        for bad in [
            "127.0.0.1",
            ":6432",
            "::1:6432",
            "[::1:6432",
            "host:99999",
            "host:",
            "*:6432",
            "a b:1",
            "[x]:1",
        ] {
            assert!(check_listen_address(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn hosts() {
        for ok in ["127.0.0.1", "::1", "db.example", "pg_primary"] {
            assert!(check_host(ok).is_ok(), "{ok}");
        }
        for bad in ["127.0.0.1:5432", "[::1]", "a b", "", "x..y"] {
            assert!(check_host(bad).is_err(), "{bad}");
        }
    }
}
