//! Making a server connection look like the client's own: the startup parameters that
//! shape a pool (and so are part of its key), the reported parameters set per client,
//! and the ledger's SETs replayed when a client gets a connection another client used.

use crate::backend::pg::{PER_CLIENT_PARAMS as SETTABLE, ServerConn};
use crate::error::{Error, Kind, Side};
use crate::session::Ledger;
use std::collections::BTreeMap;

fn settable(name: &str) -> Option<&'static str> {
    SETTABLE
        .iter()
        .copied()
        .find(|s| s.eq_ignore_ascii_case(name))
}

/// Startup parameters that shape a connection for good (everything but the user, the
/// database and the per-client settable ones): connections differ by them.
pub fn shaping_params(params: &[(String, String)]) -> Vec<(String, String)> {
    let mut v: Vec<_> = params
        .iter()
        .filter(|(k, _)| k != "user" && k != "database" && settable(k).is_none())
        .cloned()
        .collect();
    v.sort();
    v
}

/// The startup parameters Sluice's own logins to a server send for a pool: the
/// client's, as `server_user`, without `application_name`, which names one client
/// (set per client when it gets a connection; in the startup packet it would be the
/// default every later client of the connection is reset to, and is told at login).
pub fn opener_params(params: &[(String, String)], server_user: &str) -> Vec<(String, String)> {
    params
        .iter()
        .filter(|(k, _)| !k.eq_ignore_ascii_case("application_name"))
        .map(|(k, v)| match k.as_str() {
            "user" => (k.clone(), server_user.to_owned()),
            _ => (k.clone(), v.clone()),
        })
        .collect()
}

pub fn quote_literal(v: &str) -> String {
    format!("'{}'", v.replace('\'', "''"))
}

fn quote_ident(name: &str) -> String {
    if name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.')
    {
        name.to_owned()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

/// What a client logging in without a server connection is told: the pool's login
/// parameters with the client's own settable startup parameters over them.
pub fn client_view(
    welcome: &BTreeMap<String, String>,
    params: &[(String, String)],
) -> BTreeMap<String, String> {
    let mut view = welcome.clone();
    for (k, v) in params {
        if let Some(name) = settable(k) {
            view.insert(name.to_owned(), v.clone());
        }
    }
    view
}

/// Applies the client's settable startup parameters on a connection from the pool.
pub async fn apply_startup_params(
    conn: &mut ServerConn,
    params: &[(String, String)],
) -> Result<(), Error> {
    let mut sql = String::new();
    for (k, v) in params {
        let Some(name) = settable(k) else { continue };
        if conn
            .reported
            .get(name)
            .is_none_or(|cur| !cur.eq_ignore_ascii_case(v))
        {
            sql.push_str(&format!("SET {name} = {};", quote_literal(v)));
        }
    }
    if sql.is_empty() {
        return Ok(());
    }
    match conn.run(&[&sql]).await? {
        None => Ok(()),
        Some(msg) => Err(Error::new(Kind::Protocol, Side::Client, msg).with_sqlstate("22023")),
    }
}

/// The statements that bring `conn` to the client's session state, if any differ.
pub fn replay_sql(
    conn: &mut ServerConn,
    ledger: &Ledger,
    client_params: &BTreeMap<String, String>,
    client_fp: u64,
) -> Option<String> {
    // The common case: the connection already matches (same SETs, same parameters).
    if conn.applied_sets == ledger.sets && conn.reported_fingerprint() == client_fp {
        return None;
    }
    // Past the SETs the connection and the client have in common, the connection's own
    // are reset and the client's replayed, in the order the client made them.
    let common = conn.applied_sets.common_prefix(&ledger.sets);
    let mut sql = String::new();
    let mut reset = Vec::new();
    for (name, _) in conn.applied_sets.from(common) {
        if !ledger.sets.contains_key(name) {
            sql.push_str(&format!("RESET {};", quote_ident(name)));
            reset.push(name.as_str());
        }
    }
    for name in SETTABLE {
        let want = client_params.get(name);
        let touched = reset.iter().any(|r| r.eq_ignore_ascii_case(name));
        if let Some(v) = want.filter(|v| touched || conn.reported.get(name) != Some(*v)) {
            sql.push_str(&format!("SET {name} = {};", quote_literal(v)));
        }
    }
    for (_, stmt) in ledger.sets.from(common) {
        // The client's statement may end in a -- comment: end it with a newline.
        sql.push_str(stmt);
        sql.push_str("\n;");
    }
    (!sql.is_empty()).then_some(sql)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shaping_params_ignore_per_client_ones() {
        let p = vec![
            ("user".to_string(), "u".to_string()),
            ("application_name".into(), "x".into()),
            ("options".into(), "-c work_mem=1MB".into()),
            ("datestyle".into(), "ISO".into()),
        ];
        assert_eq!(
            shaping_params(&p),
            vec![("options".to_string(), "-c work_mem=1MB".to_string())]
        );
        assert_eq!(
            opener_params(&p, "server"),
            vec![
                ("user".to_string(), "server".to_string()),
                ("options".into(), "-c work_mem=1MB".into()),
                ("datestyle".into(), "ISO".into()),
            ]
        );
        assert_eq!(quote_literal("it's"), "'it''s'");
        assert_eq!(quote_ident("Work"), "\"Work\"");
        assert_eq!(quote_ident("my.custom"), "my.custom");
    }
}
