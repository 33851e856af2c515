//! One health check of one server, on a connection the checker keeps between checks:
//! is it up, is it a primary or a replica, how far behind is it, where is it.

use super::Role;
use crate::backend::{Credentials, Target, mysql, pg};
use crate::error::{Error, Result};
use sluice_config::Protocol;
use std::time::Duration;

/// What a good check found.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Found {
    pub role: Role,
    /// The replica's delay when the server reports it (MySQL); PostgreSQL's comes
    /// from `received` and `position` over time (see health.rs).
    pub lag: Option<Duration>,
    pub position: Option<u64>,
    /// A replica's received position.
    pub received: Option<u64>,
    /// A PostgreSQL replica has a WAL receiver streaming from a primary (false: none
    /// running, or it is waiting for or restarting its connection).
    pub streaming: bool,
}

/// The checker's own connection to a server.
pub(super) enum Conn {
    Pg(pg::ServerConn),
    My(mysql::ServerConn),
}

/// PostgreSQL: recovery state, the LSN written (primary) or replayed (replica), the
/// LSN a replica has received, as numbers, and the state of its WAL receiver (`none`
/// when it has none running; `hidden` when the checker may not see it).
const PG_CHECK: &str = "select pg_is_in_recovery()::text || ' ' || \
    (coalesce(case when pg_is_in_recovery() then pg_last_wal_replay_lsn() \
    else pg_current_wal_lsn() end, '0/0') - '0/0'::pg_lsn)::text || ' ' || \
    (coalesce(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn(), '0/0') - '0/0'::pg_lsn)::text \
    || ' ' || coalesce((select coalesce(status, 'hidden') from pg_stat_wal_receiver limit 1), 'none')";

/// Checks the server, logging in first when there is no connection yet. On an error
/// the connection is dropped, so the next check logs in afresh.
pub(super) async fn check(
    protocol: Protocol,
    target: &Target,
    creds: &Credentials,
    conn: &mut Option<Conn>,
) -> Result<Found> {
    if conn.is_none() {
        *conn = Some(login(protocol, target, creds).await?);
    }
    let found = match conn.as_mut() {
        Some(Conn::Pg(c)) => pg_check(c).await,
        Some(Conn::My(c)) => my_check(c).await,
        None => Err(Error::server_gone("no health check connection")),
    };
    if found.is_err() {
        *conn = None;
    }
    found
}

async fn login(protocol: Protocol, target: &Target, creds: &Credentials) -> Result<Conn> {
    let refused = |e: crate::backend::LoginError| match e {
        crate::backend::LoginError::Proxy(e) => e,
        crate::backend::LoginError::Server(_) => Error::server_gone(format!(
            "the server refused the health check login as \"{}\"",
            creds.user
        )),
    };
    match protocol {
        Protocol::Postgres => {
            let params = vec![
                ("user".to_owned(), creds.user.clone()),
                ("database".to_owned(), "postgres".to_owned()),
                (
                    "application_name".to_owned(),
                    "sluice health check".to_owned(),
                ),
            ];
            let c = pg::login(target, &params, creds).await.map_err(refused)?;
            Ok(Conn::Pg(c))
        }
        Protocol::Mysql => {
            let op = mysql::Opener {
                target: target.clone(),
                creds: creds.clone(),
                database: String::new(),
                caps: 0,
                charset: 0,
            };
            let (c, _) = mysql::login(&op).await.map_err(refused)?;
            Ok(Conn::My(c))
        }
    }
}

async fn pg_check(c: &mut pg::ServerConn) -> Result<Found> {
    let v = c
        .value(PG_CHECK)
        .await?
        .ok_or_else(|| Error::server_gone("the health check query failed"))?;
    parse_pg(&v).ok_or_else(|| Error::server_gone(format!("unexpected health check answer {v:?}")))
}

fn parse_pg(v: &str) -> Option<Found> {
    let mut it = v.split(' ');
    let recovery = it.next()? == "true";
    let position = it.next()?.parse::<f64>().ok().map(|p| p as u64);
    let received = it.next()?.parse::<f64>().ok().map(|p| p as u64);
    let streaming = matches!(it.next(), Some("streaming" | "hidden") | None);
    Some(Found {
        role: if recovery {
            Role::Replica
        } else {
            Role::Primary
        },
        lag: None,
        position,
        received: received.filter(|_| recovery),
        streaming: streaming || !recovery,
    })
}

