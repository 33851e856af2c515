#!/usr/bin/env bash
# Installs what Sluice's test suites need, and only what is missing:
#   Debian packages  PostgreSQL server + client + contrib, MariaDB server + client,
#                    PgBouncer, Chromium + ChromeDriver (the dashboard's test), sysbench, libpq-dev, libmariadb-dev, pkg-config,
#                    python3-dev, build-essential
#   cargo tools      cargo-nextest; cargo-fuzz when fuzz/ exists and a nightly
#                    toolchain is installed
#   Python packages  pytest (for the driver suites)
# Idempotent and quiet: prints one line per thing installed (or one line saying
# everything was present). Safe on a fresh Debian 12 machine as root; uses sudo
# when not root. Package installs never start, stop or restart services (a
# policy-rc.d is in place while apt runs), so servers already running on
# 5432/3306 are left alone. apt-get update runs only if something is missing.
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive
cd "$(dirname "$0")/.."

log() { printf 'install-deps: %s\n' "$*"; }
die() { printf 'install-deps: ERROR: %s\n' "$*" >&2; exit 1; }

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo -n)
    fi
fi
can_root() { [ "$(id -u)" -eq 0 ] || [ ${#SUDO[@]} -gt 0 ]; }
as_root() { "${SUDO[@]}" "$@"; }

installed_anything=0
LOG=$(mktemp -t sluice-install-deps.XXXXXX)
POLICY_CREATED=0
cleanup() {
    if [ "$POLICY_CREATED" = 1 ]; then
        as_root rm -f /usr/sbin/policy-rc.d || true
    fi
    rm -f "$LOG"
}
trap cleanup EXIT

# ---------------------------------------------------------------- Debian packages
have_glob() { compgen -G "$1" >/dev/null 2>&1; }
python_headers() {
    python3 -c 'import os, sys, sysconfig
sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)' \
        >/dev/null 2>&1
}

declare -a missing=()
have_glob '/usr/lib/postgresql/*/bin/postgres' || missing+=(postgresql)
command -v psql >/dev/null 2>&1 || missing+=(postgresql-client)
have_glob '/usr/share/postgresql/*/extension/pgcrypto.control' || missing+=(postgresql-contrib)
# mariadb-server brings mariadbd and mariadb-install-db (via mariadb-server-core) and the
# server's ed25519 auth plugin (Debian has no separate package for it); the client's
# client_ed25519 comes with mariadb-client (libmariadb3).
{ [ -x /usr/sbin/mariadbd ] && command -v mariadb-install-db >/dev/null 2>&1 \
    && have_glob '/usr/lib/mysql/plugin/auth_ed25519.so'; } || missing+=(mariadb-server)
command -v mariadb >/dev/null 2>&1 || missing+=(mariadb-client)
command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || missing+=(pgbouncer)
# The dashboard's test drives a real headless browser through ChromeDriver.
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
command -v sysbench >/dev/null 2>&1 || missing+=(sysbench)
# A real HA manager for the routing tests: Patroni with etcd as its store.
command -v patroni >/dev/null 2>&1 || missing+=(patroni)
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
{ command -v pg_config >/dev/null 2>&1 && have_glob '/usr/include/postgresql/libpq-fe.h'; } \
    || missing+=(libpq-dev)
# mysqlclient (the MySQL driver suite) builds against the MariaDB C client
# library, which it finds through pkg-config (libmariadb.pc).
{ command -v mariadb_config >/dev/null 2>&1 && have_glob '/usr/include/mariadb/mysql.h'; } \
    || missing+=(libmariadb-dev)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
python_headers || dpkg -s python3-dev >/dev/null 2>&1 || missing+=(python3-dev)
{ command -v cc >/dev/null 2>&1 && command -v make >/dev/null 2>&1 \
    && dpkg -s build-essential >/dev/null 2>&1; } || missing+=(build-essential)

if [ ${#missing[@]} -gt 0 ]; then
    can_root || die "missing packages (${missing[*]}) and neither root nor sudo available"
    # Keep package scripts from starting/stopping services.
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' | as_root tee /usr/sbin/policy-rc.d >/dev/null
        as_root chmod 755 /usr/sbin/policy-rc.d
        POLICY_CREATED=1
    fi
    if ! as_root apt-get -qq -o DPkg::Lock::Timeout=300 update >"$LOG" 2>&1; then
        cat "$LOG" >&2
        die "apt-get update failed"
    fi
    if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get -qq -y \
        -o DPkg::Lock::Timeout=300 \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
        install --no-install-recommends "${missing[@]}" >"$LOG" 2>&1; then
        cat "$LOG" >&2
        die "apt-get install ${missing[*]} failed"
    fi
    for pkg in "${missing[@]}"; do
        log "installed $pkg (apt)"
    done
    installed_anything=1
fi

# Servers refuse to run as root; the testkit runs them as the postgres OS user.
if [ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1; then
    useradd --system --user-group --home-dir /var/lib/postgresql --shell /bin/bash postgres
    log "created OS user postgres"
    installed_anything=1
fi

# ---------------------------------------------------------------- cargo tools
command -v cargo >/dev/null 2>&1 || die "cargo not found (install a Rust toolchain first)"

for component in rustfmt clippy; do
    sub=${component/rustfmt/fmt}
    if ! cargo "$sub" --version >/dev/null 2>&1; then
        if command -v rustup >/dev/null 2>&1 && rustup component add "$component" >"$LOG" 2>&1; then
            log "installed $component (rustup)"
            installed_anything=1
        else
            die "cargo $sub is missing and rustup could not add $component"
        fi
    fi
done

if ! cargo nextest --version >/dev/null 2>&1; then
    if ! cargo install --quiet --locked cargo-nextest >"$LOG" 2>&1; then
        cat "$LOG" >&2
        die "cargo install cargo-nextest failed"
    fi
    log "installed cargo-nextest (cargo install)"
    installed_anything=1
fi

if [ -d fuzz ] && cargo +nightly --version >/dev/null 2>&1 \
    && ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    if cargo install --quiet --locked cargo-fuzz >"$LOG" 2>&1; then
        log "installed cargo-fuzz (cargo install)"
        installed_anything=1
    else
        log "WARNING: cargo install cargo-fuzz failed; fuzzing will be skipped"
    fi
fi

# ---------------------------------------------------------------- Python packages
if ! python3 -c 'import pytest' >/dev/null 2>&1; then
    pip_install() {
        python3 -m pip install --quiet --disable-pip-version-check "$@" >"$LOG" 2>&1
    }
    if pip_install pytest || pip_install --break-system-packages pytest; then
        log "installed pytest (pip)"
        installed_anything=1
    else
        cat "$LOG" >&2
        die "pip install pytest failed"
    fi
fi

if [ "$installed_anything" = 0 ]; then
    log "all dependencies present"
fi
