# shellcheck shell=bash disable=SC2034  # sets SL_* variables for its callers
# Throwaway MariaDB servers and MySQL-protocol Sluice configs for the driver
# suite, sysbench check and benchmark scripts.
#
# Source it after lib/common.sh (it uses sl_defer, sl_free_port, ...):
#
#   source "$SCRIPT_DIR/lib/common.sh"
#   source "$SCRIPT_DIR/lib/mariadb.sh"
#   sl_init_cleanup
#   sl_mariadb_start "$password"
#   sl_mariadb_admin -e "CREATE DATABASE d"
#
# The server, like everything else started through lib/common.sh, is stopped
# and its directory deleted when the script exits for any reason.

# sl_mariadb_find_bins: set SL_MARIADBD, SL_MARIADB_INSTALL_DB, SL_MARIADB
# (the command-line client), installing the Debian packages when missing and
# running as root.
sl_mariadb_find_bins() {
    local b
    SL_MARIADBD=""
    for b in "${SL_MARIADB_BINDIR:-}/mariadbd" /usr/sbin/mariadbd /usr/local/sbin/mariadbd; do
        [[ -x "$b" ]] && { SL_MARIADBD=$b; break; }
    done
    if [[ -z "$SL_MARIADBD" ]]; then
        sl_require_cmd /usr/sbin/mariadbd mariadb-server
        SL_MARIADBD=/usr/sbin/mariadbd
    fi
    sl_require_cmd mariadb-install-db mariadb-server
    sl_require_cmd mariadb mariadb-client
    SL_MARIADB_INSTALL_DB="$(command -v mariadb-install-db)"
    SL_MARIADB="$(command -v mariadb)"
}

