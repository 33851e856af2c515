//! KILL for MySQL clients: every client is known by the connection id Sluice gave it.
//! `KILL [QUERY | CONNECTION] id` and COM_PROCESS_KILL naming a Sluice client are
//! rewritten to the server connection that client is using at that moment (and to
//! nothing else); a client holding none has no query to kill, and KILL CONNECTION then
//! closes its socket. Ids Sluice does not know go to the server unchanged.

use parking_lot::Mutex;
use sluice_wire_mysql::{consts, packet};
use std::collections::HashMap;
use std::sync::Arc;

/// A statement on a shared connection: the connection and the statement's answer.
pub type Muxed = (Arc<crate::mux::Mux>, Arc<crate::mux::Answer>);

/// One client, as KILL sees it (64 bytes with its `Arc`: every MySQL client has one).
pub struct Registered {
    /// Its line in the client book: its socket, to shut it down when the client is
    /// killed while idle.
    info: Arc<crate::session::clients::ClientInfo>,
    state: Mutex<State>,
}

/// What KILL reads and sets of a client, under one lock.
struct State {
    /// The user the client is logged in as (COM_CHANGE_USER changes it), as a hash
    /// keyed by the registry's secret ([`Clients::user_hash`]).
    user: u64,
    /// The client's statement waiting on a shared connection, if any.
    muxed: Option<Muxed>,
    /// The server connection (thread id; 0: none, which MariaDB never gives) the
    /// client holds now.
    server: u32,
    /// KILLs of that connection on their way (the client keeps it until they have
    /// run, so a KILL never reaches a connection another client got meanwhile).
    aimed: u16,
    /// A KILL CONNECTION went to its server connection: when that ends, so does the
    /// session (it does not outlive it).
    killed: bool,
}

pub struct Clients {
    map: Mutex<HashMap<u32, Arc<Registered>>>,
    /// The key of users' hashes: same user or not is all KILL asks of them.
    users: std::collections::hash_map::RandomState,
}

impl Default for Clients {
    fn default() -> Self {
        Clients {
            map: Mutex::default(),
            users: std::collections::hash_map::RandomState::new(),
        }
    }
}

/// Removes the client from the registry when its session ends.
/// (Its id is the one the client book shows as the client's process id.)
pub struct Registration {
    pub clients: Arc<Clients>,
    pub entry: Arc<Registered>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.clients.map.lock().remove(&self.id());
    }
}

impl Registration {
    /// The connection id the client was told.
    pub fn id(&self) -> u32 {
        u32::try_from(self.entry.info.pid).unwrap_or(0)
    }

    pub fn set_server(&self, thread: Option<u32>) {
        self.entry.state.lock().server = thread.unwrap_or(0);
    }

    /// A KILL CONNECTION was aimed at the client's server connection.
    pub fn killed(&self) -> bool {
        self.entry.state.lock().killed
    }

    pub fn set_muxed(&self, m: Option<Muxed>) {
        self.entry.state.lock().muxed = m;
    }

    /// The client is logged in as `user` from now on (COM_CHANGE_USER).
    pub fn set_user(&self, user: &str) {
        self.entry.state.lock().user = self.clients.user_hash(user);
    }

    /// May the client give its server connection back? Not while a KILL aimed at it is
    /// on its way; if it may, KILL sees it hold none from now on.
    pub fn may_release(&self) -> bool {
        let mut st = self.entry.state.lock();
        if st.aimed > 0 {
            return false;
        }
        st.server = 0;
        true
    }
}

impl Clients {
    /// Registers the client of book line `info` (its user and socket) under the
    /// connection id the line shows as its process id.
    pub fn register(
        self: &Arc<Self>,
        info: Arc<crate::session::clients::ClientInfo>,
    ) -> Registration {
        let id = u32::try_from(info.pid).unwrap_or(0);
        let entry = Arc::new(Registered {
            state: Mutex::new(State {
                user: self.user_hash(info.user()),
                muxed: None,
                server: 0,
                aimed: 0,
                killed: false,
            }),
            info,
        });
        self.map.lock().insert(id, entry.clone());
        Registration {
            clients: self.clone(),
            entry,
        }
    }

    pub fn get(&self, id: u32) -> Option<Arc<Registered>> {
        self.map.lock().get(&id).cloned()
    }

