//! Processes a benchmark file starts (servers, proxies) and what /proc says about them:
//! CPU time (utime + stime of all threads) and resident memory (VmRSS, VmHWM). Each
//! process's output goes to `target/bench/logs/<name>.log`; it counts as ready when
//! every `ready` address accepts a TCP connection. Stopping sends SIGTERM and, after
//! 15 s, SIGKILL. A [`Procs`] stops what it started when dropped, so an error part-way
//! leaves nothing running; if sluice-bench itself is killed, its children get SIGTERM.

use super::file::ProcessSpec;
use crate::results::{Machine, ProcUsage};
use anyhow::{Context, Result, bail};
use std::collections::HashMap;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Started {
    pub name: String,
    child: Child,
    pub log: PathBuf,
    /// It writes its counters to its log on SIGUSR1.
    pub counters: bool,
}

#[derive(Default)]
pub struct Procs {
    started: Vec<Started>,
}

impl Procs {
    /// Starts `spec` and waits until it is ready.
    pub fn start(&mut self, spec: &ProcessSpec, log_dir: &std::path::Path) -> Result<()> {
        std::fs::create_dir_all(log_dir)
            .with_context(|| format!("create {}", log_dir.display()))?;
        let log = log_dir.join(format!("{}.log", spec.name));
        let out =
            std::fs::File::create(&log).with_context(|| format!("create {}", log.display()))?;
        let err = out.try_clone().context("log file handle")?;
        let mut cmd = Command::new(&spec.command[0]);
        cmd.args(&spec.command[1..])
            .envs(&spec.env)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        stop_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .with_context(|| format!("process {:?}: start {:?}", spec.name, spec.command))?;
        eprintln!(
            "sluice-bench: started {} (pid {}): {}",
            spec.name,
            child.id(),
            spec.command.join(" ")
        );
        self.started.push(Started {
            name: spec.name.clone(),
            child,
            log: log.clone(),
            counters: spec.counters,
        });
        let deadline = Instant::now() + Duration::from_secs_f64(spec.ready_timeout.max(0.1));
        for addr in &spec.ready {
            loop {
                if let Some(s) = self.started.last_mut()
                    && let Ok(Some(status)) = s.child.try_wait()
                {
                    bail!(
                        "process {:?} exited ({status}) before it was ready; its output: {}\n{}",
                        spec.name,
                        log.display(),
                        tail(&log)
                    );
                }
                if TcpStream::connect_timeout(
                    &addr
                        .parse()
                        .with_context(|| format!("ready address {addr:?} is not ip:port"))?,
                    Duration::from_millis(500),
                )
                .is_ok()
                {
                    break;
                }
                if Instant::now() > deadline {
                    bail!(
                        "process {:?} is not listening on {addr} after {} s; its output: {}\n{}",
                        spec.name,
                        spec.ready_timeout,
                        log.display(),
                        tail(&log)
                    );
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&Started> {
        self.started.iter().find(|s| s.name == name)
    }

    /// Whether the named process is still running.
    pub fn alive(&mut self, name: &str) -> bool {
        self.started
            .iter_mut()
            .find(|s| s.name == name)
            .is_some_and(|s| matches!(s.child.try_wait(), Ok(None)))
    }

    /// Stops everything, last started first.
    pub fn stop_all(&mut self) {
        while let Some(mut s) = self.started.pop() {
            stop(&mut s);
        }
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        self.stop_all();
    }
}

impl Started {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// The child gets SIGTERM when this process ends, however it ends (a SIGTERM or
/// SIGINT to sluice-bench skips the `Drop` that stops what it started). Processes
/// are started from the main thread, whose exit is the process's.
fn stop_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec the closure makes only async-signal-safe calls
    // (prctl, getppid, _exit) and touches no memory of the parent.
    unsafe {
        let parent = libc::getpid();
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            // The parent may have died before the prctl took hold.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

fn stop(s: &mut Started) {
    if let Ok(Some(_)) = s.child.try_wait() {
        return;
    }
    let pid = s.child.id() as libc::pid_t;
    // SAFETY: kill(2) on a child this process started and has not reaped yet.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = s.child.try_wait() {
            eprintln!("sluice-bench: stopped {}", s.name);
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = s.child.kill();
    let _ = s.child.wait();
    eprintln!(
        "sluice-bench: killed {} (no exit 15 s after SIGTERM)",
        s.name
    );
}

/// The last lines of a log, for error messages.
fn tail(path: &std::path::Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// The process named `comm` in the tree rooted at `root` (breadth first, root
/// included); None: not (yet) there.
pub fn find_in_tree(root: u32, comm: &str) -> Option<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    let mut comms: HashMap<u32, String> = HashMap::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((name, ppid)) = parse_comm_ppid(&stat) else {
            continue;
        };
        children.entry(ppid).or_default().push(pid);
        comms.insert(pid, name);
    }
    let mut queue = std::collections::VecDeque::from([root]);
    while let Some(p) = queue.pop_front() {
        if comms.get(&p).is_some_and(|c| c == comm) {
            return Some(p);
        }
        if let Some(kids) = children.get(&p) {
            queue.extend(kids.iter().copied());
        }
    }
    None
}

/// The command name and the parent pid of `pid`, from /proc (None: no such process).
pub fn comm_and_parent(pid: u32) -> Option<(String, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_comm_ppid(&stat)
}

/// Sends SIGKILL to `pid` (a server the benchmark kills on purpose).
pub fn kill_hard(pid: u32) -> Result<()> {
    let p = libc::pid_t::try_from(pid).context("pid out of range")?;
    // SAFETY: kill(2) with a plain pid and signal number.
    if unsafe { libc::kill(p, libc::SIGKILL) } != 0 {
        let e = std::io::Error::last_os_error();
        bail!("kill -9 {pid}: {e} (killing a server of another user needs root)");
    }
    Ok(())
}

/// (comm, ppid) from the text of /proc/PID/stat.
fn parse_comm_ppid(stat: &str) -> Option<(String, u32)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_string();
    let mut rest = stat.get(close + 1..)?.split_whitespace();
    rest.next()?; // state
    let ppid = rest.next()?.parse().ok()?;
    Some((comm, ppid))
}

/// User + system CPU seconds of `pid` (all its threads).
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("read /proc/{pid}/stat"))?;
    parse_cpu_ticks(&stat)
        .map(|t| t as f64 / clock_ticks())
        .with_context(|| format!("parse /proc/{pid}/stat"))
}

/// utime + stime (fields 14 and 15) from the text of /proc/PID/stat.
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let close = stat.rfind(')')?;
    let fields: Vec<&str> = stat.get(close + 1..)?.split_whitespace().collect();
    // After the comm, field 3 (state) is index 0: utime (14) is 11, stime (15) is 12.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// (VmRSS, VmHWM) of `pid`, KiB.
pub fn memory_kib(pid: u32) -> Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("read /proc/{pid}/status"))?;
    Ok((
        status_kib(&status, "VmRSS:").unwrap_or(0),
        status_kib(&status, "VmHWM:").unwrap_or(0),
    ))
}