async fn my_check(c: &mut mysql::ServerConn) -> Result<Found> {
    let rows = c
        .status_rows(b"SELECT @@read_only, @@gtid_binlog_pos, @@gtid_slave_pos")
        .await?;
    let field = |i: usize| {
        rows.first()
            .and_then(|r| r.get(i))
            .and_then(|v| v.as_deref())
    };
    let read_only = field(0).is_some_and(|v| v != b"0");
    if !read_only {
        return Ok(Found {
            role: Role::Primary,
            lag: None,
            position: field(1).and_then(gtid_seq),
            received: None,
            streaming: true,
        });
    }
    let position = field(2).and_then(gtid_seq);
    let (lag, streaming) = match c.named_rows(b"SHOW ALL SLAVES STATUS").await {
        Ok((names, rows)) => replica_lag(&names, &rows),
        Err(_) => (None, true),
    };
    Ok(Found {
        role: Role::Replica,
        lag,
        position,
        received: None,
        streaming,
    })
}

/// A MariaDB replica's delay from its replication connections (`SHOW ALL SLAVES
/// STATUS`): the largest `Seconds_Behind_Master`, and whether it receives from its
/// primary. A connection whose I/O thread is not running (reconnecting to a primary
/// gone in a failover, say) while its SQL thread has applied what it received is cut
/// off: not streaming, so its delay grows with the clock (health.rs), as a PostgreSQL
/// replica's whose WAL receiver stopped. Any other unknown delay (NULL: the SQL thread
/// stopped) counts as too far behind at once.
fn replica_lag(names: &[String], rows: &[Vec<Option<Vec<u8>>>]) -> (Option<Duration>, bool) {
    fn col<'a>(names: &[String], r: &'a [Option<Vec<u8>>], name: &str) -> Option<&'a str> {
        let i = names.iter().position(|n| n == name)?;
        r.get(i)?
            .as_deref()
            .and_then(|v| std::str::from_utf8(v).ok())
    }
    let mut worst = Duration::ZERO;
    let mut streaming = true;
    for r in rows {
        let secs = col(names, r, "Seconds_Behind_Master").and_then(|v| v.parse::<u64>().ok());
        match secs {
            Some(s) => worst = worst.max(Duration::from_secs(s)),
            None if col(names, r, "Slave_SQL_Running") == Some("Yes")
                && col(names, r, "Slave_IO_Running") != Some("Yes") =>
            {
                streaming = false
            }
            None => return (Some(Duration::MAX), true),
        }
    }
    (Some(worst), streaming)
}

/// A MariaDB GTID position as one number: the sequence number of its only replication
/// domain (`0-1-123` is 123; empty, nothing replicated yet, is 0). Several domains have
/// no single order: None, and read-your-writes then reads from the primary.
fn gtid_seq(v: &[u8]) -> Option<u64> {
    let v = std::str::from_utf8(v).ok()?.trim();
    if v.is_empty() {
        return Some(0);
    }
    if v.contains(',') {
        return None;
    }
    v.rsplit('-').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mariadb_replica_lag() {
        let names: Vec<String> = [
            "Slave_IO_Running",
            "Slave_SQL_Running",
            "Seconds_Behind_Master",
        ]
        .map(String::from)
        .to_vec();
        let row = |io: &str, sql: &str, secs: Option<&str>| {
            vec![
                Some(io.as_bytes().to_vec()),
                Some(sql.as_bytes().to_vec()),
                secs.map(|s| s.as_bytes().to_vec()),
            ]
        };
        let two = [row("Yes", "Yes", Some("3")), row("Yes", "Yes", Some("7"))];
        assert_eq!(
            replica_lag(&names, &two),
            (Some(Duration::from_secs(7)), true)
        );
        let cut_off = [row("Connecting", "Yes", None)];
        assert_eq!(replica_lag(&names, &cut_off), (Some(Duration::ZERO), false));
        let stopped = [row("Yes", "No", None), row("Yes", "Yes", Some("1"))];
        assert_eq!(replica_lag(&names, &stopped), (Some(Duration::MAX), true));
    }

    #[test]
    fn pg_answers() {
        let p = parse_pg("false 23456 23456").unwrap();
        assert_eq!(
            (p.role, p.position, p.received),
            (Role::Primary, Some(23456), None)
        );
        let r = parse_pg("true 100 250 streaming").unwrap();
        assert!(r.streaming);
        assert!(!parse_pg("true 100 100 none").unwrap().streaming);
        assert!(!parse_pg("true 100 100 waiting").unwrap().streaming);
        assert!(parse_pg("true 100 100 hidden").unwrap().streaming);
        assert!(parse_pg("false 1 1 none").unwrap().streaming);
        assert_eq!(
            (r.role, r.position, r.received),
            (Role::Replica, Some(100), Some(250))
        );
        assert!(parse_pg("nonsense").is_none());
    }

    #[test]
    fn gtid_positions() {
        assert_eq!(gtid_seq(b"0-1-123"), Some(123));
        assert_eq!(gtid_seq(b""), Some(0));
        assert_eq!(gtid_seq(b"0-1-5,1-2-7"), None);
        assert_eq!(gtid_seq(b"junk"), None);
    }
}
