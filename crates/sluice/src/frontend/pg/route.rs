//! Where a client's next transaction goes (see session/reroute.rs): asked before each
//! request that starts one, with what it is about to run when its route splits reads
//! from writes; in session mode, whether its server is still its route's.

use super::relay::Relay;
use crate::error::Error;
use sluice_wire_pg::msg::{self, fe};

impl Relay {
    /// Before a client frame: a transaction-mode session without a server connection
    /// may move to another server's pool; a session-mode one on a demoted primary ends.
    pub(super) fn route(&mut self, tag: u8, body: &[u8]) -> Result<(), Error> {
        if self.tx_mode()
            && self.s.lease.is_none()
            && self.muxed.is_none()
            && self.tracker.is_idle()
        {
            self.reroute(tag, body);
        }
        if !self.tx_mode()
            && self.tracker.is_idle()
            && self.status == b'I'
            && !crate::session::reroute::still_routed(
                &self.shared,
                &self.s.ctx.cfg,
                &mut self.s.route,
                &self.s.pool.key.server,
            )
        {
            let e = crate::session::reroute::demoted(&self.s.ctx.cfg, &self.s.pool.key.server);
            return Err(e);
        }
        Ok(())
    }

    /// Between transactions: the route asked again (see session/reroute.rs), with what
    /// the client is about to run when its route splits reads from writes.
    fn reroute(&mut self, tag: u8, body: &[u8]) {
        let s = &mut self.s;
        let class = if s.ctx.cfg.route.kind == sluice_config::RouteKind::Split {
            let sql = match tag {
                fe::QUERY => msg::query_text(body),
                fe::PARSE => msg::parse(body).map(|(_, q, _)| q),
                fe::BIND => msg::bind(body).and_then(|(_, name, _)| self.stmts.query(name)),
                _ => None,
            };
            sql.map_or(sluice_sql::Class::Write, |q| {
                sluice_sql::classify(q, sluice_sql::Dialect::Postgres)
            })
        } else {
            sluice_sql::Class::Write
        };
        let shared = &self.shared;
        let retarget = |op: &crate::backend::pg::Opener, target| crate::backend::pg::Opener {
            target,
            params: op.params.clone(),
            creds: op.creds.clone(),
        };
        let pools = (&shared.pg.pools, &s.pool);
        let cfg = &s.ctx.cfg;
        let next =
            crate::session::reroute::reroute(shared, cfg, pools, &mut s.route, class, retarget);
        if let Some(p) = next {
            s.pool = p;
        }
    }
}