fn status_kib(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    line[key.len()..].split_whitespace().next()?.parse().ok()
}

/// A measured process: CPU read before a run, usage computed after it.
pub struct Meter {
    pid: u32,
    cpu0: f64,
    /// The log a process with counters writes them to, and their values at the start.
    counters: Option<(PathBuf, u64)>,
}

impl Meter {
    /// `log`: the process's log, when it reports its counters there on SIGUSR1.
    pub fn begin(pid: u32, log: Option<&Path>) -> Result<Meter> {
        let counters = log.and_then(|l| Some((l.to_path_buf(), slow_waits(pid, l)?)));
        Ok(Meter {
            pid,
            cpu0: cpu_seconds(pid)?,
            counters,
        })
    }

    pub fn end(&self) -> Result<ProcUsage> {
        let cpu = cpu_seconds(self.pid)?;
        let (rss, hwm) = memory_kib(self.pid)?;
        let slow = self.counters.as_ref().and_then(|(log, before)| {
            slow_waits(self.pid, log).map(|after| after.saturating_sub(*before))
        });
        Ok(ProcUsage {
            cpu_s: (cpu - self.cpu0).max(0.0),
            rss_kib: rss,
            peak_rss_kib: hwm,
            slow_waits: slow,
        })
    }
}

/// Asks `pid` for its counters (SIGUSR1) and reads `slow_waits_total` from the line it
/// then writes to `log` (within a second).
fn slow_waits(pid: u32, log: &Path) -> Option<u64> {
    const KEY: &str = "slow_waits_total=";
    let seen = std::fs::metadata(log).map(|m| m.len()).unwrap_or(0);
    // SAFETY: a plain signal to a child this process started.
    unsafe {
        libc::kill(pid as i32, libc::SIGUSR1);
    }
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(20));
        let text = std::fs::read(log).ok()?;
        let fresh = String::from_utf8_lossy(text.get(seen as usize..)?);
        if let Some(at) = fresh.rfind(KEY) {
            let digits: String = fresh[at + KEY.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            return digits.parse().ok();
        }
    }
    None
}

/// This machine, from /proc and uname.
pub fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    Machine {
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        cpu_model,
        memory_kib: status_kib(&meminfo, "MemTotal:").unwrap_or(0),
        kernel,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "1234 (sluice worker) S 1 1234 1234 0 -1 4194560 2000 0 0 0 150 75 0 0 20 0 3 0 100 1000000 500 18446744073709551615";

    #[test]
    fn stat_fields() {
        assert_eq!(parse_cpu_ticks(STAT), Some(225));
        assert_eq!(
            parse_comm_ppid(STAT),
            Some(("sluice worker".to_string(), 1))
        );
        assert_eq!(parse_cpu_ticks("garbage"), None);
    }

    #[test]
    fn status_fields() {
        let s = "Name:\tx\nVmHWM:\t   2048 kB\nVmRSS:\t   1024 kB\n";
        assert_eq!(status_kib(s, "VmRSS:"), Some(1024));
        assert_eq!(status_kib(s, "VmHWM:"), Some(2048));
        assert_eq!(status_kib(s, "VmSwap:"), None);
    }

    #[test]
    fn own_process_is_readable() {
        let me = std::process::id();
        assert!(cpu_seconds(me).is_ok());
        let (rss, hwm) = memory_kib(me).unwrap_or((0, 0));
        assert!(rss > 0 && hwm >= rss);
        assert!(find_in_tree(me, "no-such-command-name").is_none());
        assert!(machine().cpus >= 1);
    }
}
