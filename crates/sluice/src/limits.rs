//! The process's descriptor limit: every client and every server connection is a
//! socket, so Sluice raises its soft RLIMIT_NOFILE to what its configuration may need
//! (up to the hard limit) and says so at start when the hard limit is lower.

use sluice_config::{Config, PoolMode};

/// Descriptors beyond the sockets of clients and servers: listeners, logs, the
/// allowlist, the runtime's own.
const SPARE: u64 = 256;

/// What the configuration may need at most: a socket per client, and in session mode
/// one more per client for its server connection.
pub fn needed(config: &Config) -> u64 {
    let clients = config.general.max_client_connections as u64;
    let session = config
        .listeners
        .values()
        .any(|l| config.pool_for(l).mode == PoolMode::Session);
    clients
        .saturating_mul(if session { 2 } else { 1 })
        .saturating_add(SPARE)
}

/// Raises the soft limit towards `needed`; the limits now, or why they could not be
/// read or set.
#[cfg(unix)]
pub fn raise(needed: u64) -> Result<(u64, u64), std::io::Error> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit with a valid pointer to a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let want: libc::rlim_t = needed.min(lim.rlim_max);
        if lim.rlim_cur < want {
            lim.rlim_cur = want;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok((lim.rlim_cur, lim.rlim_max))
}

/// Raises the limit and says what came of it (a warning when it stays short).
pub fn apply(config: &Config) {
    let need = needed(config);
    match raise(need) {
        Ok((soft, _)) if soft >= need => {
            tracing::debug!(limit = soft, needed = need, "descriptor limit");
        }
        Ok((soft, hard)) => tracing::warn!(
            limit = soft,
            hard_limit = hard,
            needed = need,
            "the descriptor limit (RLIMIT_NOFILE) is below what max_client_connections = {} may need: clients and server connections beyond it are refused; raise the hard limit (ulimit -Hn, systemd LimitNOFILE=)",
            config.general.max_client_connections
        ),
        Err(e) => tracing::warn!(error = %e, "cannot read or raise the descriptor limit"),
    }
}
