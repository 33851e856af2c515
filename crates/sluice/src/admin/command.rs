//! Reading a console command: `SHOW <what> [ORDER BY col [ASC|DESC], ...] [LIMIT n]`,
//! and the actions. Keywords are case-insensitive; one trailing `;` is allowed. Bad
//! input is answered with an error that names the command list.

/// What the console can show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Show {
    Servers,
    Pools,
    Clients,
    Listeners,
    Stats,
    Pins,
    Digests,
    Rules,
    Firewall,
    Config,
    Version,
}

impl Show {
    const ALL: [(&'static str, Show); 11] = [
        ("SERVERS", Show::Servers),
        ("POOLS", Show::Pools),
        ("CLIENTS", Show::Clients),
        ("LISTENERS", Show::Listeners),
        ("STATS", Show::Stats),
        ("PINS", Show::Pins),
        ("DIGESTS", Show::Digests),
        ("RULES", Show::Rules),
        ("FIREWALL", Show::Firewall),
        ("CONFIG", Show::Config),
        ("VERSION", Show::Version),
    ];
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Show {
        what: Show,
        order: Vec<(String, bool)>,
        limit: Option<usize>,
    },
    Reload,
    /// `PAUSE [cluster]` (None: every cluster).
    Pause(Option<String>),
    Resume(Option<String>),
    /// `SET SERVER name OFFLINE | ONLINE` (true: offline).
    SetServer(String, bool),
    KillClient(u64),
    ResetDigests,
    /// `SHUTDOWN [WAIT]` (true: wait for transactions, up to `shutdown_timeout`).
    Shutdown(bool),
    /// `SELECT @@version_comment ...`, `SELECT @@max_allowed_packet, @@wait_timeout`
    /// and the like, which MySQL clients and drivers send on their own when they
    /// connect: answered with one row.
    Variables(Vec<String>),
}

/// The command list, as errors give it.
pub const COMMANDS: &str = "SHOW SERVERS | POOLS | CLIENTS | LISTENERS | STATS | PINS | DIGESTS | RULES | FIREWALL | CONFIG | VERSION [ORDER BY column [DESC]] [LIMIT n]; RELOAD; PAUSE [cluster]; RESUME [cluster]; SET SERVER name OFFLINE | ONLINE; KILL CLIENT id; RESET DIGESTS; SHUTDOWN [WAIT]";

fn bad(what: impl std::fmt::Display) -> String {
    format!("{what}; commands: {COMMANDS}")
}

/// Splits into words; a quoted word ('x', "x", `x`) keeps its spaces.
fn words(sql: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut chars = sql.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c == ',' {
            chars.next();
            out.push(",".to_string());
        } else if matches!(c, '\'' | '"' | '`') {
            chars.next();
            let mut w = String::new();
            loop {
                match chars.next() {
                    Some(q) if q == c => break,
                    Some(ch) => w.push(ch),
                    None => return Err(bad("unterminated quote")),
                }
            }
            out.push(w);
        } else {
            let mut w = String::new();
            while let Some(&ch) = chars.peek() {
                if ch.is_whitespace() || ch == ',' {
                    break;
                }
                w.push(ch);
                chars.next();
            }
            out.push(w);
        }
    }
    Ok(out)
}

