#!/usr/bin/env bash
# Builds the libFuzzer targets (clang-14, ASan + UBSan, build-fuzz/) and fuzzes each one
# for a bounded time, starting from a copy of its checked-in seed corpus.
#
#   deploy/fuzz.sh                    30 s per fuzzer
#   deploy/fuzz.sh --seconds N        N s per fuzzer (CI: 10; a longer run: 600 or more;
#                                     0 replays the corpus once)
#   deploy/fuzz.sh --only NAME        one fuzzer (safetensors_header, model_config, kv_spec,
#                                     request_validation)
#   deploy/fuzz.sh --seed N           libFuzzer seed (default 0: random; CI uses 1)
#   deploy/fuzz.sh --jobs N           parallel jobs for the build (default: nproc)
#   deploy/fuzz.sh --keep-corpus      merge the new interesting inputs back into
#                                     tests/fuzz/corpus/ (off by default: the repo stays clean)
#   deploy/fuzz.sh --build-only
#
# Fuzzers: safetensors_header_fuzzer (ParseSafetensorsHeader), model_config_fuzzer
# (ModelConfig::FromJson), kv_spec_fuzzer (internal::KvSpec bytes -> FromKvSpec),
# request_validation_fuzzer (v1::GenerateRequest bytes -> ValidateGenerateRequest). Each
# checks the invariants of tests/fuzz/fuzz_checks.h. A crash (sanitizer report, abort,
# broken invariant, timeout, OOM) is copied to tests/fuzz/regressions/<fuzzer>/ — the
# normal build's fuzz_regression_test replays that folder — and the script exits 1.
# Work files: build-fuzz/run/<fuzzer>/{corpus,crashes,log}.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$ROOT/build-fuzz"
SECONDS_PER_FUZZER=30
SEED=0
ONLY=""
JOBS="$(nproc)"
KEEP=0
BUILD_ONLY=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) SECONDS_PER_FUZZER="$2"; shift 2 ;;
    --seed) SEED="$2"; shift 2 ;;
    --only) ONLY="${2%_fuzzer}_fuzzer"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --keep-corpus) KEEP=1; shift ;;
    --build-only) BUILD_ONLY=1; shift ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
    *) echo "fuzz.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ "$SECONDS_PER_FUZZER" =~ ^[0-9]+$ ]] || { echo "fuzz.sh: --seconds wants a number" >&2; exit 2; }

# The project's packages and clang + the libFuzzer/sanitizer runtimes (idempotent).
"$ROOT/deploy/setup.sh" --no-build --with clang-14 --with libclang-rt-14-dev --with libomp-14-dev

if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  echo "[fuzz] configuring $BUILD_DIR (clang-14)"
  CC=clang-14 CXX=clang++-14 cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWS_BUILD_FUZZERS=ON -DWS_ENABLE_CUDA=OFF \
    -DWS_BUILD_BENCHMARKS=OFF
fi
start=$SECONDS
cmake --build "$BUILD_DIR" -j "$JOBS" --target ws_fuzzers
echo "[fuzz] built in $((SECONDS - start)) s"
[[ $BUILD_ONLY -eq 1 ]] && exit 0

FUZZERS=(safetensors_header_fuzzer model_config_fuzzer kv_spec_fuzzer request_validation_fuzzer)
[[ -n "$ONLY" ]] && FUZZERS=("$ONLY")
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
CRASHED=()
for fuzzer in "${FUZZERS[@]}"; do
  run="$BUILD_DIR/run/$fuzzer"
  rm -rf "$run"
  mkdir -p "$run/corpus" "$run/crashes"
  cp "$ROOT/tests/fuzz/corpus/$fuzzer/"* "$run/corpus/"
  # Not the saved crashes: fuzz_regression_test replays those, and some are large
  # (10+ KB) inputs that would slow every run down.
  regressions="$ROOT/tests/fuzz/regressions/$fuzzer"
  args=("$run/corpus" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1
        -artifact_prefix="$run/crashes/")
  # A fixed seed makes a bounded run replay the same input sequence every time (CI uses
  # one, so a pass here is a pass there); 0 lets libFuzzer pick.
  [[ "$SEED" != "0" ]] && args+=(-seed="$SEED")
  # libFuzzer reads -max_total_time=0 as "forever": 0 s replays the corpus once instead.
  if [[ "$SECONDS_PER_FUZZER" -eq 0 ]]; then args+=(-runs=0); else args+=(-max_total_time="$SECONDS_PER_FUZZER"); fi
  dict="$ROOT/tests/fuzz/$fuzzer.dict"
  [[ -f "$dict" ]] && args+=(-dict="$dict")
  echo "[fuzz] $fuzzer: ${SECONDS_PER_FUZZER} s"
  rc=0
  "$BUILD_DIR/fuzz/$fuzzer" "${args[@]}" >"$run/log" 2>&1 || rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$run/log" | grep -o '[0-9]*$' || echo 0)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$run/log" | grep -o '[0-9]*$' || echo 0)
  cov=$(grep -o 'cov: [0-9]*' "$run/log" | tail -1 || true)
  echo "[fuzz] $fuzzer: exit $rc, $execs runs, $rate exec/s, $cov, corpus $(ls "$run/corpus" | wc -l)"
  shopt -s nullglob
  artifacts=("$run/crashes/"*)
  shopt -u nullglob
  if [[ $rc -ne 0 || ${#artifacts[@]} -gt 0 ]]; then
    CRASHED+=("$fuzzer")
    grep -E -A30 'ERROR: |runtime error|invariant broken|deadly signal' "$run/log" | head -60 || tail -40 "$run/log"
    mkdir -p "$regressions"
    for a in "${artifacts[@]}"; do
      cp "$a" "$regressions/"
      echo "[fuzz] $fuzzer: crashing input saved as tests/fuzz/regressions/$fuzzer/$(basename "$a")"
    done
  fi
  if [[ $KEEP -eq 1 ]]; then
    "$BUILD_DIR/fuzz/$fuzzer" -merge=1 "$ROOT/tests/fuzz/corpus/$fuzzer" "$run/corpus" \
      >"$run/merge.log" 2>&1
    echo "[fuzz] $fuzzer: merged into tests/fuzz/corpus/$fuzzer ($(du -sh "$ROOT/tests/fuzz/corpus/$fuzzer" | cut -f1))"
  fi
done

if [[ ${#CRASHED[@]} -gt 0 ]]; then
  echo "[fuzz] CRASHES in: ${CRASHED[*]} (logs: $BUILD_DIR/run/<fuzzer>/log)" >&2
  exit 1
fi
echo "[fuzz] no crashes"
