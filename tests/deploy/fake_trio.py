"""The deploy scripts end to end without a build or a GPU: a copy of deploy/ whose launch.sh
starts a stand-in trio at once (its ready file's WS_TARGET is the trio's policy, so that the
calls say whose trio they went to), and a BIN whose wscope and ws_cpu_load stand in for the
real ones:

  - `wscope CMD ... --target=T ...` appends "CMD T ARGS" to $FAKE_LOG, fails (exit 1) where
    $FAKE_FAIL (space-separated) holds CMD:T or CMD:*, else writes what it would: bench a row
    per call to --csv (a header first), after sleeping $FAKE_BENCH_S seconds where set;
    profile a trace to --out;
  - ws_cpu_load exits at once.

Used by the deploy tests of the scripts: fake_tree(dir) -> (root, bin)."""
import os
import shutil
import stat

LAUNCH = r"""#!/usr/bin/env bash
# A stand-in trio: writes the ready file at once, WS_TARGET its policy; ends on SIGTERM.
ready="" policy=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ready-file) ready="$2"; shift 2 ;;
    --policy=*) policy="${1#--policy=}"; shift ;;
    *) shift ;;
  esac
done
trap 'exit 0' TERM
echo "WS_TARGET=$policy" >"$ready.tmp" && mv "$ready.tmp" "$ready"  # whole, as launch.sh
while :; do sleep 0.1; done
"""

WSCOPE = r"""#!/usr/bin/env bash
cmd="$1"
shift
target="" csv="" out=""
for arg in "$@"; do
  case "$arg" in
    --target=*) target="${arg#--target=}" ;;
    --csv=*) csv="${arg#--csv=}" ;;
    --out=*) out="${arg#--out=}" ;;
  esac
done
echo "$cmd $target $*" >>"${FAKE_LOG:-/dev/null}"
for failing in ${FAKE_FAIL:-}; do
  if [[ $failing == "$cmd:$target" || $failing == "$cmd:*" ]]; then exit 1; fi
done
case "$cmd" in
  bench)
    sleep "${FAKE_BENCH_S:-0}"
    if [[ -n $csv ]]; then
      [[ -f $csv ]] || echo "policy,layers,batch,context,steps,tokens_per_s,step_ms" >"$csv"
      echo "$target,4,4,8192,8,100,40" >>"$csv"
    fi ;;
  profile) echo '{"traceEvents": []}' >"$out" ;;
esac
"""


def write_script(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def fake_tree(root_of_repo, directory):
    """(root, bin) under `directory`: root/deploy a copy of the repository's deploy/ with the
    stand-in launch.sh, bin the stand-in wscope and ws_cpu_load."""
    root = os.path.join(directory, "root")
    shutil.copytree(os.path.join(root_of_repo, "deploy"), os.path.join(root, "deploy"))
    write_script(os.path.join(root, "deploy", "launch.sh"), LAUNCH)
    bin_dir = os.path.join(directory, "bin")
    os.makedirs(bin_dir)
    write_script(os.path.join(bin_dir, "wscope"), WSCOPE)
    write_script(os.path.join(bin_dir, "ws_cpu_load"), "#!/usr/bin/env bash\nexit 0\n")
    return root, bin_dir