    fn user_hash(&self, user: &str) -> u64 {
        use std::hash::BuildHasher;
        self.users.hash_one(user)
    }
}

impl Registered {
    pub fn same_user(&self, other: &Registered) -> bool {
        // (One lock at a time: two clients may KILL each other at once.)
        let mine = self.state.lock().user;
        std::ptr::eq(self, other) || mine == other.state.lock().user
    }

    /// The server connection the client holds now; it keeps it until [`Self::done`].
    /// `connection`: a KILL CONNECTION (the session then ends with that connection).
    pub fn aim(&self, connection: bool) -> Option<u32> {
        let mut st = self.state.lock();
        if st.server == 0 {
            return None;
        }
        st.aimed = st.aimed.saturating_add(1);
        st.killed |= connection;
        Some(st.server)
    }

    /// The client's statement on a shared connection, if it has one.
    pub fn muxed(&self) -> Option<Muxed> {
        self.state.lock().muxed.clone()
    }

    /// A KILL from [`Self::aim`] has run (or will not).
    pub fn done(&self) {
        let mut st = self.state.lock();
        st.aimed = st.aimed.saturating_sub(1);
    }

    /// Ends the client's session by closing its socket (its relay sees it go).
    pub fn close(&self) {
        self.info.close();
    }
}

/// What a KILL statement asks: (kill the connection, not just its query; target id).
/// None for anything else (KILL USER, KILL QUERY ID, not a KILL).
pub fn parse_kill(sql: &[u8]) -> Option<(bool, u32)> {
    let toks: Vec<sluice_sql::Token<'_>> =
        sluice_sql::Tokens::new_in(sql, sluice_sql::Dialect::MySql).collect();
    let mut i = 0;
    let kw = |i: usize, k: &str| toks.get(i).is_some_and(|t| t.is(k));
    if !kw(i, "kill") {
        return None;
    }
    i += 1;
    if kw(i, "hard") || kw(i, "soft") {
        i += 1;
    }
    let mut connection = true;
    if kw(i, "query") {
        connection = false;
        i += 1;
    } else if kw(i, "connection") {
        i += 1;
    }
    let sluice_sql::Token::Number(n) = toks.get(i)? else {
        return None;
    };
    let rest_ok = toks.len() == i + 1
        || (toks.len() == i + 2 && toks.get(i + 1) == Some(&sluice_sql::Token::Semicolon));
    let id = std::str::from_utf8(n).ok()?.parse().ok()?;
    rest_ok.then_some((connection, id))
}

/// A statement that succeeds when the session's user may kill other users' threads
/// and fails as the server's KILL would otherwise (1095), naming the thread the client
/// asked for. MariaDB's privilege test: SUPER or CONNECTION ADMIN.
fn may_kill_others_sql(id: u32) -> String {
    format!(
        "BEGIN NOT ATOMIC IF NOT EXISTS (SELECT 1 FROM information_schema.USER_PRIVILEGES \
         WHERE GRANTEE = CONCAT('''', REPLACE(SUBSTRING(CURRENT_USER(), 1, \
         LENGTH(CURRENT_USER()) - LOCATE('@', REVERSE(CURRENT_USER()))), '''', ''''''), \
         '''@''', SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''') \
         AND PRIVILEGE_TYPE IN ('SUPER', 'CONNECTION ADMIN')) THEN \
         SIGNAL SQLSTATE 'HY000' SET MYSQL_ERRNO = 1095, \
         MESSAGE_TEXT = 'You are not owner of thread {id}'; END IF; END"
    )
}

/// What a KILL sent to the server waits for.
pub(super) enum KillWait {
    /// Nothing: the server's answer is all.
    Nothing,
    /// The target keeps its server connection until the KILL has run.
    Aimed(Arc<Registered>),
    /// The server says whether the killer may kill another user's threads; if it may,
    /// KILL CONNECTION closes the target.
    Allowed {
        target: Arc<Registered>,
        connection: bool,
    },
}

impl KillWait {
    /// The server answered the KILL (`ok`: successfully), or never will. The target
    /// of a KILL CONNECTION of its server connection is returned.
    pub(super) fn answered(self, ok: bool) -> Option<Arc<Registered>> {
        match self {
            KillWait::Nothing => None,
            KillWait::Aimed(t) => {
                t.done();
                let killed = t.state.lock().killed;
                killed.then_some(t)
            }
            KillWait::Allowed { target, connection } => {
                if ok && connection {
                    target.close();
                }
                None
            }
        }
    }
}

