#!/usr/bin/env bash
# sysbench with and without the MySQL compressed protocol, directly against a
# throwaway MariaDB and through Sluice (docs/benchmarks.md, "MySQL compressed
# protocol").
#
#   scripts/bench-mysql-compress.sh [ROUNDS] [SECONDS] [THREADS]
#
# Defaults: 3 rounds of 10 s, 16 threads. Targets, each with plain and with
# compressed clients (sysbench --mysql-compression=on, zlib):
#   direct        the server
#   sluice        a session-mode pass-through listener, plain server leg
#   sluice-zlib   the same in a second Sluice whose [servers] compression =
#                 "zlib" (both legs compressed for compressed clients)
# Workloads: oltp_read_only (prepared statements; ranges of 100 rows) and
# oltp_point_select (one row). Runs alternate target by target within each
# round. Sluice's CPU time is read from /proc before and after each run. The
# report (stdout and target/bench/mysql-compress-<timestamp>.md) gives the
# median qps, the ratio to direct with the same client setting, and Sluice
# CPU ms per 1,000 queries. SLUICE_BIN uses a prebuilt sluice.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib/common.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/common.sh"
# shellcheck source=lib/mariadb.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/mariadb.sh"
sl_init_cleanup

ROUNDS=${1:-3}
DURATION=${2:-10}
THREADS=${3:-16}
sl_require_cmd sysbench sysbench

PW=bench-pw
sl_mariadb_start "$PW"
sl_mariadb_admin -e "CREATE DATABASE sbtest"
SB=(--mysql-host=127.0.0.1 --mysql-user=root --mysql-password="$PW" --mysql-db=sbtest)
sl_run sysbench oltp_read_only "${SB[@]}" --mysql-port="$SL_MY_PORT" --tables=4 \
    --table-size=100000 --threads=2 prepare >/dev/null

sl_sluice_build
DIR=""
sl_mktemp_dir DIR sluice-bench-compress
declare -A PORT PID
PORT[direct]=$SL_MY_PORT
PID[direct]=""
for t in sluice sluice-zlib; do
    PORT[$t]="$(sl_free_port)"
    sl_sluice_write_mysql_config "$DIR/$t.toml" "$SL_MY_HOST" "$SL_MY_PORT" \
        "session:session:$((THREADS + 4)):${PORT[$t]}"
    if [[ $t == sluice-zlib ]]; then
        sed -i 's/^\[servers.my\]$/[servers.my]\ncompression = "zlib"/' "$DIR/$t.toml"
    fi
    sl_sluice_start "$DIR/$t.toml" "$DIR/$t.log" "${PORT[$t]}"
    PID[$t]=$SL_SLUICE_PID
done

RAW="$DIR/raw.tsv"
for ((r = 1; r <= ROUNDS; r++)); do
    for w in oltp_read_only oltp_point_select; do
        for t in direct sluice sluice-zlib; do
            for comp in off on; do
                log="$DIR/run.log"
                before=0
                [[ -z "${PID[$t]}" ]] || before="$(sl_proc_cpu_ticks "${PID[$t]}")"
                sl_run sysbench "$w" "${SB[@]}" --mysql-port="${PORT[$t]}" --tables=4 \
                    --table-size=100000 --threads="$THREADS" --time="$DURATION" \
                    --mysql-compression="$comp" run >"$log" 2>&1 || sl_die "sysbench $w $t $comp failed: $(tail -n 3 "$log")"
                ticks=-
                [[ -z "${PID[$t]}" ]] || ticks=$(($(sl_proc_cpu_ticks "${PID[$t]}") - before))
                qps="$(sed -n 's/^ *queries: *[0-9]* *(\([0-9.]*\) per sec.)$/\1/p' "$log")"
                queries="$(sed -n 's/^ *queries: *\([0-9]*\) .*$/\1/p' "$log")"
                printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$w" "$t" "$comp" "$qps" "$queries" "$ticks" >>"$RAW"
                sl_log "round $r $w $t compression=$comp: $qps qps"
            done
        done
    done
done

mkdir -p "$SL_ROOT/target/bench"
OUT="$SL_ROOT/target/bench/mysql-compress-$(date -u +%Y%m%dT%H%M%SZ).md"
HZ="$(getconf CLK_TCK)"
{
    echo "scripts/bench-mysql-compress.sh $ROUNDS $DURATION $THREADS ($THREADS threads, $ROUNDS rounds of $DURATION s, MariaDB $SL_MY_VERSION)"
    echo
    echo "| workload | target | client compression | median qps | ratio to direct | Sluice CPU ms / 1k queries |"
    echo "|:---|:---|:---|---:|---:|---:|"
    awk -F'\t' -v hz="$HZ" '
        { k = $1 SUBSEP $2 SUBSEP $3; n[k]++; q[k, n[k]] = $4; c[k] += $6; qs[k] += $5 }
        function median(k,   i, j, t, m) {
            m = n[k]
            for (i = 1; i <= m; i++) a[i] = q[k, i]
            for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
            return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
        }
        END {
            split("oltp_read_only oltp_point_select", ws, " ")
            split("direct sluice sluice-zlib", ts, " ")
            split("off on", cs, " ")
            for (wi = 1; wi <= 2; wi++) for (ti = 1; ti <= 3; ti++) for (ci = 1; ci <= 2; ci++) {
                k = ws[wi] SUBSEP ts[ti] SUBSEP cs[ci]
                d = ws[wi] SUBSEP "direct" SUBSEP cs[ci]
                cpu = ts[ti] == "direct" ? "—" : sprintf("%.1f", c[k] * 1000 / hz / qs[k] * 1000)
                printf "| %s | %s | %s | %.0f | %.2f | %s |\n", ws[wi], ts[ti], cs[ci], median(k), median(k) / median(d), cpu
            }
        }' "$RAW"
} | tee "$OUT"
