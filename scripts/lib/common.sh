# shellcheck shell=bash disable=SC2034  # sets SL_* variables for its callers
# Shared helpers for Sluice's driver-suite and benchmark scripts.
#
# Source this from a script that runs with `set -euo pipefail`:
#
#   source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
#   sl_init_cleanup
#
# Everything started through these helpers (PostgreSQL clusters, PgBouncer,
# Sluice) is registered for cleanup and is stopped, and every temp dir removed,
# when the script exits for any reason. Only loopback addresses are used.

SL_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SL_PGBIN="${SL_PGBIN:-/usr/lib/postgresql/15/bin}"
SL_CLEANUP=()

sl_ts() { date '+%H:%M:%S'; }
sl_log() { printf '[%s] %s\n' "$(sl_ts)" "$*" >&2; }
sl_die() { printf '[%s] ERROR: %s\n' "$(sl_ts)" "$*" >&2; exit 1; }

# --- cleanup ----------------------------------------------------------------

sl_init_cleanup() {
    # Keep the original stderr: a signal may arrive while a command's stderr
    # is redirected to a log file (e.g. `sl_run cmd 2>log`).
    exec {SL_STDERR_FD}>&2
    trap sl_run_cleanup EXIT
    trap 'sl_log "interrupted" 2>&"$SL_STDERR_FD"; exit 130' INT
    trap 'sl_log "terminated" 2>&"$SL_STDERR_FD"; exit 143' TERM
}

# sl_defer CMD...: run CMD (a string, eval'ed) at exit, in reverse order.
sl_defer() { SL_CLEANUP+=("$*"); }

