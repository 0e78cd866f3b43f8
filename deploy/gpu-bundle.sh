#!/usr/bin/env bash
# Builds WriteScope with CUDA (build-gpu/, Release, tests and benchmarks on) and packs
# dist/writescope-gpu.tar.xz for a GPU host that has none of our Debian packages:
#
#   bin/      every binary of the build (services, tools, tests, benchmarks), stripped
#   lib/      every non-system shared library they need, under its SONAME
#   run.sh    run.sh NAME [ARGS...]: runs bin/NAME with lib/ on LD_LIBRARY_PATH
#   MANIFEST  commit, build type, libraries, and what is expected on the host
#
# Left to the host: glibc (libc, libm, libpthread, libdl, librt, ld-linux, ...; the GPU
# host's 2.39 is newer than Debian 12's 2.36, which is fine), the driver's libcuda.so.1,
# and CUDA toolkit libraries such as cuBLAS (installed there in the CUDA library
# folder; run.sh adds it). libstdc++, libgcc_s and libgomp travel: the host's may be
# older or newer than the ones we built against.
#
# On the GPU machine: deploy/gpu-run.sh NAME [ARGS...] (see there).
#
# Environment: JOBS (build parallelism, default nproc), WS_GPU_BUILD_DIR (default
# build-gpu), WS_BUNDLE_LIMIT_MIB (default 60: what may travel per run is 64 MiB, the
# working tree's tracked files included; xz -9 packs oneDNN's 40 MB library about twice as
# small as gzip), WS_BUNDLE_BINARIES (space-separated names: only
# these binaries and their libraries, e.g. "coordinator gpu_worker cpu_worker wscope" for
# the benchmark scripts, when the whole bundle and the tree together pass 64 MiB; only
# their targets are built then).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${WS_GPU_BUILD_DIR:-$repo/build-gpu}
dist=$repo/dist
tarball=$dist/writescope-gpu.tar.xz
jobs=${JOBS:-$(nproc)}
limit_mib=${WS_BUNDLE_LIMIT_MIB:-60}

log() { echo "gpu-bundle: $*" >&2; }
die() { log "error: $*"; exit 1; }

for tool in cmake ninja ldd readelf strip tar xz; do
  command -v "$tool" >/dev/null || die "$tool not found (deploy/setup.sh installs the toolchain)"
done
nvcc=${CUDACXX:-}
if [[ -z $nvcc ]]; then
  if command -v nvcc >/dev/null; then nvcc=$(command -v nvcc); else nvcc=/usr/local/cuda/bin/nvcc; fi
fi
[[ -x $nvcc ]] || die "nvcc not found (looked for \$CUDACXX, PATH, /usr/local/cuda/bin/nvcc)"

# ---- configure (idempotent: re-asserts the options on an existing build) and build
mkdir -p "$build"
configure_log=$build/ws-configure.log
if [[ -f $build/build.ninja ]]; then
  generator=()
else
  generator=(-G Ninja)
  log "configuring $build"
fi
cmake -S "$repo" -B "$build" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_COMPILER="$nvcc" \
  -DWS_ENABLE_CUDA=ON -DWS_BUILD_TESTS=ON -DWS_BUILD_BENCHMARKS=ON >"$configure_log" 2>&1 ||
  { tail -30 "$configure_log" >&2; die "configure failed (log: $configure_log)"; }
grep -q 'WriteScope CUDA: ON' "$configure_log" ||
  die "the build did not enable CUDA (log: $configure_log)"
# Named binaries: only their targets are built (the names are the CMake target names).
targets=()
if [[ -n ${WS_BUNDLE_BINARIES:-} ]]; then
  read -r -a names <<<"$WS_BUNDLE_BINARIES"
  targets=(--target "${names[@]}")
fi
log "building ${WS_BUNDLE_BINARIES:-everything} with $jobs jobs"
cmake --build "$build" -j "$jobs" "${targets[@]}"