# sl_mariadb_start PASSWORD [EXTRA_MARIADBD_ARGS...]
# Creates fresh system tables (mariadb-install-db) in a temp dir and starts
# mariadbd on a free loopback port: superuser root (root@localhost over the
# private Unix socket, root@127.0.0.1 over TCP) with PASSWORD through
# mysql_native_password, no other accounts, an empty database "test",
# local_infile=1, max_allowed_packet=1G, max_connections=300, utf8mb4, no
# binary log, durability traded for speed. EXTRA_MARIADBD_ARGS come last on
# mariadbd's command line, so they override these (e.g.
# --max-connections=500). SL_MY_PORT_WANTED picks the port instead of a free
# one. Sets SL_MY_HOST (127.0.0.1), SL_MY_PORT, SL_MY_DIR,
# SL_MY_SOCKET, SL_MY_PID, SL_MY_VERSION. Stopped and deleted at exit.
sl_mariadb_start() {
    local password=$1; shift
    local dir port pid user_arg=() pw try rc
    sl_mariadb_find_bins
    [[ $(id -u) -ne 0 ]] || user_arg=(--user=root)
    dir="$(mktemp -d /tmp/sluice-script-mariadb.XXXXXX)"
    sl_defer "rm -rf '$dir'"
    # A string literal for the init file (backslash escapes on by default).
    pw="${password//\\/\\\\}"
    pw="${pw//\'/\'\'}"
    local storage=(
        --innodb-buffer-pool-size=128M
        --innodb-log-file-size=64M
        --innodb-use-native-aio=0
        --innodb-flush-method=fsync
        --innodb-flush-log-at-trx-commit=2
        --innodb-doublewrite=0
        --innodb-buffer-pool-load-at-startup=0
        --innodb-buffer-pool-dump-at-shutdown=0
    )
    env -u MYSQL_PWD -u MYSQL_HOST -u MYSQL_TCP_PORT -u MYSQL_UNIX_PORT LC_ALL=C \
        "$SL_MARIADB_INSTALL_DB" --no-defaults --datadir="$dir/data" --tmpdir="$dir" \
        --auth-root-authentication-method=normal --skip-test-db --skip-name-resolve \
        "${user_arg[@]}" "${storage[@]}" >"$dir/install-db.log" 2>&1 ||
        { tail -n 30 "$dir/install-db.log" >&2; sl_die "mariadb-install-db failed"; }
    # Runs at every start before connections are accepted; kept out of any
    # binary log.
    cat >"$dir/init.sql" <<EOF
SET sql_log_bin = 0;
DELETE FROM mysql.global_priv WHERE User = '' OR (User = 'root' AND Host NOT IN ('localhost', '127.0.0.1'));
FLUSH PRIVILEGES;
CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD('$pw');
ALTER USER 'root'@'127.0.0.1' IDENTIFIED VIA mysql_native_password USING PASSWORD('$pw');
CREATE DATABASE IF NOT EXISTS test;
EOF
    printf '[client]\nuser=root\npassword="%s"\n' "${password//\"/\\\"}" >"$dir/client.cnf"
    chmod 600 "$dir/init.sql" "$dir/client.cnf"
    # Another process may take the port between sl_free_port and the bind.
    for try in 1 2 3; do
        port="${SL_MY_PORT_WANTED:-$(sl_free_port)}"
        env -u MYSQL_PWD -u MYSQL_HOST -u MYSQL_TCP_PORT -u MYSQL_UNIX_PORT LC_ALL=C \
            "$SL_MARIADBD" --no-defaults "${user_arg[@]}" \
            --datadir="$dir/data" --socket="$dir/mysqld.sock" --pid-file="$dir/mariadbd.pid" \
            --log-error="$dir/mariadbd.log" --tmpdir="$dir" --init-file="$dir/init.sql" \
            --port="$port" --bind-address=127.0.0.1 --skip-name-resolve \
            --max-allowed-packet=1G --local-infile=1 --max-connections=300 \
            --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci \
            --skip-log-bin --performance-schema=OFF "${storage[@]}" "$@" \
            </dev/null >>"$dir/mariadbd.log" 2>&1 &
        pid=$!
        sl_defer "sl_stop_pid $pid 30"
        rc=0
        sl_wait_port 127.0.0.1 "$port" 60 "$pid" || rc=$?
        if ((rc == 0)); then
            break
        fi
        if ((rc == 2)) && grep -q "Address already in use" "$dir/mariadbd.log" && ((try < 3)); then
            sl_log "port $port taken meanwhile; retrying"
            continue
        fi
        tail -n 30 "$dir/mariadbd.log" >&2
        sl_die "throwaway MariaDB did not start"
    done
    SL_MY_HOST=127.0.0.1
    SL_MY_PORT=$port
    SL_MY_DIR=$dir
    SL_MY_SOCKET=$dir/mysqld.sock
    SL_MY_PID=$pid
    SL_MY_VERSION="$(sl_mariadb_admin -N -B -e 'SELECT VERSION()')" ||
        { tail -n 30 "$dir/mariadbd.log" >&2; sl_die "throwaway MariaDB does not answer over its socket"; }
    sl_log "throwaway MariaDB $SL_MY_VERSION on 127.0.0.1:$port, pid $pid (data $dir/data)"
}

# sl_hs_plugin_args READ_PORT WRITE_PORT: sets SL_HS_ARGS, the mariadbd options that
# load the reference HandlerSocket plugin listening on 127.0.0.1 on those ports.
# Debian's build has secrets of its own unless both are set: empty turns
# authentication off (as in crates/sluice-testkit).
sl_hs_plugin_args() {
    SL_HS_ARGS=(--plugin-maturity=beta --plugin-load-add=handlersocket
        --handlersocket-address=127.0.0.1
        --handlersocket-port="$1" --handlersocket-port-wr="$2"
        --handlersocket-plain-secret= --handlersocket-plain-secret-wr=)
}