sl_run_cleanup() {
    local rc=$? i
    set +e
    trap - INT TERM
    for ((i = ${#SL_CLEANUP[@]} - 1; i >= 0; i--)); do
        eval "${SL_CLEANUP[i]}" >/dev/null 2>&1
    done
    SL_CLEANUP=()
    exit "$rc"
}

# sl_run CMD...: run CMD as a child and wait for it. Unlike a plain
# foreground command, a signal to this script takes effect at once (bash runs
# traps only between commands, but `wait` is interruptible) and the exit
# cleanup stops CMD too.
sl_run() {
    local pid rc=0 idx
    "$@" &
    pid=$!
    idx=${#SL_CLEANUP[@]}
    sl_defer "sl_stop_pid $pid"
    wait "$pid" || rc=$?
    SL_CLEANUP[idx]=":"
    return "$rc"
}

# sl_stop_pid PID [GRACE_SECONDS]: SIGTERM, wait, then SIGKILL. Only for
# processes this script started.
sl_stop_pid() {
    local pid=$1 grace=${2:-10} i
    [[ -n "$pid" ]] || return 0
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null; return 0; }
    kill -TERM "$pid" 2>/dev/null
    for ((i = 0; i < grace * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null
    fi
    wait "$pid" 2>/dev/null || true
}

# sl_mktemp_dir VAR [PREFIX]: create a temp dir, removed at exit, into VAR.
# (Not a $(...) helper: cleanup registered in a subshell would be lost.)
sl_mktemp_dir() {
    local d
    d="$(mktemp -d "/tmp/${2:-sluice}.XXXXXX")"
    sl_defer "rm -rf '$d'"
    printf -v "$1" '%s' "$d"
}

# --- small utilities ----------------------------------------------------------

# sl_free_port: print a TCP port on 127.0.0.1 that is free right now.
sl_free_port() {
    python3 - <<'EOF'
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
EOF
}

# sl_wait_port HOST PORT TIMEOUT_S [PID]: wait until HOST:PORT accepts TCP
# connections. If PID is given and dies meanwhile, fail immediately.
sl_wait_port() {
    local host=$1 port=$2 timeout=$3 pid=${4:-} deadline
    deadline=$((SECONDS + timeout))
    while ((SECONDS < deadline)); do
        if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
            return 2
        fi
        if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    return 1
}

# sl_require_cmd BINARY DEBIAN_PACKAGE: make sure BINARY exists; install the
# Debian package when running as root (CI machines are fresh), else fail.
sl_require_cmd() {
    local bin=$1 pkg=$2
    if command -v "$bin" >/dev/null 2>&1 || [[ -x "$bin" ]]; then
        return 0
    fi
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        sl_log "$bin not found; installing Debian package $pkg"
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q "$pkg" >/dev/null 2>&1 ||
            { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "$pkg" >/dev/null; } ||
            sl_die "could not install $pkg"
        command -v "$bin" >/dev/null 2>&1 || [[ -x "$bin" ]] || sl_die "$bin still missing after installing $pkg"
    else
        sl_die "$bin not found (install the Debian package $pkg)"
    fi
}

# sl_test_certs DIR: a throwaway CA and a certificate it signs for localhost
# and 127.0.0.1, valid 10 years, in DIR: ca.pem, server-cert.pem,
# server-key.pem (and ca-key.pem). Kept if DIR already has them.
sl_test_certs() {
    local dir=$1
    [[ -f "$dir/server-cert.pem" ]] && return 0
    sl_require_cmd openssl openssl
    mkdir -p "$dir"
    (
        cd "$dir" || exit 1
        umask 077
        openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=sluice test CA" \
            -addext basicConstraints=critical,CA:TRUE -keyout ca-key.pem -out ca.pem &&
            openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
                -keyout server-key.pem -out server-req.pem &&
            printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' >ext.cnf &&
            openssl x509 -req -in server-req.pem -days 3650 -CA ca.pem -CAkey ca-key.pem \
                -set_serial 1 -extfile ext.cnf -out server-cert.pem &&
            chmod 644 ca.pem server-cert.pem
    ) >"$dir/openssl.log" 2>&1 || { cat "$dir/openssl.log" >&2; sl_die "could not make test certificates in $dir"; }
}

# sl_proc_cpu_ticks PID: utime+stime (all threads) of PID, in clock ticks.
sl_proc_cpu_ticks() {
    # Field 2 (comm) may contain spaces; strip through the closing paren.
    local rest
    rest="$(sed 's/^.*) //' "/proc/$1/stat")" || return 1
    # After stripping, field 3 (state) is $1, so utime (14) is $12, stime (15) $13.
    awk '{print $12 + $13}' <<<"$rest"
}

# --- throwaway PostgreSQL cluster -------------------------------------------

# sl_pg_start_throwaway PASSWORD [EXTRA_CONF_LINES...]
# Creates and starts a temp cluster (owned by the postgres OS user) on a free
# loopback port: superuser "postgres" with PASSWORD, scram-sha-256 for TCP
# connections (SL_PG_HOST_AUTH overrides), trust on its private unix socket.
# SL_PG_PORT_WANTED picks the port instead. Sets SL_PG_HOST, SL_PG_PORT,
# SL_PG_DIR, SL_PG_SOCKDIR. Stopped and deleted at exit.
sl_pg_start_throwaway() {
    local password=$1; shift
    local dir port line
    id postgres >/dev/null 2>&1 || sl_die "no 'postgres' OS user (is PostgreSQL installed?)"
    [[ -x "$SL_PGBIN/initdb" ]] || sl_die "initdb not found in $SL_PGBIN (set SL_PGBIN)"
    dir="$(mktemp -d /tmp/sluice-script-pg.XXXXXX)"
    sl_defer "rm -rf '$dir'"
    chown postgres: "$dir"
    chmod 700 "$dir"
    port="${SL_PG_PORT_WANTED:-$(sl_free_port)}"
    printf '%s\n' "$password" >"$dir/pwfile"
    chown postgres: "$dir/pwfile"
    runuser -u postgres -- "$SL_PGBIN/initdb" -D "$dir/data" -U postgres \
        --pwfile="$dir/pwfile" --auth-local=trust --auth-host=scram-sha-256 \
        -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 ||
        { cat "$dir/initdb.log" >&2; sl_die "initdb failed"; }
    rm -f "$dir/pwfile"
    {
        echo "# added by scripts/lib/common.sh"
        echo "port = $port"
        echo "listen_addresses = '127.0.0.1'"
        echo "unix_socket_directories = '$dir'"
        echo "max_connections = 300"
        echo "shared_buffers = 256MB"
        echo "password_encryption = 'scram-sha-256'"
        # A throwaway cluster: durability is irrelevant, speed is not.
        echo "fsync = off"
        echo "synchronous_commit = off"
        echo "full_page_writes = off"
        echo "logging_collector = off"
        for line in "$@"; do echo "$line"; done
    } >>"$dir/data/postgresql.conf"
    # Only loopback TCP; scram for everyone unless SL_PG_HOST_AUTH says
    # otherwise (the benchmark uses trust so that connection setup does not
    # pollute per-query CPU numbers).
    cat >"$dir/data/pg_hba.conf" <<EOF
local all all trust
local replication all trust
host  all all 127.0.0.1/32 ${SL_PG_HOST_AUTH:-scram-sha-256}
host  replication all 127.0.0.1/32 ${SL_PG_HOST_AUTH:-scram-sha-256}
EOF
    sl_defer "runuser -u postgres -- '$SL_PGBIN/pg_ctl' -D '$dir/data' -m immediate -w -t 30 stop"
    # Another process may take the port between sl_free_port and the bind (the driver
    # suites start their two parts at once): a later "port" line wins.
    local try
    for try in 1 2 3; do
        if runuser -u postgres -- "$SL_PGBIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null; then
            break
        fi
        if ((try < 3)) && [[ -z "${SL_PG_PORT_WANTED:-}" ]] &&
            grep -q "Address already in use" "$dir/server.log"; then
            sl_log "port $port taken meanwhile; retrying"
            port="$(sl_free_port)"
            echo "port = $port" >>"$dir/data/postgresql.conf"
            continue
        fi
        tail -n 30 "$dir/server.log" >&2
        sl_die "throwaway PostgreSQL did not start"
    done
    SL_PG_HOST=127.0.0.1
    SL_PG_PORT=$port
    SL_PG_DIR=$dir
    SL_PG_SOCKDIR=$dir
    sl_log "throwaway PostgreSQL $("$SL_PGBIN/postgres" -V | awk '{print $3}') on 127.0.0.1:$port (data $dir/data)"
}

# sl_pg_start_replica PRIMARY_PORT [CONF_LINE...]: a streaming replica of the
# throwaway primary on 127.0.0.1:PRIMARY_PORT (trust auth for replication, as
# SL_PG_HOST_AUTH=trust gives): pg_basebackup -R with a replication slot and a
# fast checkpoint (a spread one paces the pages the primary's CREATE DATABASE
# dirtied over most of checkpoint_timeout), the same settings, a port of its own
# (SL_PG_PORT_WANTED, else a free one). Sets SL_PG_PORT and SL_PG_DIR. Stopped and
# deleted at exit.
sl_pg_start_replica() {
    local primary=$1; shift
    local dir port line
    dir="$(mktemp -d /tmp/sluice-script-pg.XXXXXX)"
    sl_defer "rm -rf '$dir'"
    chown postgres: "$dir"
    chmod 700 "$dir"
    port="${SL_PG_PORT_WANTED:-$(sl_free_port)}"
    runuser -u postgres -- "$SL_PGBIN/pg_basebackup" -h 127.0.0.1 -p "$primary" -U postgres \
        -D "$dir/data" -R -X stream -C -S "replica_$port" -c fast >"$dir/basebackup.log" 2>&1 ||
        { cat "$dir/basebackup.log" >&2; sl_die "pg_basebackup from port $primary failed"; }
    {
        echo "# added by scripts/lib/common.sh (replica)"
        echo "port = $port"
        echo "unix_socket_directories = '$dir'"
        echo "hot_standby_feedback = on"
        for line in "$@"; do echo "$line"; done
    } >>"$dir/data/postgresql.conf"
    sl_defer "runuser -u postgres -- '$SL_PGBIN/pg_ctl' -D '$dir/data' -m immediate -w -t 30 stop"
    runuser -u postgres -- "$SL_PGBIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null ||
        { tail -n 30 "$dir/server.log" >&2; sl_die "replica PostgreSQL did not start"; }
    SL_PG_PORT=$port
    SL_PG_DIR=$dir
    sl_log "PostgreSQL replica of 127.0.0.1:$primary on 127.0.0.1:$port (data $dir/data)"
}

# sl_pg_admin SQL...: run SQL as superuser over the throwaway cluster's socket,
# or, for an existing server, over TCP with SL_PG_* / PGPASSWORD.
sl_pg_admin() {
    local db=${SL_PG_ADMIN_DB:-postgres}
    if [[ -n "${SL_PG_SOCKDIR:-}" ]]; then
        runuser -u postgres -- psql -X -q -v ON_ERROR_STOP=1 -h "$SL_PG_SOCKDIR" -p "$SL_PG_PORT" -U postgres -d "$db" "$@"
    else
        psql -X -q -v ON_ERROR_STOP=1 -h "$SL_PG_HOST" -p "$SL_PG_PORT" -U "${SL_PG_USER:-postgres}" -d "$db" "$@"
    fi
}

# --- PgBouncer -----------------------------------------------------------------

# sl_pgbouncer_start MODE BACKEND_HOST BACKEND_PORT USER PASSWORD [POOL_SIZE] [MAX_CLIENT_CONN]
# Starts PgBouncer (Debian package) in MODE (session|transaction|statement) on
# a free loopback port, all databases forwarded to BACKEND. Clients
# authenticate with scram-sha-256 against a generated userlist; PgBouncer logs
# in to the server with the same (plaintext-known) password. An empty
# PASSWORD means trust (for a trust-auth server). Extra [pgbouncer] lines can
# be given in SL_PGBOUNCER_EXTRA (newline-separated); SL_PGB_PORT_WANTED picks
# the port instead of a free one. Sets
# SL_PGB_PORT, SL_PGB_PID, SL_PGB_DIR. Stopped at exit.
sl_pgbouncer_start() {
    local mode=$1 bhost=$2 bport=$3 user=$4 password=$5 pool=${6:-20} maxc=${7:-2000}
    local bin dir port pid
    sl_require_cmd pgbouncer pgbouncer
    bin="$(command -v pgbouncer)"
    dir="$(mktemp -d /tmp/sluice-script-pgbouncer.XXXXXX)"
    sl_defer "rm -rf '$dir'"
    port="${SL_PGB_PORT_WANTED:-$(sl_free_port)}"
    # No password (a trust-auth server): PgBouncer trusts its clients too.
    local auth=scram-sha-256
    [[ -n "$password" ]] || auth=trust
    printf '"%s" "%s"\n' "$user" "$password" >"$dir/userlist.txt"
    cat >"$dir/pgbouncer.ini" <<EOF
[databases]
* = host=$bhost port=$bport

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = $auth
auth_file = $dir/userlist.txt
admin_users = $user
pool_mode = $mode
default_pool_size = $pool
max_client_conn = $maxc
max_db_connections = 0
ignore_startup_parameters = extra_float_digits
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
log_connections = 0
log_disconnections = 0
${SL_PGBOUNCER_EXTRA:-}
EOF
    chown -R postgres: "$dir"
    chmod 700 "$dir"
    # PgBouncer refuses to run as root; setpriv execs (no extra fork), so $!
    # is PgBouncer's own pid, which the benchmark reads CPU time from.
    setpriv --reuid=postgres --regid=postgres --init-groups -- "$bin" "$dir/pgbouncer.ini" \
        >"$dir/stdout.log" 2>&1 &
    pid=$!
    sl_defer "sl_stop_pid $pid"
    if ! sl_wait_port 127.0.0.1 "$port" 20 "$pid"; then
        cat "$dir/stdout.log" "$dir/pgbouncer.log" >&2 2>/dev/null || true
        sl_die "PgBouncer ($mode) did not start"
    fi
    SL_PGB_PORT=$port
    SL_PGB_PID=$pid
    SL_PGB_DIR=$dir
    sl_log "PgBouncer $("$bin" --version | head -1 | awk '{print $2}') ($mode mode, pool $pool) on 127.0.0.1:$port, pid $pid"
}

# --- Sluice --------------------------------------------------------------------

# sl_sluice_build: release build (unless SLUICE_BIN is set) with SLUICE_BUILD_JOBS
# jobs (default 2); sets SL_SLUICE_BIN.
sl_sluice_build() {
    if [[ -n "${SLUICE_BIN:-}" ]]; then
        [[ -x "$SLUICE_BIN" ]] || sl_die "SLUICE_BIN=$SLUICE_BIN is not executable"
        SL_SLUICE_BIN=$SLUICE_BIN
        sl_log "using prebuilt sluice: $SL_SLUICE_BIN"
        return 0
    fi
    local jobs=${SLUICE_BUILD_JOBS:-2}
    sl_log "building sluice: cargo build --release -p sluice -j $jobs"
    sl_run cargo build --manifest-path "$SL_ROOT/Cargo.toml" --release -p sluice -j "$jobs" >&2 ||
        sl_die "cargo build of sluice failed"
    SL_SLUICE_BIN="$SL_ROOT/target/release/sluice"
    [[ -x "$SL_SLUICE_BIN" ]] || sl_die "$SL_SLUICE_BIN missing after build"
}

# sl_sluice_general: the [general] and [admin] sections of a generated Sluice
# config (the admin endpoints off): with
# SLUICE_BUSY_POLL_US set, busy_poll_us (a lone client's session watches its
# sockets that many microseconds before sleeping).
sl_sluice_general() {
    if [[ -n "${SLUICE_BUSY_POLL_US:-}" ]]; then
        echo "[general]"
        echo "busy_poll_us = $SLUICE_BUSY_POLL_US"
        echo
    fi
    # No admin console or HTTP endpoint: the scripts use neither, and two Sluices of
    # theirs at once (the driver suites' two parts) would share the default ports.
    echo "[admin]"
    echo "http_address = \"\""
    echo "mysql_address = \"\""
    echo
}

# sl_sluice_write_config FILE BACKEND_HOST BACKEND_PORT LISTENER...
# LISTENER is NAME:MODE:POOL_SIZE:PORT, e.g. session:session:20:16432 or
# tx:transaction:10:16433. One server "pg" and cluster "pg"; one pool and one
# listener (auth passthrough) per LISTENER spec.
sl_sluice_write_config() {
    local file=$1 bhost=$2 bport=$3; shift 3
    local spec name mode size port
    {
        echo "# generated by scripts/lib/common.sh"
        sl_sluice_general
        echo "[servers.pg]"
        echo "protocol = \"postgres\""
        echo "host = \"$bhost\""
        echo "port = $bport"
        echo
        echo "[clusters.pg]"
        echo "servers = [\"pg\"]"
        for spec in "$@"; do
            IFS=: read -r name mode size port <<<"$spec"
            echo
            echo "[pools.$name]"
            echo "mode = \"$mode\""
            echo "size = $size"
            echo
            echo "[listeners.$name]"
            echo "protocol = \"postgres\""
            echo "address = \"127.0.0.1:$port\""
            echo "cluster = \"pg\""
            echo "pool = \"$name\""
            echo "auth = \"passthrough\""
        done
    } >"$file"
}

# sl_sluice_start CONFIG LOGFILE PORT...: start sluice and wait for every PORT.
# Sets SL_SLUICE_PID. Stopped at exit. Fails loudly (with the log) if sluice
# exits or does not listen within 30 s.
sl_sluice_start() {
    local cfg=$1 log=$2; shift 2
    local pid port rc
    [[ -n "${SL_SLUICE_BIN:-}" ]] || sl_die "sl_sluice_build first"
    "$SL_SLUICE_BIN" --config "$cfg" >"$log" 2>&1 &
    pid=$!
    sl_defer "sl_stop_pid $pid"
    for port in "$@"; do
        rc=0
        sl_wait_port 127.0.0.1 "$port" 30 "$pid" || rc=$?
        if ((rc != 0)); then
            sl_log "sluice log ($log):"
            tail -n 40 "$log" >&2 || true
            if ((rc == 2)); then
                sl_die "sluice exited during startup (config $cfg)"
            fi
            sl_die "sluice is not listening on 127.0.0.1:$port after 30 s (config $cfg)"
        fi
    done
    SL_SLUICE_PID=$pid
    sl_log "sluice pid $pid listening on $(printf '127.0.0.1:%s ' "$@")"
}