/// What to do with a KILL.
pub(super) enum Kill {
    /// Not a KILL, or not of a Sluice client: the server decides.
    NotOurs,
    /// Sluice answered it.
    Answered,
    /// Run this instead (the target's server connection).
    Server(String),
    /// The client killed its own connection: told so, as by the server (ERR 1927),
    /// its session ends.
    Own,
}

impl super::Relay {
    /// A KILL naming one of Sluice's clients, mapped to the server connection it uses.
    pub(super) fn kill_target(&mut self, cmd: u8, len: usize) -> Kill {
        let payload = &self.core.io.cbuf[4..4 + len];
        let asked = match cmd {
            consts::COM_PROCESS_KILL => super::state::stmt_id(payload).map(|id| (true, id)),
            consts::COM_QUERY => {
                let sql = &payload[1..];
                let first = sql.iter().find(|b| !b.is_ascii_whitespace());
                if matches!(first, Some(b'k' | b'K')) {
                    parse_kill(sql)
                } else {
                    None
                }
            }
            _ => None,
        };
        let Some((connection, id)) = asked else {
            return Kill::NotOurs;
        };
        let Some(target) = self.s.kill.clients.get(id) else {
            return Kill::NotOurs;
        };
        // Killing another user's thread takes a privilege (SUPER, CONNECTION ADMIN)
        // that only the server knows the killer to have: wherever the KILL reaches a
        // server connection of the target, the server decides; where it does not, the
        // server is asked first.
        let other = !target.same_user(&self.s.kill.entry);
        if let Some((mux, answer)) = target.muxed() {
            // On a shared connection: only its statement may be stopped, and only while
            // it is the one running; KILL CONNECTION closes the client alone.
            if !connection && mux.running(&answer) {
                self.kills.push_back(KillWait::Nothing);
                return Kill::Server(format!("KILL QUERY {}", mux.thread()));
            }
            return self.kill_without_server(target, connection, id, other);
        }
        match target.aim(connection) {
            Some(t) => {
                let what = if connection { "CONNECTION" } else { "QUERY" };
                self.kills.push_back(KillWait::Aimed(target));
                Kill::Server(format!("KILL {what} {t}"))
            }
            None => self.kill_without_server(target, connection, id, other),
        }
    }

    /// A KILL of a client that runs nothing on a server connection of its own: its
    /// socket is closed (KILL CONNECTION), once the server has confirmed that the
    /// killer may kill another user's threads.
    fn kill_without_server(
        &mut self,
        target: Arc<Registered>,
        connection: bool,
        id: u32,
        other: bool,
    ) -> Kill {
        if other {
            self.kills
                .push_back(KillWait::Allowed { target, connection });
            return Kill::Server(may_kill_others_sql(id));
        }
        if connection && id == self.s.id {
            super::errors::queue_err(
                &mut self.core.io.to_client,
                1,
                consts::ER_CONNECTION_KILLED,
                "70100",
                "Connection was killed",
            );
            return Kill::Own;
        }
        if connection {
            target.close();
        }
        self.kill_answered()
    }

    /// Answers a KILL with OK.
    fn kill_answered(&mut self) -> Kill {
        let mut ok = Vec::new();
        sluice_wire_mysql::resp::encode_ok(&mut ok, self.tracker.caps(), 0, 0, self.status, 0, b"");
        let mut seq = 1;
        packet::write_packet(&mut *self.core.io.to_client, &mut seq, &ok);
        Kill::Answered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kill_forms() {
        assert_eq!(parse_kill(b"KILL 5"), Some((true, 5)));
        assert_eq!(parse_kill(b"kill query 7;"), Some((false, 7)));
        assert_eq!(
            parse_kill(b"KILL HARD CONNECTION 1000001"),
            Some((true, 1000001))
        );
        assert_eq!(parse_kill(b"KILL QUERY ID 3"), None);
        assert_eq!(parse_kill(b"KILL USER bob"), None);
        assert_eq!(parse_kill(b"SELECT 1"), None);
        assert_eq!(parse_kill(b"KILL 5; SELECT 1"), None);
    }
}
