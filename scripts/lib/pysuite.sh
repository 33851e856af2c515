# shellcheck shell=bash disable=SC2034  # sets SL_SUITE_* variables for its callers
# The steps every Python driver-suite script shares (scripts/psycopg2-suite.sh,
# mysqlclient-suite.sh, asyncpg-suite.sh, pg8000-suite.sh,
# aiomysql-suite.sh): the driver's own test suite, taken from its PyPI sdist,
# runs under pytest in a cached venv against one endpoint (a server, or a proxy
# in front of one), and its per-test outcomes are recorded for
# scripts/lib/outcomes.py.
#
# Source it after lib/common.sh, then:
#
#   sl_suite_init NAME VERSION        # e.g. asyncpg 0.30.0
#   setup() { ...sl_suite_sdist, sl_suite_pip... }
#   preflight() { ... }               # optional; reads SL_SUITE_HOST etc.
#   suite_env() { export ...; }       # optional; runs in pytest's process
#   suite_run() { sl_suite_pytest DIR "$@" ARGS...; }
#   sl_suite_main DEFAULT_USER DEFAULT_DBNAME "$@"
#
# Environment knobs, PREFIX being NAME in upper case (e.g. ASYNCPG):
#   PREFIX_SUITE_CACHE        cache dir (default target/driver-suites)
#   PREFIX_SUITE_RESULTS      results dir (default CACHE/results/NAME-HOST-PORT)
#   PREFIX_SUITE_TIMEOUT      whole-run limit in s (default 600, or the
#                             script's SL_SUITE_TIMEOUT_DEFAULT)
#   PREFIX_SUITE_TEST_TIMEOUT per-test limit in s (default 60, or the
#                             script's SL_SUITE_TEST_TIMEOUT_DEFAULT)
#   PREFIX_SUITE_PYTEST_ARGS  extra pytest args (e.g. "-k test_cursor")

# sl_suite_init NAME VERSION: sets SL_SUITE_NAME, SL_SUITE_VERSION,
# SL_SUITE_PREFIX (NAME in upper case), SL_SUITE_CACHE, SL_SUITE_VENV
# (CACHE/NAME-venv) and SL_SUITE_STAMP (present once the venv is complete).
sl_suite_init() {
    SL_SUITE_NAME=$1
    SL_SUITE_VERSION=$2
    SL_SUITE_PREFIX="${1^^}"
    local cache_var="${SL_SUITE_PREFIX}_SUITE_CACHE"
    SL_SUITE_CACHE="${!cache_var:-$SL_ROOT/target/driver-suites}"
    SL_SUITE_VENV="$SL_SUITE_CACHE/$1-venv"
    SL_SUITE_STAMP="$SL_SUITE_VENV/.sluice-$1-$2.ok"
}

# sl_suite_knob NAME DEFAULT: the value of PREFIX_SUITE_NAME, or DEFAULT.
sl_suite_knob() {
    local var="${SL_SUITE_PREFIX}_SUITE_$1"
    printf '%s' "${!var:-$2}"
}

# sl_suite_sdist DIST CHECKFILE: download DIST==VERSION's sdist into the cache
# (once) and unpack it (once: CHECKFILE, a path inside it, must exist). Sets
# SL_SUITE_SRC to the unpacked tree. Only the sdist is built from source by
# pip download: build dependencies come as wheels.
sl_suite_sdist() {
    local dist=$1 check=$2
    local sdist="$SL_SUITE_CACHE/$dist-$SL_SUITE_VERSION.tar.gz"
    SL_SUITE_SRC="$SL_SUITE_CACHE/$dist-$SL_SUITE_VERSION"
    mkdir -p "$SL_SUITE_CACHE"
    if [[ ! -f "$sdist" ]]; then
        sl_log "downloading $dist==$SL_SUITE_VERSION sdist"
        python3 -m pip download -q --no-deps --no-binary "$dist" \
            "$dist==$SL_SUITE_VERSION" -d "$SL_SUITE_CACHE" >&2 || sl_die "pip download failed"
        [[ -f "$sdist" ]] || sl_die "expected $sdist after pip download"
    fi
    if [[ ! -f "$SL_SUITE_SRC/$check" ]]; then
        sl_log "unpacking $sdist"
        rm -rf "$SL_SUITE_SRC"
        tar -xzf "$sdist" -C "$SL_SUITE_CACHE"
        [[ -f "$SL_SUITE_SRC/$check" ]] || sl_die "sdist has no $check"
    fi
}

# sl_suite_pip PIP_INSTALL_ARGS...: pip install into the suite's venv,
# creating it first if needed.
sl_suite_pip() {
    if [[ ! -x "$SL_SUITE_VENV/bin/python" ]]; then
        sl_log "creating venv $SL_SUITE_VENV"
        python3 -m venv "$SL_SUITE_VENV" || sl_die "python3 -m venv failed"
    fi
    "$SL_SUITE_VENV/bin/python" -m pip install -q --disable-pip-version-check "$@" >&2 ||
        sl_die "pip install $* failed"
}

