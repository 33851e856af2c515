//! Streaming replicas of a [`PgServer`]: `pg_basebackup -R` over the primary's Unix
//! socket with a physical replication slot, started as a hot standby on a free port of
//! its own, and the operations failover tests need (promote, pause replay).

use anyhow::{Context, Result};

use crate::pg::{PgServer, append_conf, server_dir};
use crate::pg_conf::server_conf;
use crate::pg_setup::{SUPERUSER, bins, check};
use crate::process::server_command;
use crate::template::scratch_root;
use crate::{free_port, tls};

impl PgServer {
    /// Starts a streaming replica of this server: a base backup through a new
    /// replication slot, `standby.signal` and `primary_conninfo` (pg_basebackup -R),
    /// the testkit's settings with a port of its own, started as a hot standby.
    /// `hot_standby_feedback` is on, and the primary's `wal_level` is `replica` (the
    /// default). Waits until it accepts connections.
    pub fn start_replica(&self) -> Result<PgServer> {
        crate::retry_port_conflicts(|| self.try_start_replica())
    }

    fn try_start_replica(&self) -> Result<PgServer> {
        let dir = server_dir(&scratch_root())?;
        let data = dir.path().join("data");
        let slot = format!("replica_{}", free_port());
        let out = server_command(&bins()?.bin("pg_basebackup"), dir.path())?
            .arg("-D")
            .arg(&data)
            .arg("-h")
            .arg(self.dir.path())
            .args(["-p", &self.port.to_string(), "-U", SUPERUSER])
            .args([
                "-R",
                "-X",
                "stream",
                "-C",
                "-S",
                &slot,
                "--no-sync",
                "--checkpoint=fast",
            ])
            .output()
            .context("run pg_basebackup")?;
        check(&out, "pg_basebackup")?;
        let ca = if self.opts.tls {
            Some(tls::write_server_tls(&dir.path().join("tls"))?)
        } else {
            None
        };
        let port = free_port();
        let mut conf = server_conf(dir.path(), port, &self.opts, ca.as_ref());
        conf.push_str("hot_standby_feedback = on\nwal_receiver_status_interval = 1s\n");
        append_conf(&data, &conf)?;
        let mut replica = PgServer {
            log: dir.path().join("postgres.log"),
            dir,
            data,
            port,
            opts: self.opts.clone(),
            ca: ca.map(|t| t.ca_cert),
            pid: None,
            launcher: None,
        };
        replica.launch()?;
        Ok(replica)
    }

    /// Promotes this replica to a primary and waits until it is one.
    pub fn promote(&self) -> Result<()> {
        let out = self.psql_socket("SELECT pg_promote(true, 30);")?;
        anyhow::ensure!(out.trim() == "t", "pg_promote answered {out:?}");
        Ok(())
    }

    /// Whether the server is in recovery (a replica).
    pub fn in_recovery(&self) -> Result<bool> {
        Ok(self.psql_socket("SELECT pg_is_in_recovery();")?.trim() == "t")
    }

    /// Waits until this replica has replayed everything `primary` has written so far.
    pub fn wait_caught_up(&self, primary: &PgServer) -> Result<()> {
        let lsn = primary.psql_socket("SELECT pg_current_wal_lsn();")?;
        let lsn = lsn.trim();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let q = format!("SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn;");
            if self.psql_socket(&q)?.trim() == "t" {
                return Ok(());
            }
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "replica on port {} did not replay up to {lsn} within 30 s",
                self.port
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Pauses (or resumes) WAL replay on this replica.
    pub fn pause_replay(&self, pause: bool) -> Result<()> {
        let f = if pause {
            "pg_wal_replay_pause"
        } else {
            "pg_wal_replay_resume"
        };
        self.psql_socket(&format!("SELECT {f}();"))?;
        Ok(())
    }
}
