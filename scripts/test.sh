#!/usr/bin/env bash
# The one command that runs every Sluice test (CI runs it through .ci/run):
#   1. scripts/install-deps.sh           (installs whatever is missing)
#   2. cargo fmt --check
#   3. cargo clippy, all targets, -D warnings
#   4. the workspace tests (cargo nextest, or cargo test without it) + doctests,
#      then, as a step of their own, the routing tests that run real replication
#      and failovers (tests/*_routes.rs, *_auth_query.rs, pg_patroni.rs)
#   5. scripts/driver-suites.sh          (if it exists)
#   6. scripts/sysbench-check.sh         (if it exists; sysbench through Sluice's
#                                         MySQL listeners, under a minute)
#      (5 and 6 run the debug binary the tests built, unless SLUICE_BIN names one)
#   7. a short run of every fuzz target  (if fuzz/ exists, with nightly + cargo-fuzz)
# Stops at the first failing step with a non-zero exit. Knobs:
#   SLUICE_TEST_THREADS  parallel tests (default 2: the CI machine has 2 cores)
#   SLUICE_BUILD_JOBS    parallel compile jobs (default 2)
#   SLUICE_SYSBENCH_CHECK=0  skip step 6
#   SLUICE_BIN           the sluice binary steps 5 and 6 run (default: target/debug/sluice)
#   SLUICE_FUZZ_SECONDS  seconds per fuzz target (default 60; all targets
#                        together get at most SLUICE_FUZZ_BUDGET, default 150,
#                        so that the whole run stays under 20 minutes)
set -euo pipefail
cd "$(dirname "$0")/.."

THREADS=${SLUICE_TEST_THREADS:-2}
JOBS=${SLUICE_BUILD_JOBS:-2}
FUZZ_SECONDS=${SLUICE_FUZZ_SECONDS:-60}
FUZZ_BUDGET=${SLUICE_FUZZ_BUDGET:-150}
if [ "${CI:-}" = "true" ]; then
    export CARGO_INCREMENTAL=0
fi
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}

START=$(date +%s)
section() {
    printf '\n======== %s  (+%ss) ========\n' "$*" "$(($(date +%s) - START))"
}

section "dependencies"
bash scripts/install-deps.sh

section "cargo fmt --check"
cargo fmt --all -- --check

section "cargo clippy"
cargo clippy --workspace --all-targets -j "$JOBS" -- -D warnings

section "tests"
if cargo nextest --version >/dev/null 2>&1; then
    # (the integration tests are one binary; a file's tests are FILE::name)
    ROUTES='binary(integration) & test(/^(pg_routes|my_routes|pg_patroni|routes_retry|routes_outlive|pg_auth_query|my_auth_query)::/)'
    cargo nextest run --workspace --build-jobs "$JOBS" --test-threads "$THREADS" \
        --no-fail-fast --no-tests=warn -E "not ($ROUTES)"
    section "doctests"
    cargo test --workspace --doc -j "$JOBS"
    section "routing: replication and failover"
    cargo nextest run --workspace --build-jobs "$JOBS" --test-threads "$THREADS" \
        --no-fail-fast -E "$ROUTES"
else
    echo "cargo-nextest not found: using cargo test"
    cargo test --workspace -j "$JOBS" -- --test-threads "$THREADS"
fi

# The driver suites and the sysbench check run the binary the tests built (debug
# build, dependencies at opt-level 1; they check behaviour, not speed): a release
# build of their own would cost the run several minutes. SLUICE_BIN chooses another
# binary (e.g. target/release/sluice).
# (The integration tests built it: target/debug/sluice. `cargo build -p sluice` would
# build it again, and a dozen dependencies with it, for the features the package
# alone selects: about 90 s.)
if [ -z "${SLUICE_BIN:-}" ]; then
    target_dir=${CARGO_TARGET_DIR:-$PWD/target}
    [ -x "$target_dir/debug/sluice" ] || cargo build -p sluice -j "$JOBS"
    export SLUICE_BIN="$target_dir/debug/sluice"
fi

section "driver suites"
if [ -f scripts/driver-suites.sh ]; then
    bash scripts/driver-suites.sh
else
    echo "skipped: scripts/driver-suites.sh does not exist"
fi

section "sysbench check"
if [ "${SLUICE_SYSBENCH_CHECK:-1}" = 0 ]; then
    echo "skipped: SLUICE_SYSBENCH_CHECK=0"
elif [ -f scripts/sysbench-check.sh ]; then
    bash scripts/sysbench-check.sh
else
    echo "skipped: scripts/sysbench-check.sh does not exist"
fi

section "fuzz"
if [ ! -d fuzz ]; then
    echo "skipped: no fuzz/ directory"
elif ! cargo +nightly --version >/dev/null 2>&1; then
    echo "skipped: no nightly toolchain"
elif ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "skipped: cargo-fuzz is not installed"
else
    mapfile -t targets < <(cargo +nightly fuzz list)
    if [ ${#targets[@]} -eq 0 ]; then
        echo "skipped: fuzz/ has no targets"
    else
        per=$FUZZ_SECONDS
        if [ $((per * ${#targets[@]})) -gt "$FUZZ_BUDGET" ]; then
            per=$((FUZZ_BUDGET / ${#targets[@]}))
            [ "$per" -ge 10 ] || per=10
        fi
        fuzz_log=$(mktemp -t sluice-fuzz.XXXXXX)
        for target in "${targets[@]}"; do
            echo "--- fuzz $target (${per}s)"
            if ! CARGO_BUILD_JOBS=$JOBS cargo +nightly fuzz run "$target" -- \
                -max_total_time="$per" >"$fuzz_log" 2>&1; then
                tail -n 60 "$fuzz_log"
                rm -f "$fuzz_log"
                echo "fuzz target $target failed (artifacts in fuzz/artifacts/$target)"
                exit 1
            fi
            tail -n 2 "$fuzz_log"
        done
        rm -f "$fuzz_log"
    fi
fi

section "all tests passed"
