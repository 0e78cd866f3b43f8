#!/usr/bin/env bash
# Sets up if needed, builds, and runs the test suite. CI (.ci/run) calls exactly this.
#
#   deploy/test.sh           unit, e2e and gpu tests (gpu tests skip without a device)
#   deploy/test.sh --all     also the tests labelled "slow"
#   deploy/test.sh -- ARGS   extra ctest arguments (e.g. -R Channel)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${WS_BUILD_DIR:-$ROOT/build}"
EXCLUDE="slow"
CTEST_ARGS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --all) EXCLUDE=""; shift ;;
    --) shift; CTEST_ARGS=("$@"); break ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

"$ROOT/deploy/setup.sh" --build-dir "$BUILD_DIR"

cd "$BUILD_DIR"
# Tests run several processes at once on few cores: OpenMP threads that spin while
# waiting would steal the cores their peers need.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
args=(--output-on-failure --timeout 600 -j "$(nproc)")
[[ -n "$EXCLUDE" ]] && args+=(-LE "$EXCLUDE")
ctest "${args[@]}" "${CTEST_ARGS[@]}"
