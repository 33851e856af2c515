//! [`PatroniCluster`]: a real HA manager for failover tests. One etcd (Debian's
//! `etcd-server`) and three PostgreSQL nodes run by Patroni (Debian's `patroni`), each on
//! free loopback ports in a temporary directory, trust authentication over 127.0.0.1.
//! Patroni bootstraps the leader and clones the replicas; the tests then ask it for a
//! switchover or SIGKILL the leader's Patroni and postmaster and let it elect another.

use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tempfile::TempDir;

use crate::free_port;
use crate::pg::server_dir;
use crate::pg_setup::bins;
use crate::process::{kill_tree, server_command, signal, wait_dead};
use crate::template::scratch_root;

/// One node: its PostgreSQL port, its REST API port, its Patroni process.
#[derive(Debug)]
struct Node {
    name: String,
    pg_port: u16,
    rest_port: u16,
    config: PathBuf,
    data: PathBuf,
    patroni: Option<Child>,
}

/// A running etcd and three Patroni-managed PostgreSQL nodes (see the module docs).
#[derive(Debug)]
pub struct PatroniCluster {
    dir: TempDir,
    etcd: Option<Child>,
    nodes: Vec<Node>,
}

impl PatroniCluster {
    /// Starts etcd and three nodes, and waits (60 s at most) until one leads and the
    /// two others replicate from it.
    pub fn start() -> Result<PatroniCluster> {
        let dir = server_dir(&scratch_root())?;
        let (client, peer) = (free_port(), free_port());
        let etcd = Command::new("etcd")
            .args(["--name", "sluice-test", "--data-dir"])
            .arg(dir.path().join("etcd"))
            .arg(format!("--listen-client-urls=http://127.0.0.1:{client}"))
            .arg(format!("--advertise-client-urls=http://127.0.0.1:{client}"))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
            ))
            .arg(format!(
                "--initial-cluster=sluice-test=http://127.0.0.1:{peer}"
            ))
            .stdin(Stdio::null())
            .stdout(log(dir.path(), "etcd.log")?)
            .stderr(log(dir.path(), "etcd.log")?)
            .spawn()
            .context("start etcd (Debian package etcd-server)")?;
        let mut cluster = PatroniCluster {
            dir,
            etcd: Some(etcd),
            nodes: Vec::new(),
        };
        wait_for(Duration::from_secs(30), "etcd", || tcp_up(client))?;
        let bin_dir = bins()?.bin("postgres");
        let bin_dir = bin_dir.parent().context("postgres has no directory")?;
        for i in 0..3 {
            let name = format!("node{i}");
            let (pg_port, rest_port) = (free_port(), free_port());
            let home = cluster.dir.path().join(&name);
            fs::create_dir_all(&home)?;
            crate::process::chown_to_server_user(&home)?;
            let data = home.join("data");
            let config = home.join("patroni.yml");
            fs::write(
                &config,
                node_config(&name, &home, bin_dir, pg_port, rest_port, client),
            )?;
            crate::process::chown_to_server_user(&config)?;
            cluster.nodes.push(Node {
                name,
                pg_port,
                rest_port,
                config,
                data,
                patroni: None,
            });
            cluster.launch(i)?;
        }
        wait_for(Duration::from_secs(90), "a leader and two replicas", || {
            let roles: Vec<Option<bool>> = (0..3).map(|i| cluster.is_leader(i)).collect();
            roles.iter().filter(|r| **r == Some(true)).count() == 1
                && roles.iter().filter(|r| **r == Some(false)).count() == 2
        })
        .map_err(|e| e.context(cluster.log_tail()))?;
        Ok(cluster)
    }

    fn launch(&mut self, i: usize) -> Result<()> {
        let home = self.dir.path().join(&self.nodes[i].name);
        let out = log(&home, "patroni.log")?;
        let err = out.try_clone()?;
        let child = server_command(Path::new("/usr/bin/patroni"), &home)?
            .arg(&self.nodes[i].config)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .context("start patroni (Debian package patroni)")?;
        self.nodes[i].patroni = Some(child);
        Ok(())
    }

    /// The PostgreSQL ports of the three nodes.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.pg_port).collect()
    }

    /// Whether node `i` leads (None: its REST API does not answer).
    pub fn is_leader(&self, i: usize) -> Option<bool> {
        let status = http_status(self.nodes[i].rest_port, "/leader")?;
        match status {
            200 => Some(true),
            503 => (http_status(self.nodes[i].rest_port, "/replica")? == 200).then_some(false),
            _ => None,
        }
    }

    /// The index of the leading node, if one leads.
    pub fn leader(&self) -> Option<usize> {
        (0..self.nodes.len()).find(|&i| self.is_leader(i) == Some(true))
    }

    /// Asks Patroni to hand the leadership to node `candidate` (patronictl switchover).
    pub fn switchover(&self, candidate: usize) -> Result<()> {
        let leader = self.leader().context("no leader to switch over from")?;
        let out = server_command(Path::new("/usr/bin/patronictl"), self.dir.path())?
            .arg("-c")
            .arg(&self.nodes[leader].config)
            .args(["switchover", "--leader"])
            .arg(&self.nodes[leader].name)
            .arg("--candidate")
            .arg(&self.nodes[candidate].name)
            .arg("--force")
            .output()
            .context("run patronictl switchover")?;
        if !out.status.success() {
            bail!(
                "patronictl switchover failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// SIGKILLs node `i`'s Patroni and its PostgreSQL (a host crash); the others
    /// elect a new leader once the old one's key expires in etcd.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].patroni.take() {
            kill_tree(child.id(), &self.nodes[i].data);
            let _ = child.wait();
        }
    }

    fn log_tail(&self) -> String {
        let mut s = String::new();
        for n in &self.nodes {
            let path = self.dir.path().join(&n.name).join("patroni.log");
            let text = fs::read_to_string(&path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(15)..].join("\n");
            s.push_str(&format!("--- {} ---\n{tail}\n", n.name));
        }
        s
    }
}