pub fn parse(sql: &str) -> Result<Command, String> {
    let sql = sql.trim();
    let sql = sql.strip_suffix(';').unwrap_or(sql).trim_end();
    if sql.contains(';') {
        return Err(bad("one command at a time"));
    }
    let lower = sql.to_ascii_lowercase();
    if lower.starts_with("select") && lower.contains("@@") {
        let vars = lower
            .split("@@")
            .skip(1)
            .map(|v| {
                v.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
                    .next()
                    .unwrap_or_default()
                    .trim_start_matches("session.")
                    .trim_start_matches("global.")
                    .to_string()
            })
            .collect();
        return Ok(Command::Variables(vars));
    }
    let w = words(sql)?;
    let up: Vec<String> = w.iter().map(|s| s.to_ascii_uppercase()).collect();
    let up: Vec<&str> = up.iter().map(String::as_str).collect();
    let name = |i: usize| w.get(i).cloned();
    match up.as_slice() {
        [] => Err(bad("empty command")),
        ["SHOW", what, rest @ ..] => {
            let what = Show::ALL
                .iter()
                .find(|(n, _)| n == what)
                .map(|(_, s)| *s)
                .ok_or_else(|| bad(format!("unknown SHOW {}", w[1])))?;
            let (order, limit) = order_limit(rest, &w[2..])?;
            Ok(Command::Show { what, order, limit })
        }
        ["RELOAD"] => Ok(Command::Reload),
        ["PAUSE"] => Ok(Command::Pause(None)),
        ["PAUSE", _] => Ok(Command::Pause(name(1))),
        ["RESUME"] => Ok(Command::Resume(None)),
        ["RESUME", _] => Ok(Command::Resume(name(1))),
        ["SET", "SERVER", _, "OFFLINE"] => Ok(Command::SetServer(w[2].clone(), true)),
        ["SET", "SERVER", _, "ONLINE"] => Ok(Command::SetServer(w[2].clone(), false)),
        ["KILL", "CLIENT", id] => id
            .parse()
            .map(Command::KillClient)
            .map_err(|_| bad(format!("KILL CLIENT: {id:?} is not a client id"))),
        ["RESET", "DIGESTS"] => Ok(Command::ResetDigests),
        ["SHUTDOWN"] => Ok(Command::Shutdown(false)),
        ["SHUTDOWN", "WAIT"] => Ok(Command::Shutdown(true)),
        [first, ..] => {
            let known = [
                "SHOW", "RELOAD", "PAUSE", "RESUME", "SET", "KILL", "RESET", "SHUTDOWN",
            ];
            if known.contains(first) {
                Err(bad(format!("bad arguments to {first}")))
            } else {
                Err(bad(format!("unknown command {:?}", w[0])))
            }
        }
    }
}

type Order = (Vec<(String, bool)>, Option<usize>);

/// `[ORDER BY col [ASC|DESC] [, ...]] [LIMIT n]` after a SHOW.
fn order_limit(up: &[&str], w: &[String]) -> Result<Order, String> {
    let mut order = Vec::new();
    let mut limit = None;
    let mut i = 0;
    if up.len() >= 2 && up[0] == "ORDER" && up[1] == "BY" {
        i = 2;
        loop {
            let Some(col) = w.get(i) else {
                return Err(bad("ORDER BY needs a column"));
            };
            i += 1;
            let desc = match up.get(i) {
                Some(&"DESC") => {
                    i += 1;
                    true
                }
                Some(&"ASC") => {
                    i += 1;
                    false
                }
                _ => false,
            };
            order.push((col.clone(), desc));
            if up.get(i) == Some(&",") {
                i += 1;
                continue;
            }
            break;
        }
    }
    if up.get(i) == Some(&"LIMIT") {
        let n = w.get(i + 1).ok_or_else(|| bad("LIMIT needs a number"))?;
        limit = Some(
            n.parse()
                .map_err(|_| bad(format!("LIMIT: {n:?} is not a number")))?,
        );
        i += 2;
    }
    match w.get(i) {
        None => Ok((order, limit)),
        Some(extra) => Err(bad(format!("unexpected {extra:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands() {
        assert_eq!(
            parse("show digests order by total_time desc limit 20;"),
            Ok(Command::Show {
                what: Show::Digests,
                order: vec![("total_time".into(), true)],
                limit: Some(20),
            })
        );
        assert_eq!(
            parse("SHOW POOLS ORDER BY cluster, in_use DESC"),
            Ok(Command::Show {
                what: Show::Pools,
                order: vec![("cluster".into(), false), ("in_use".into(), true)],
                limit: None,
            })
        );
        assert_eq!(
            parse("set server pg2 offline"),
            Ok(Command::SetServer("pg2".into(), true))
        );
        assert_eq!(parse("PAUSE main"), Ok(Command::Pause(Some("main".into()))));
        assert_eq!(parse("kill client 7"), Ok(Command::KillClient(7)));
        assert_eq!(parse("SHUTDOWN WAIT"), Ok(Command::Shutdown(true)));
        assert_eq!(
            parse("select @@version_comment limit 1"),
            Ok(Command::Variables(vec!["version_comment".into()]))
        );
        for bad in [
            "",
            "SHOW",
            "SHOW NOTHING",
            "KILL CLIENT x",
            "DROP TABLE t",
            "SHOW POOLS LIMIT",
            "SHOW POOLS; SHOW POOLS",
            "SET SERVER a MAYBE",
        ] {
            let e = parse(bad).expect_err(bad);
            assert!(e.contains("commands: SHOW SERVERS"), "{bad}: {e}");
        }
    }
}
