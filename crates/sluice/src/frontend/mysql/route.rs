//! Where a client's next transaction goes (see session/reroute.rs): asked before each
//! command that starts one, with what it is about to run when its route splits reads
//! from writes; in session mode, whether its server is still its route's.

use super::relay::{End, Relay};
use sluice_config::PoolMode;
use sluice_wire_mysql::consts;

impl Relay {
    /// Before a client command: a transaction-mode session without a server connection
    /// may move to another server's pool; a session-mode one on a demoted primary ends.
    pub(super) fn route(&mut self, cmd: u8, len: usize) -> Result<(), End> {
        if self.s.mode == PoolMode::Transaction && self.s.lease.is_none() && self.at_rest() {
            self.reroute(cmd, len);
        }
        if self.s.mode == PoolMode::Session
            && self.at_rest()
            && !self.in_transaction()
            && !crate::session::reroute::still_routed(
                &self.shared,
                &self.s.ctx.cfg,
                &mut self.s.route,
                &self.s.pool.key.server,
            )
        {
            let e = crate::session::reroute::demoted(&self.s.ctx.cfg, &self.s.pool.key.server);
            return Err(End::Failed(e));
        }
        Ok(())
    }

    /// Between transactions: the route asked again (see session/reroute.rs), with what
    /// the client is about to run when its route splits reads from writes.
    fn reroute(&mut self, cmd: u8, len: usize) {
        let s = &mut self.s;
        let split = s.ctx.cfg.route.kind == sluice_config::RouteKind::Split;
        let payload = self.io.cbuf.get(4..4 + len).unwrap_or_default();
        let classify = |sql: &[u8]| sluice_sql::classify(sql, sluice_sql::Dialect::MySql);
        let class = match cmd {
            _ if !split => sluice_sql::Class::Write,
            consts::COM_QUERY => classify(payload.get(1..).unwrap_or_default()),
            // A prepare changes nothing: any server can describe the statement.
            consts::COM_STMT_PREPARE => sluice_sql::Class::Read,
            // An execute runs where its text says (the client's statement, by its id).
            consts::COM_STMT_EXECUTE => super::state::stmt_id(payload)
                .and_then(|id| self.stmts.map.get(&id))
                .map_or(sluice_sql::Class::Write, |st| classify(&st.sql)),
            _ => sluice_sql::Class::Write,
        };
        let retarget = |op: &crate::backend::mysql::Opener, target| crate::backend::mysql::Opener {
            target,
            creds: op.creds.clone(),
            database: op.database.clone(),
            caps: op.caps,
            charset: op.charset,
        };
        let pools = (&self.shared.my.pools, &s.pool);
        let cfg = &s.ctx.cfg;
        let next = crate::session::reroute::reroute(
            &self.shared,
            cfg,
            pools,
            &mut s.route,
            class,
            retarget,
        );
        if let Some(p) = next {
            s.pool = p;
        }
    }
}