# sl_suite_ready PYTHON_EXPR: check that PYTHON_EXPR (run in the venv, outside
# any source tree) prints the suite's VERSION, then mark the venv complete.
sl_suite_ready() {
    local got
    got="$(cd / && "$SL_SUITE_VENV/bin/python" -c "$1")" ||
        sl_die "the $SL_SUITE_NAME venv is broken ($1 failed)"
    [[ "$got" == "$SL_SUITE_VERSION"* ]] ||
        sl_die "installed $SL_SUITE_NAME is $got, not $SL_SUITE_VERSION"
    touch "$SL_SUITE_STAMP"
    sl_log "$SL_SUITE_NAME $SL_SUITE_VERSION ready in $SL_SUITE_VENV"
}

# sl_suite_build PYTHON_EXPR PIP_PINS...: for drivers built from their sdist,
# once (until the venv is complete): install the pinned test dependencies,
# build and install the driver from the unpacked sdist, check its version with
# sl_suite_ready PYTHON_EXPR.
sl_suite_build() {
    local expr=$1; shift
    [[ ! -f "$SL_SUITE_STAMP" ]] || return 0
    sl_log "installing $* and building $SL_SUITE_NAME from $SL_SUITE_SRC"
    sl_suite_pip "$@"
    sl_suite_pip --force-reinstall --no-deps "$SL_SUITE_SRC"
    sl_suite_ready "$expr"
}

# sl_suite_preflight_py <<'EOF' ... EOF: run the Python script on stdin in the
# venv (outside any source tree), with the endpoint's HOST PORT USER PASSWORD
# DBNAME as its arguments (sys.argv[1:6]).
sl_suite_preflight_py() {
    sl_suite_python - "$SL_SUITE_HOST" "$SL_SUITE_PORT" "$SL_SUITE_USER" "$SL_SUITE_PASSWORD" "$SL_SUITE_DBNAME"
}

# sl_suite_python ARGS...: the venv's python, run outside any source tree
# (for preflight snippets: `sl_suite_python - "$@" <<'EOF'`).
sl_suite_python() {
    (cd / && PYTHONDONTWRITEBYTECODE=1 "$SL_SUITE_VENV/bin/python" "$@")
}

# sl_suite_clear_env GLOB...: unset every exported variable whose name
# matches a GLOB (in suite_env: the caller's settings must not reach the
# suite).
sl_suite_clear_env() {
    local v g
    for v in $(compgen -e); do
        for g in "$@"; do
            # shellcheck disable=SC2053  # GLOB is a pattern
            if [[ "$v" == $g ]]; then unset "$v"; fi
        done
    done
}

# sl_suite_pytest DIR OUTCOMES LOG LIMIT TEST_LIMIT PYTEST_ARGS...: run pytest
# in DIR with the outcome recorder (lib/outcomes_pytest_plugin.py) writing
# OUTCOMES, output to LOG; suite_env, when defined, sets the environment of
# pytest's process first. Returns non-zero (after printing the log's tail) if
# pytest did not run to the end: timeout, crash, usage error; test failures
# are not errors.
sl_suite_pytest() {
    local dir=$1 outcomes=$2 log=$3 limit=$4 test_limit=$5; shift 5
    local rc=0 pid
    (
        cd "$dir" || exit 1
        if declare -F suite_env >/dev/null; then suite_env; fi
        export SUITE_OUTCOMES="$outcomes"
        export PYTHONPATH="$SL_ROOT/scripts/lib" PYTHONDONTWRITEBYTECODE=1
        exec timeout --kill-after=30 "$limit" "$SL_SUITE_VENV/bin/python" -m pytest \
            -p outcomes_pytest_plugin -p no:cacheprovider -q -rfEs \
            --timeout="$test_limit" "$@"
    ) >"$log" 2>&1 &
    pid=$!
    sl_defer "sl_stop_pid $pid"
    wait "$pid" || rc=$?
    if ((rc == 124 || rc == 137)); then
        tail -n 30 "$log" >&2
        sl_log "pytest timed out after ${limit}s"
        return 1
    fi
    if ((rc != 0 && rc != 1)); then
        tail -n 30 "$log" >&2
        sl_log "pytest exited with status $rc (not a test failure)"
        return 1
    fi
    return 0
}

