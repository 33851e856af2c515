//! GTID replicas of a [`MariaDbServer`]: a fresh server (`server_id` 2 and up,
//! `read_only`) replicating from this one's binary log from its start
//! (`MASTER_USE_GTID = slave_pos`), so users and databases created on the primary
//! after the replica starts reach it too; and what failover tests do to them (promote,
//! stop the SQL thread, wait until caught up).

use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, Result};

use crate::mariadb::{MariaDbOptions, MariaDbServer};
use crate::mariadb_setup::quote_str;

static NEXT_SERVER_ID: AtomicU32 = AtomicU32::new(2);

impl MariaDbServer {
    /// Starts a replica of this server (which needs its binary log, the default) and
    /// waits until its replication threads run. It logs in to this server as a
    /// replication user `repl` created for it.
    pub fn start_replica(&self) -> Result<MariaDbServer> {
        let id = NEXT_SERVER_ID.fetch_add(1, Ordering::Relaxed);
        let mut opts: MariaDbOptions = self.options().clone();
        opts.handlersocket = false;
        opts.extra_args.extend([
            format!("--server-id={id}"),
            "--read-only=ON".to_owned(),
            "--log-slave-updates=ON".to_owned(),
        ]);
        let replica = MariaDbServer::start_with(opts).context("start the replica")?;
        let user = format!("repl{id}");
        let pw = format!("repl-pw-{id}");
        // Not in the binary log: the replica must not create this user again.
        self.sql(&format!(
            "SET sql_log_bin = 0;\n\
             CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY {};\n\
             GRANT REPLICATION SLAVE, REPLICATION SLAVE ADMIN ON *.* TO '{user}'@'127.0.0.1';\n",
            quote_str(&pw)
        ))?;
        replica.sql(&format!(
            "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {}, \
             MASTER_USER = '{user}', MASTER_PASSWORD = {}, MASTER_USE_GTID = slave_pos, \
             MASTER_CONNECT_RETRY = 1;\nSTART SLAVE;\n",
            self.port(),
            quote_str(&pw)
        ))?;
        replica.wait_caught_up(self)?;
        Ok(replica)
    }

    /// Waits (30 s at most) until this replica has applied everything `primary` has
    /// written so far.
    pub fn wait_caught_up(&self, primary: &MariaDbServer) -> Result<()> {
        let pos = primary.sql("SELECT @@gtid_binlog_pos;")?;
        let pos = pos.trim();
        let got = self.sql(&format!("SELECT MASTER_GTID_WAIT({}, 30);", quote_str(pos)))?;
        anyhow::ensure!(
            got.trim() == "0",
            "replica on port {} did not reach {pos} within 30 s: {}",
            self.port(),
            self.sql("SHOW SLAVE STATUS\\G").unwrap_or_default()
        );
        Ok(())
    }

    /// Makes this replica a primary: replication stopped and forgotten, writable.
    pub fn promote(&self) -> Result<()> {
        self.sql("STOP SLAVE;\nRESET SLAVE ALL;\nSET GLOBAL read_only = OFF;\n")?;
        Ok(())
    }

    /// Stops (or starts again) applying what the replica receives.
    pub fn pause_replay(&self, pause: bool) -> Result<()> {
        let s = if pause {
            "STOP SLAVE SQL_THREAD;"
        } else {
            "START SLAVE SQL_THREAD;"
        };
        self.sql(s)?;
        Ok(())
    }
}
