//! One error type for the proxy: what went wrong, on which side, and whether the
//! request may be retried elsewhere. Frontends turn it into the client's own protocol.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Server,
    Internal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The client broke the protocol (malformed, oversized, out of order).
    Protocol,
    /// Authentication failed.
    Auth,
    /// No server connection could be had in time.
    PoolTimeout,
    /// A server could not be reached or went away.
    ServerGone,
    /// The server said something Sluice cannot follow: its connection is closed.
    Desync,
    /// Not supported by Sluice.
    Unsupported,
    /// Refused by a rule or the firewall.
    Denied,
    /// Sluice is shutting down.
    Shutdown,
    Io,
}

#[derive(Debug, Clone)]
pub struct Error {
    pub kind: Kind,
    pub side: Side,
    /// Nothing of the request reached a server, so it may be sent elsewhere.
    pub retry_safe: bool,
    pub message: String,
    /// A more precise SQLSTATE than the kind's default.
    pub sqlstate: Option<&'static str>,
}

impl Error {
    pub fn new(kind: Kind, side: Side, message: impl Into<String>) -> Self {
        let retry_safe = matches!(kind, Kind::PoolTimeout);
        Error {
            kind,
            side,
            retry_safe,
            message: message.into(),
            sqlstate: None,
        }
    }

    pub fn protocol(message: impl Into<String>) -> Self {
        Error::new(Kind::Protocol, Side::Client, message)
    }

    pub fn server_gone(message: impl Into<String>) -> Self {
        Error::new(Kind::ServerGone, Side::Server, message)
    }

    pub fn with_sqlstate(mut self, code: &'static str) -> Self {
        self.sqlstate = Some(code);
        self
    }

    /// The SQLSTATE a PostgreSQL client should see.
    pub fn sqlstate(&self) -> &'static str {
        if let Some(c) = self.sqlstate {
            return c;
        }
        match self.kind {
            Kind::Protocol => "08P01",
            Kind::Auth => "28P01",
            Kind::PoolTimeout => "53300",
            Kind::ServerGone => "08006",
            Kind::Desync => "08P01",
            Kind::Unsupported => "0A000",
            Kind::Denied => "42501",
            Kind::Shutdown => "57P01",
            Kind::Io => "08006",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::new(Kind::Io, Side::Internal, e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, Error>;
