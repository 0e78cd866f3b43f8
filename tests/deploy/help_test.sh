#!/usr/bin/env bash
# Every deploy/ script that answers --help prints its whole usage comment (the comment block
# after the shebang, to its last line) and nothing past it. The block used to be printed by a
# hard-coded line range, which drifted as the comments grew: some printed code after it, one
# cut its last two lines.
set -uo pipefail
ROOT="$1"
FAILURES=0
CHECKED=0
for script in "$ROOT"/deploy/*.sh; do
  grep -q -- "-h|--help)" "$script" || continue
  CHECKED=$((CHECKED + 1))
  want="$(awk 'NR == 1 { next } /^#/ { print; next } { exit }' "$script")"
  got="$(bash "$script" --help 2>&1)"
  if [[ "$got" != "$want" ]]; then
    echo "FAIL: $(basename "$script") --help: printed $(wc -l <<<"$got") lines, its comment has $(wc -l <<<"$want")"
    diff <(echo "$want") <(echo "$got") | head -5
    FAILURES=$((FAILURES + 1))
  fi
done
echo "$CHECKED scripts checked, $FAILURES failed"
[[ $CHECKED -gt 0 && $FAILURES -eq 0 ]]