impl Drop for PatroniCluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(mut child) = n.patroni.take() {
                // SIGTERM: Patroni stops its PostgreSQL, then exits.
                signal(child.id(), libc::SIGTERM);
                if !wait_dead(&[child.id()], Duration::from_secs(20)) {
                    kill_tree(child.id(), &n.data);
                }
                let _ = child.wait();
            }
            if let Ok(pidfile) = fs::read_to_string(n.data.join("postmaster.pid"))
                && let Some(pid) = pidfile.lines().next().and_then(|l| l.trim().parse().ok())
            {
                kill_tree(pid, &n.data);
            }
        }
        if let Some(mut etcd) = self.etcd.take() {
            let _ = etcd.kill();
            let _ = etcd.wait();
        }
    }
}

fn node_config(name: &str, home: &Path, bin_dir: &Path, pg: u16, rest: u16, etcd: u16) -> String {
    let home = home.display();
    let bin_dir = bin_dir.display();
    format!(
        r#"scope: sluice-test
name: {name}
restapi:
  listen: 127.0.0.1:{rest}
  connect_address: 127.0.0.1:{rest}
etcd3:
  hosts: 127.0.0.1:{etcd}
bootstrap:
  dcs:
    ttl: 20
    loop_wait: 1
    retry_timeout: 5
    maximum_lag_on_failover: 1048576
    postgresql:
      use_pg_rewind: false
      use_slots: true
      parameters:
        wal_level: replica
        hot_standby: "on"
        max_wal_senders: 10
        max_replication_slots: 10
        fsync: "off"
  initdb:
  - encoding: UTF8
  - locale: C
  pg_hba:
  - local all all trust
  - local replication all trust
  - host all all 127.0.0.1/32 trust
  - host replication all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:{pg}
  connect_address: 127.0.0.1:{pg}
  data_dir: {home}/data
  bin_dir: {bin_dir}
  pgpass: {home}/pgpass
  authentication:
    superuser:
      username: postgres
    replication:
      username: postgres
  parameters:
    unix_socket_directories: {home}
    max_connections: 100
    shared_buffers: 32MB
tags:
  nofailover: false
  noloadbalance: false
"#
    )
}

fn log(dir: &Path, name: &str) -> Result<fs::File> {
    let f = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(name))
        .with_context(|| format!("open {name}"))?;
    Ok(f)
}

fn tcp_up(port: u16) -> bool {
    TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200)).is_ok()
}

/// The status code of a GET on the REST API (None: no answer).
fn http_status(port: u16, path: &str) -> Option<u16> {
    let mut s =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(500))
            .ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

fn wait_for(timeout: Duration, what: &str, mut ok: impl FnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while !ok() {
        if Instant::now() >= deadline {
            bail!("no {what} within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}