# sl_suite_usage: the script's header comment down to its --setup-only usage
# line, as its usage message.
sl_suite_usage() {
    sed -n '2,/--setup-only/p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# sl_suite_main DEFAULT_USER DEFAULT_DBNAME "$@": the command line every suite
# script takes,
#   SCRIPT HOST PORT [USER] [PASSWORD] [DBNAME]   run the suite
#   SCRIPT --setup-only                           only prepare the venv
# Calls setup, then (with SL_SUITE_HOST, SL_SUITE_PORT, SL_SUITE_USER,
# SL_SUITE_PASSWORD, SL_SUITE_DBNAME and SL_SUITE_RESULTS set) preflight when
# defined, suite_run OUTCOMES LOG LIMIT TEST_LIMIT EXTRA_PYTEST_ARGS..., and
# suite_after when defined (e.g. retries), then prints the summary line
# "NAME: N passed, N failed, N skipped". Exits 0 when the suite ran, whatever
# its failures; non-zero only if it could not run.
sl_suite_main() {
    local default_user=$1 default_db=$2; shift 2
    if [[ "${1:-}" == "--setup-only" ]]; then
        setup
        exit 0
    fi
    [[ $# -ge 2 && $# -le 5 && "${1:-}" != -* ]] || sl_suite_usage
    SL_SUITE_HOST=$1 SL_SUITE_PORT=$2 SL_SUITE_USER=${3:-$default_user}
    SL_SUITE_PASSWORD=${4:-} SL_SUITE_DBNAME=${5:-$default_db}
    [[ "$SL_SUITE_DBNAME" =~ ^[A-Za-z0-9_]+$ ]] || sl_die "database name must be [A-Za-z0-9_]+: $SL_SUITE_DBNAME"
    local results limit test_limit
    results="$(sl_suite_knob RESULTS "$SL_SUITE_CACHE/results/$SL_SUITE_NAME-$1-$2")"
    limit="$(sl_suite_knob TIMEOUT "${SL_SUITE_TIMEOUT_DEFAULT:-600}")"
    test_limit="$(sl_suite_knob TEST_TIMEOUT "${SL_SUITE_TEST_TIMEOUT_DEFAULT:-60}")"
    SL_SUITE_RESULTS=$results

    setup
    mkdir -p "$results"
    rm -f "$results/outcomes.tsv" "$results/failed.txt" "$results/pytest.log" "$results"/retr*

    if declare -F preflight >/dev/null; then
        preflight || sl_die "preflight against $SL_SUITE_HOST:$SL_SUITE_PORT failed; suite not run"
    fi

    local -a extra=()
    read -r -a extra <<<"$(sl_suite_knob PYTEST_ARGS "")"

    sl_log "running $SL_SUITE_NAME $SL_SUITE_VERSION tests against $SL_SUITE_HOST:$SL_SUITE_PORT db=$SL_SUITE_DBNAME user=$SL_SUITE_USER (log: $results/pytest.log)"
    local start=$SECONDS
    suite_run "$results/outcomes.tsv" "$results/pytest.log" "$limit" "$test_limit" "${extra[@]}" ||
        sl_die "the $SL_SUITE_NAME suite could not run against $SL_SUITE_HOST:$SL_SUITE_PORT"
    local elapsed=$((SECONDS - start))
    [[ -s "$results/outcomes.tsv" ]] || sl_die "no test outcomes recorded ($results/outcomes.tsv)"
    sl_log "pytest: $(tail -n 1 "$results/pytest.log") [${elapsed}s wall]"
    if declare -F suite_after >/dev/null; then suite_after "$test_limit"; fi
    python3 "$SL_ROOT/scripts/lib/outcomes.py" summary "$SL_SUITE_NAME" "$results/outcomes.tsv" "$results/failed.txt"
    echo "failed test ids: $results/failed.txt"
    echo "per-test outcomes: $results/outcomes.tsv"
    echo "runtime: ${elapsed}s"
}

# sl_suite_pg_reset [DROP_DB...]: for suites that run in a shared database
# (asyncpg's and pg8000's tests assume "postgres"): through the endpoint, with
# psql, drop and recreate schema public of SL_SUITE_DBNAME (so that what an
# earlier, interrupted run left behind cannot fail this one), drop the
# databases DROP_DB (created and dropped by the suite's own tests), and create
# extension hstore. Prints the server version. Fails if the endpoint is
# unusable.
sl_suite_pg_reset() {
    local db
    local -a psql=(env PGPASSWORD="$SL_SUITE_PASSWORD" PGCONNECT_TIMEOUT=15
        PGOPTIONS="-c client_min_messages=warning" psql -X -q -v ON_ERROR_STOP=1 -h "$SL_SUITE_HOST" -p "$SL_SUITE_PORT" -U "$SL_SUITE_USER")
    sl_require_cmd psql postgresql-client
    for db in "$@"; do
        "${psql[@]}" -d "$SL_SUITE_DBNAME" -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" || return 1
    done
    "${psql[@]}" -d "$SL_SUITE_DBNAME" -c "DROP SCHEMA IF EXISTS public CASCADE" -c "CREATE SCHEMA public" \
        -c "GRANT ALL ON SCHEMA public TO PUBLIC" -c "CREATE EXTENSION IF NOT EXISTS hstore" || return 1
    sl_log "preflight: $("${psql[@]}" -d "$SL_SUITE_DBNAME" -tAc "select 'server ' || current_setting('server_version') || ', superuser=' || (select rolsuper from pg_roles where rolname = current_user)")"
}