# sl_mariadb_admin [MARIADB_CLI_ARGS...]: the mariadb CLI as root over the
# throwaway server's socket (e.g. -e "SQL", -N -B for bare output); or, after
# SL_MY_SOCKET="" with SL_MY_HOST/SL_MY_PORT/SL_MY_USER/SL_MY_PASSWORD set,
# over TCP to an existing server.
sl_mariadb_admin() {
    if [[ -n "${SL_MY_SOCKET:-}" ]]; then
        env -u MYSQL_PWD -u MYSQL_HOST -u MYSQL_TCP_PORT -u MYSQL_UNIX_PORT \
            "$SL_MARIADB" --defaults-file="$SL_MY_DIR/client.cnf" --protocol=socket \
            --socket="$SL_MY_SOCKET" --connect-timeout=10 --max-allowed-packet=1G "$@"
    else
        env -u MYSQL_HOST -u MYSQL_TCP_PORT -u MYSQL_UNIX_PORT MYSQL_PWD="${SL_MY_PASSWORD:-}" \
            "${SL_MARIADB:-mariadb}" --no-defaults --protocol=tcp --host="$SL_MY_HOST" \
            --port="$SL_MY_PORT" --user="${SL_MY_USER:-root}" --connect-timeout=10 \
            --max-allowed-packet=1G "$@"
    fi
}

# sl_sluice_write_mysql_config FILE BACKEND_HOST BACKEND_PORT LISTENER...
# Like sl_sluice_write_config (lib/common.sh) for MySQL: LISTENER is
# NAME:MODE:POOL_SIZE:PORT[:WAIT_TIMEOUT[:ASSIGN]], e.g. session:session:20:16033
# or tx:transaction:4:16034:5s (WAIT_TIMEOUT: the pool's wait_timeout, how long a
# client waits for a server connection; Sluice's default when omitted; ASSIGN:
# the pool's assign_server, whose listener checks passwords itself, auth
# mysql_native_password, with the user SL_SLUICE_USER / SL_SLUICE_PASSWORD). One
# server "my" (protocol mysql) and cluster "my"; one pool and one mysql
# listener (auth passthrough unless ASSIGN) per LISTENER spec. With SL_SLUICE_TLS_CERT and
# SL_SLUICE_TLS_KEY set (PEM files), every listener accepts TLS from clients
# that ask for it (tls = "allow") with that certificate, and sluice uses TLS
# towards the server when it offers it (tls = "prefer").
sl_sluice_write_mysql_config() {
    local file=$1 bhost=$2 bport=$3; shift 3
    local spec name mode size port wait assign
    {
        echo "# generated by scripts/lib/mariadb.sh"
        sl_sluice_general
        echo "[servers.my]"
        echo "protocol = \"mysql\""
        echo "host = \"$bhost\""
        echo "port = $bport"
        [[ -z "${SL_SLUICE_TLS_CERT:-}" ]] || echo "tls = \"prefer\""
        echo
        echo "[clusters.my]"
        echo "servers = [\"my\"]"
        for spec in "$@"; do
            IFS=: read -r name mode size port wait assign <<<"$spec"
            echo
            echo "[pools.$name]"
            echo "mode = \"$mode\""
            echo "size = $size"
            [[ -z "$wait" ]] || echo "wait_timeout = \"$wait\""
            [[ -z "$assign" ]] || echo "assign_server = \"$assign\""
            echo
            echo "[listeners.$name]"
            echo "protocol = \"mysql\""
            echo "address = \"127.0.0.1:$port\""
            echo "cluster = \"my\""
            echo "pool = \"$name\""
            if [[ -n "$assign" ]]; then
                echo "auth = \"mysql_native_password\""
            else
                echo "auth = \"passthrough\""
            fi
            if [[ -n "${SL_SLUICE_TLS_CERT:-}" ]]; then
                echo "tls = \"allow\""
                echo "tls_cert_file = \"$SL_SLUICE_TLS_CERT\""
                echo "tls_key_file = \"$SL_SLUICE_TLS_KEY\""
            fi
        done
        if [[ -n "${SL_SLUICE_USER:-}" ]]; then
            echo
            echo "[users.$SL_SLUICE_USER]"
            echo "password = \"$SL_SLUICE_PASSWORD\""
        fi
    } >"$file"
}
