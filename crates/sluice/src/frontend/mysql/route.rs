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
        let class = match self.io.cbuf.get(5..4 + len) {
            Some(sql)
                if cmd == consts::COM_QUERY
                    && s.ctx.cfg.route.kind == sluice_config::RouteKind::Split =>
            {
                sluice_sql::classify(sql, sluice_sql::Dialect::MySql)
            }
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
