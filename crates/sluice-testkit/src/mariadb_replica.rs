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

    /// Makes this replica a primary, as an HA manager does: it stops receiving, applies
    /// what it has received (when its SQL thread runs; 10 s at most), then replication
    /// is stopped and forgotten and the server made writable. Nothing it acknowledged
    /// to a semi-synchronous primary is lost.
    pub fn promote(&self) -> Result<()> {
        self.sql("STOP SLAVE IO_THREAD;")?;
        let status = self.sql("SHOW SLAVE STATUS\\G")?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(": "))
                .map(str::trim)
                .unwrap_or_default()
                .to_owned()
        };
        let received = field("Gtid_IO_Pos");
        if field("Slave_SQL_Running") == "Yes" && !received.is_empty() {
            self.sql(&format!(
                "SELECT MASTER_GTID_WAIT({}, 10);",
                quote_str(&received)
            ))?;
        }
        self.sql("STOP SLAVE;\nRESET SLAVE ALL;\nSET GLOBAL read_only = OFF;\n")?;
        Ok(())
    }

    /// Makes replication to `replica` semi-synchronous (lossless: a commit returns once
    /// the replica has the transaction in its relay log), and waits until the primary
    /// counts it as a semi-synchronous client.
    pub fn semi_sync(&self, replica: &MariaDbServer) -> Result<()> {
        self.sql(
            "SET GLOBAL rpl_semi_sync_master_enabled = ON;\n\
             SET GLOBAL rpl_semi_sync_master_timeout = 60000;\n\
             SET GLOBAL rpl_semi_sync_master_wait_point = 'AFTER_SYNC';\n",
        )?;
        replica.sql(
            "SET GLOBAL rpl_semi_sync_slave_enabled = ON;\n\
             STOP SLAVE IO_THREAD;\nSTART SLAVE IO_THREAD;\n",
        )?;
        for _ in 0..100 {
            let n = self.sql("SHOW STATUS LIKE 'Rpl_semi_sync_master_clients';")?;
            if n.split_whitespace().last() == Some("1") {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        anyhow::bail!(
            "the replica on port {} never became semi-synchronous",
            replica.port()
        )
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
