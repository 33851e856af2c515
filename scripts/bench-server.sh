#!/usr/bin/env bash
# One throwaway server (or PgBouncer) for a benchmark file's [[process]] (see
# benches/): starts it on a fixed loopback port, then waits; SIGTERM or SIGINT
# stops it and deletes its directory. Nothing is kept.
#
#   scripts/bench-server.sh pg PORT [MAX_CONNECTIONS] [SYNC_STANDBY]
#       PostgreSQL (the installed major version), trust auth on 127.0.0.1,
#       database "bench"; max_connections default 1200; with SYNC_STANDBY,
#       synchronous replication: synchronous_commit = on and
#       synchronous_standby_names = 'SYNC_STANDBY' (a replica's NAME below)
#   scripts/bench-server.sh pg-replica PORT PRIMARY_PORT [MAX_CONNECTIONS] [NAME]
#       a streaming replica of the "pg" server on PRIMARY_PORT (waits for it),
#       known to it as NAME (cluster_name; default walreceiver); it names no
#       synchronous standby of its own, so that it commits alone once promoted,
#       and retries its stream every 100 ms (a promotion may wait for that)
#   scripts/bench-server.sh mariadb PORT [MAX_CONNECTIONS] [HS_PORT]
#       MariaDB, root@127.0.0.1 without a password, database "bench";
#       max_connections default 1200; with HS_PORT also the reference
#       HandlerSocket plugin (reads on HS_PORT, writes on HS_PORT+1, no secret)
#   scripts/bench-server.sh mariadb-primary PORT [MAX_CONNECTIONS]
#       as "mariadb", with a binary log (server_id 1) and semi-synchronous
#       replication (AFTER_SYNC: a commit is acknowledged once a semi-synchronous
#       replica has it; asynchronous while none is connected), and a user
#       bench@127.0.0.1 (password "bench", every privilege) for proxies that log
#       in with a password
#   scripts/bench-server.sh mariadb-replica PORT PRIMARY_PORT [MAX_CONNECTIONS] [sync]
#       a GTID replica (read_only) of the "mariadb-primary" server on
#       PRIMARY_PORT (waits for it), replicating its binary log from the start
#       (as root); with "sync", a semi-synchronous one; waits until caught up
#   scripts/bench-server.sh pgbouncer PORT BACKEND_PORT [MODE] [POOL_SIZE] [tls]
#       PgBouncer (Debian package) in front of 127.0.0.1:BACKEND_PORT,
#       trust auth, MODE default transaction, pool default 20,
#       max_client_conn 12000, listen_backlog 4096 (as Sluice's); with "tls",
#       clients may log in over TLS (the certificate of BENCH_CERTS below)
#   scripts/bench-server.sh sluice CONFIG
#       makes the throwaway certificates in BENCH_CERTS
#       (/tmp/sluice-bench-certs: server-cert.pem, server-key.pem, ca.pem) if
#       they are missing, then runs target/release/sluice (SLUICE_BIN) with
#       CONFIG in this process, which a config with TLS listeners points at
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib/common.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/common.sh"
# shellcheck source=lib/mariadb.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/mariadb.sh"
sl_init_cleanup

BENCH_CERTS=/tmp/sluice-bench-certs

