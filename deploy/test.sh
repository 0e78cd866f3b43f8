#!/usr/bin/env bash
# Sets up if needed, builds, and runs the test suite. CI (.ci/run) calls exactly this.
#
#   deploy/test.sh           unit, e2e and gpu tests (gpu tests skip without a device)
#   deploy/test.sh --all     also the tests labelled "slow"
#   deploy/test.sh --fuzz-seconds N
#                            then fuzz each parser N s (deploy/fuzz.sh, clang build in
#                            build-fuzz/; default 10: about 1.5 min in all, build
#                            included; 0 skips it; env WS_FUZZ_SECONDS sets the default)
#   deploy/test.sh --sanitizers tsan|all|none
#                            then deploy/sanitize.sh: tsan (default, about 40 s: channel,
#                            arena, KV cache, placement under TSan), all (adds ASan + UBSan
#                            over unit + e2e: about 8 min more on 2 cores), none; env
#                            WS_SANITIZERS sets the default
#   deploy/test.sh -- ARGS   extra ctest arguments (e.g. -R Channel)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${WS_BUILD_DIR:-$ROOT/build}"
EXCLUDE="slow"
FUZZ_SECONDS="${WS_FUZZ_SECONDS:-10}"
SANITIZERS="${WS_SANITIZERS:-tsan}"
CTEST_ARGS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --all) EXCLUDE=""; shift ;;
    --fuzz-seconds) FUZZ_SECONDS="$2"; shift 2 ;;
    --sanitizers) SANITIZERS="$2"; shift 2 ;;
    --) shift; CTEST_ARGS=("$@"); break ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
    *) echo "test.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

"$ROOT/deploy/setup.sh" --build-dir "$BUILD_DIR"

cd "$BUILD_DIR"
# Tests run several processes at once on few cores: OpenMP threads that spin while
# waiting would steal the cores their peers need.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
# --no-tests=error: a -R that matches nothing (a renamed suite) fails instead of passing.
args=(--output-on-failure --no-tests=error --timeout 600 -j "$(nproc)")
[[ -n "$EXCLUDE" ]] && args+=(-LE "$EXCLUDE")
ctest "${args[@]}" "${CTEST_ARGS[@]}"

# Only for the full suite (not when ctest arguments pick a subset).
if [[ ${#CTEST_ARGS[@]} -eq 0 ]]; then
  # A short bounded fuzz of the parsers; a crash fails CI and lands in
  # tests/fuzz/regressions/.
  if [[ "$FUZZ_SECONDS" != "0" ]]; then
    "$ROOT/deploy/fuzz.sh" --seconds "$FUZZ_SECONDS" --seed 1
  fi
  case "$SANITIZERS" in
    tsan) "$ROOT/deploy/sanitize.sh" --tsan ;;
    all) "$ROOT/deploy/sanitize.sh" ;;
    none) ;;
    *) echo "test.sh: --sanitizers wants tsan, all or none, got '$SANITIZERS'" >&2; exit 2 ;;
  esac
fi
