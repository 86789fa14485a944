#!/usr/bin/env bash
# Committed results name no machine path (issue 40): no tracked file under benchmarks/results,
# compressed ones included, holds an absolute path such as /work/..., /tmp/... or /home/...
# (a command's binary is recorded as build/subdp with its commit, files relative to the
# repository root, temporary folders as $TMPDIR; benchmarks/compare.py writes them so).
# Outside a git checkout every file under benchmarks/results is checked.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root"
# An absolute path: a slash, a machine directory, a slash, not inside a word, a URL or $VAR/.
pattern='(^|[^A-Za-z0-9_.~/:$-])/(tmp|work|home|root|Users|scratch|mnt|var/tmp|private)/'
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -d '' files < <(git ls-files -z -- benchmarks/results)
else
  mapfile -d '' files < <(find benchmarks/results -type f -print0)
fi
plain=() packed=()
for f in "${files[@]}"; do
  [[ -f $f ]] || continue
  if [[ $f == *.gz ]]; then packed+=("$f"); else plain+=("$f"); fi
done
hits=$( ((${#plain[@]})) && printf '%s\0' "${plain[@]}" | xargs -0 grep -nIHE "$pattern" -- || true)
for f in "${packed[@]}"; do
  found=$(zcat -- "$f" | grep -nIE -m 3 "$pattern" | sed "s|^|$f (gunzipped):|" || true)
  [[ -n $found ]] && hits+=$'\n'"$found"
done
hits=$(printf '%s' "$hits" | sed '/^$/d')
if [[ -n $hits ]]; then
  echo "FAIL: committed results name machine paths (write them relative to the repository root," \
    "the binary as build/subdp with its commit, temporary folders as \$TMPDIR):"
  printf '%s\n' "$hits" | cut -c1-300
  exit 1
fi
echo "ok: ${#files[@]} files under benchmarks/results name no absolute machine path"