usage() { sed -n '2,39p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
(($# >= 2)) || usage
kind=$1 port=$2
if [[ "$kind" == sluice ]]; then
    config=$2
    [[ -f "$config" ]] || sl_die "no Sluice config at $config"
    sl_test_certs "$BENCH_CERTS"
    exec "${SLUICE_BIN:-target/release/sluice}" --config "$config"
fi
[[ "$port" =~ ^[1-9][0-9]*$ ]] || usage

case "$kind" in
    pg)
        max=${3:-1200} sync=${4:-}
        conf=("max_connections = $max")
        if [[ -n "$sync" ]]; then
            [[ "$sync" =~ ^[A-Za-z0-9_]+$ ]] || usage
            conf+=("synchronous_commit = on" "synchronous_standby_names = '$sync'")
        fi
        SL_PG_HOST_AUTH=trust SL_PG_PORT_WANTED=$port \
            sl_pg_start_throwaway "" "${conf[@]}"
        # The synchronous standby is not there yet: this commit must not wait for it.
        sl_pg_admin -c "SET synchronous_commit = local" -c "CREATE DATABASE bench"
        ;;
    pg-replica)
        (($# >= 3)) || usage
        name=${5:-}
        [[ "$name" =~ ^[A-Za-z0-9_]*$ ]] || usage
        sl_wait_port 127.0.0.1 "$3" 120 || sl_die "no primary on port $3"
        # A promotion requested as the stream from a dead primary fails waits out
        # wal_retrieve_retry_interval (default 5 s) before it completes.
        conf=("max_connections = ${4:-1200}" "synchronous_standby_names = ''"
            "wal_retrieve_retry_interval = '100ms'")
        [[ -z "$name" ]] || conf+=("cluster_name = '$name'")
        SL_PG_PORT_WANTED=$port sl_pg_start_replica "$3" "${conf[@]}"
        ;;
    mariadb)
        max=${3:-1200} hs=${4:-}
        extra=(--max-connections="$max" --innodb-buffer-pool-size=512M)
        if [[ -n "$hs" ]]; then
            sl_hs_plugin_args "$hs" "$((hs + 1))"
            extra+=("${SL_HS_ARGS[@]}")
        fi
        SL_MY_PORT_WANTED=$port sl_mariadb_start "" "${extra[@]}"
        sl_mariadb_admin -e "CREATE DATABASE IF NOT EXISTS bench"
        if [[ -n "$hs" ]]; then
            sl_wait_port 127.0.0.1 "$hs" 30 || sl_die "the HandlerSocket plugin is not listening on $hs"
        fi
        ;;
    mariadb-primary)
        SL_MY_PORT_WANTED=$port sl_mariadb_start "" --max-connections="${3:-1200}" \
            --innodb-buffer-pool-size=512M --server-id=1 --log-bin=binlog \
            --rpl-semi-sync-master-enabled=ON --rpl-semi-sync-master-wait-point=AFTER_SYNC \
            --rpl-semi-sync-master-wait-no-slave=OFF --rpl-semi-sync-master-timeout=600000
        sl_mariadb_admin -e "CREATE DATABASE IF NOT EXISTS bench;
            CREATE USER IF NOT EXISTS 'bench'@'127.0.0.1' IDENTIFIED BY 'bench';
            GRANT ALL PRIVILEGES ON *.* TO 'bench'@'127.0.0.1'"
        ;;
    mariadb-replica)
        (($# >= 3)) || usage
        primary=$3 semisync=OFF
        [[ "$primary" =~ ^[1-9][0-9]*$ ]] || usage
        case "${5:-}" in sync) semisync=ON ;; "") ;; *) usage ;; esac
        sl_wait_port 127.0.0.1 "$primary" 120 || sl_die "no primary on port $primary"
        SL_MY_PORT_WANTED=$port sl_mariadb_start "" --max-connections="${4:-1200}" \
            --innodb-buffer-pool-size=512M --server-id="$port" --read-only=ON \
            --log-bin=binlog --log-slave-updates=ON --rpl-semi-sync-slave-enabled="$semisync"
        sl_mariadb_admin -e "CHANGE MASTER TO MASTER_HOST = '127.0.0.1',
            MASTER_PORT = $primary, MASTER_USER = 'root', MASTER_PASSWORD = '',
            MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1; START SLAVE"
        pos="$(SL_MY_SOCKET="" SL_MY_HOST=127.0.0.1 SL_MY_PORT=$primary sl_mariadb_admin -N -B \
            -e "SELECT @@gtid_binlog_pos")" || sl_die "cannot read the primary's position"
        caught="$(sl_mariadb_admin -N -B -e "SELECT MASTER_GTID_WAIT('$pos', 60)")"
        [[ "$caught" == 0 ]] || {
            sl_mariadb_admin -e "SHOW SLAVE STATUS\G" >&2 || true
            sl_die "the replica did not reach the primary's $pos within 60 s"
        }
        sl_log "GTID replica of 127.0.0.1:$primary (semi-synchronous: $semisync)"
        ;;
    pgbouncer)
        (($# >= 3)) || usage
        extra="listen_backlog = 4096"
        case "${6:-}" in
            tls)
                sl_test_certs "$BENCH_CERTS"
                # PgBouncer runs as postgres: it reads a copy of the key it owns.
                pgb_certs="$(mktemp -d /tmp/sluice-bench-pgbouncer-certs.XXXXXX)"
                sl_defer "rm -rf '$pgb_certs'"
                cp "$BENCH_CERTS/server-cert.pem" "$BENCH_CERTS/server-key.pem" "$pgb_certs/"
                chown -R postgres: "$pgb_certs"
                extra+=$'\n'"client_tls_sslmode = allow"
                extra+=$'\n'"client_tls_cert_file = $pgb_certs/server-cert.pem"
                extra+=$'\n'"client_tls_key_file = $pgb_certs/server-key.pem"
                ;;
            "") ;;
            *) usage ;;
        esac
        SL_PGBOUNCER_EXTRA=$extra SL_PGB_PORT_WANTED=$port \
            sl_pgbouncer_start "${4:-transaction}" 127.0.0.1 "$3" postgres "" "${5:-20}" 12000
        ;;
    *) usage ;;
esac
sl_log "$kind ready on 127.0.0.1:$port; waiting for SIGTERM"
# `wait` is interruptible, so the trap runs at once.
sleep infinity &
sl_defer "kill $! 2>/dev/null"
wait $!
