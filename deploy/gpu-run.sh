#!/usr/bin/env bash
# Runs ON the GPU machine, from the repository root: unpacks the bundle that
# deploy/gpu-bundle.sh built (dist/writescope-gpu.tar.xz, git-ignored, so it has to be
# carried explicitly) to /tmp/ws and runs one of its binaries, after nvidia-smi.
#
#   deploy/gpu-run.sh ws_probe --json=$OUT/probe.json
#   deploy/gpu-run.sh channel_bench
#   deploy/gpu-run.sh --all-tests            # every bin/*_test; exit 77 counts as skipped
#   deploy/gpu-run.sh --unpack-only          # unpack to /tmp/ws, run nothing
#
# Environment: WS_BUNDLE (tarball, default dist/writescope-gpu.tar.xz), WS_BUNDLE_DIR
# (where to unpack, default /tmp/ws).
set -euo pipefail

tarball=${WS_BUNDLE:-dist/writescope-gpu.tar.xz}
dest=${WS_BUNDLE_DIR:-/tmp/ws}

if (($# < 1)); then
  echo "usage: $0 BINARY [ARGS...] | --all-tests" >&2
  exit 2
fi
if [[ ! -f $tarball ]]; then
  echo "gpu-run: no $tarball here ($(pwd)); build it with deploy/gpu-bundle.sh and carry it" >&2
  exit 2
fi

# Before LD_LIBRARY_PATH points at the bundle: nvidia-smi must use the host's libraries.
nvidia-smi || echo "gpu-run: nvidia-smi failed; the GPU parts will report why" >&2

# Unpack once per tarball.
stamp=$(cksum <"$tarball")
if [[ ! -f $dest/.bundle-stamp || $(cat "$dest/.bundle-stamp") != "$stamp" ]]; then
  rm -rf "$dest"
  mkdir -p "$dest"
  # tar picks the decompressor; without xz there, Python's lzma reads it.
  if [[ $tarball == *.gz ]] || command -v xz >/dev/null; then
    tar -xaf "$tarball" -C "$dest"
  else
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      "$tarball" "$dest"
  fi
  echo "$stamp" >"$dest/.bundle-stamp"
fi
head -2 "$dest/MANIFEST" >&2

[[ $1 == "--unpack-only" ]] && exit 0
# The test fixtures of the working tree this runs in (the bundle was built elsewhere).
[[ -d tests/fixtures ]] && export WS_FIXTURES_DIR="${WS_FIXTURES_DIR:-$PWD/tests/fixtures}"
[[ -d tests/fuzz ]] && export WS_FUZZ_DIR="${WS_FUZZ_DIR:-$PWD/tests/fuzz}"
if [[ $1 != "--all-tests" ]]; then
  exec "$dest/run.sh" "$@"
fi

shift
passed=() skipped=() failed=()
for test in "$dest"/bin/*_test; do
  name=$(basename "$test")
  echo "=== $name" >&2
  status=0
  "$dest/run.sh" "$name" "$@" || status=$?
  case $status in
    0) passed+=("$name") ;;
    77) skipped+=("$name") ;;
    *) failed+=("$name (exit $status)") ;;
  esac
done
echo "gpu-run: ${#passed[@]} passed, ${#skipped[@]} skipped, ${#failed[@]} failed" >&2
for f in "${failed[@]}"; do echo "  FAILED $f" >&2; done
((${#failed[@]} == 0))