# ---- stage ----------------------------------------------------------------------
stage=$(mktemp -d "${TMPDIR:-/tmp}/ws-gpu-bundle.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"

# glibc's own libraries and the driver come from the host.
is_host_library() {
  [[ $1 =~ ^(linux-vdso\.so|linux-gate\.so|ld-linux|libc\.so|libm\.so|libmvec\.so|libpthread\.so|libdl\.so|librt\.so|libresolv\.so|libutil\.so|libanl\.so|libnsl\.so|libnss_|libBrokenLocale\.so|libthread_db\.so|libcuda\.so|libnvidia-) ]]
}

binaries=()
for dir in "$build/bin" "$build/tests"; do
  [[ -d $dir ]] || continue
  while IFS= read -r -d '' file; do
    if [[ -n ${WS_BUNDLE_BINARIES:-} && " $WS_BUNDLE_BINARIES " != *" $(basename "$file") "* ]]; then
      continue
    fi
    readelf -h "$file" >/dev/null 2>&1 && binaries+=("$file")
  done < <(find "$dir" -maxdepth 1 -type f -perm -u+x -print0 | sort -z)
done
((${#binaries[@]} > 0)) || die "no binaries in $build/bin or $build/tests${WS_BUNDLE_BINARIES:+ named $WS_BUNDLE_BINARIES}"

declare -A copied=()      # SONAME -> source path
declare -A from_cuda=()   # toolkit libraries left to the host
missing=()
for binary in "${binaries[@]}"; do
  name=$(basename "$binary")
  [[ -e $stage/bin/$name ]] && die "two binaries named $name"
  strip --strip-all -o "$stage/bin/$name" "$binary"
  # ldd lists the whole dependency closure: "NAME => PATH (ADDR)" or "NAME => not found".
  while read -r needed arrow path _; do
    [[ $arrow == "=>" ]] || continue
    is_host_library "$needed" && continue
    if [[ $path == "not" ]]; then
      missing+=("$name: $needed")
      continue
    fi
    real=$(readlink -f "$path")
    if [[ $real == /usr/local/cuda* ]]; then
      from_cuda[$needed]=$real
      continue
    fi
    soname=$(readelf -d "$real" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
    soname=${soname:-$needed}
    [[ -n ${copied[$soname]:-} ]] && continue
    copied[$soname]=$real
    strip --strip-unneeded -o "$stage/lib/$soname" "$real" 2>/dev/null || cp -L "$real" "$stage/lib/$soname"
    # A library asked for by a name other than its SONAME still resolves.
    [[ $needed != "$soname" && ! -e $stage/lib/$needed ]] && ln -s "$soname" "$stage/lib/$needed"
  done < <(ldd "$binary")
done
((${#missing[@]} == 0)) || die "unresolved libraries: ${missing[*]}"

# The toolchain's runtime libraries travel whether or not ldd saw them (libgomp is
# loaded by OpenMP code; an older host libstdc++ would lack our GLIBCXX symbols).
for runtime in libstdc++.so.6 libgcc_s.so.1 libgomp.so.1; do
  [[ -n ${copied[$runtime]:-} ]] && continue
  path=$(g++ -print-file-name="$runtime" 2>/dev/null || true)
  [[ -f $path ]] || path=$(ldconfig -p | awk -v n="$runtime" '$1 == n && /x86-64/ {print $NF; exit}')
  [[ -f $path ]] || die "cannot find $runtime"
  copied[$runtime]=$(readlink -f "$path")
  cp -L "$path" "$stage/lib/$runtime"
done

cat >"$stage/run.sh" <<'EOF'
#!/bin/sh
# Runs a binary of this bundle with the bundle's libraries:
#   run.sh NAME [ARGS...]     e.g. run.sh ws_probe --json=/tmp/probe.json
# bin/ goes on PATH too, so a binary that starts its siblings finds them.
here=$(cd "$(dirname "$0")" && pwd)
if [ $# -lt 1 ]; then
  echo "usage: $0 BINARY [ARGS...]; binaries:" >&2
  ls "$here/bin" >&2
  exit 2
fi
name=$1
shift
case $name in
  */*) binary=$name ;;
  *) binary=$here/bin/$name ;;
esac
if [ ! -x "$binary" ]; then
  echo "run.sh: no binary '$name' in $here/bin" >&2
  exit 2
fi
# The host's CUDA toolkit libraries (cuBLAS, ...) come after ours.
cuda_libs=
for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$dir" ] && cuda_libs="$cuda_libs:$dir"
done
LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}$cuda_libs"
PATH="$here/bin:$PATH"
export LD_LIBRARY_PATH PATH
exec "$binary" "$@"
EOF
chmod +x "$stage/run.sh"

{
  echo "writescope GPU bundle"
  echo "commit: $(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$repo" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), $(g++ --version | head -1)"
  echo "cuda: $("$nvcc" --version | tail -1)"
  echo "build: $build (Release, CUDA on)"
  echo
  echo "binaries:"
  ls "$stage/bin" | sed 's/^/  /'
  echo
  echo "libraries (lib/ <- source):"
  for soname in $(printf '%s\n' "${!copied[@]}" | sort); do echo "  $soname <- ${copied[$soname]}"; done
  echo
  echo "expected on the host: glibc >= 2.36, the NVIDIA driver (libcuda.so.1)"
  for needed in $(printf '%s\n' "${!from_cuda[@]}" | sort); do
    echo "  and from its CUDA toolkit: $needed (here ${from_cuda[$needed]})"
  done
} >"$stage/MANIFEST"

# ---- pack and check the size ----------------------------------------------------
mkdir -p "$dist"
rm -f "$dist/writescope-gpu.tar.gz"  # the gzip bundle of earlier versions would travel too
tar -C "$stage" -cf - bin lib run.sh MANIFEST | xz -T0 -9 >"$tarball.tmp"
mv "$tarball.tmp" "$tarball"
bytes=$(stat -c %s "$tarball")
unpacked=$(du -sb "$stage" | cut -f1)
log "$(awk -v t="$tarball" -v b="$bytes" -v u="$unpacked" -v nb="${#binaries[@]}" -v nl="${#copied[@]}" \
  'BEGIN { printf "%s: %.1f MiB (unpacked %.1f MiB), %d binaries, %d libraries", t, b / 1048576, u / 1048576, nb, nl }')"
if ((bytes >= limit_mib * 1048576)); then
  die "the tarball is over ${limit_mib} MiB; at most 64 MiB travels to the GPU machine per run"
fi
