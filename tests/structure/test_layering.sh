#!/usr/bin/env bash
# The engine's layering (docs/architecture.md, issue 40): every folder has a rank, and a
# source file may include headers of its own folder or of a folder of lower rank, never of
# a higher rank nor of another folder of the same rank. engine/ and models/ reach kernels/
# through kernels/shapes.h only (the backend interface is engine/core/backend.h); the
# backends (kernels/cpu, fenced, cuda, emu) implement that interface and may include
# engine/core and engine/comm. At most a handful of files sit at engine/'s root.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root"

# folder rank, lowest first (longest prefix wins: kernels/shapes.h before kernels/*)
declare -A rank=(
  [kernels/shapes.h]=0 [engine/config]=0
  [engine/core]=1
  [engine/comm]=2 [engine/io]=2 [engine/data]=2
  [kernels/cpu]=3 [kernels/fenced]=3 [kernels/cuda]=3 [kernels/emu]=3
  [engine/subnet]=3
  [engine/layers]=4
  [models]=5
  [engine/parallel]=6
  [engine/optim]=7
  [engine/train]=8
  [engine/cli]=9
)
# Same-rank folders that one may include: a backend reuses another's template or launcher.
allowed_peer=" kernels/fenced>kernels/cpu kernels/cuda>kernels/emu "

folder_of() {
  local path=$1 best=""
  for key in "${!rank[@]}"; do
    if [[ $path == "$key" || $path == "$key"/* ]] && ((${#key} > ${#best})); then best=$key; fi
  done
  printf '%s' "$best"
}

fail=()
mapfile -t files < <(find engine models kernels -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) | sort)
for f in "${files[@]}"; do
  from=$(folder_of "$f")
  if [[ -z $from ]]; then
    fail+=("$f: in no ranked folder (add it to tests/structure/test_layering.sh and docs/architecture.md)")
    continue
  fi
  while IFS= read -r inc; do
    to=$(folder_of "$inc")
    [[ -z $to ]] && { fail+=("$f includes $inc: in no ranked folder"); continue; }
    [[ $to == "$from" ]] && continue
    if ((rank[$to] > rank[$from])); then
      fail+=("$f ($from, rank ${rank[$from]}) includes $inc ($to, rank ${rank[$to]}): an include that runs upward")
    elif ((rank[$to] == rank[$from])) && [[ $allowed_peer != *" $from>$to "* ]]; then
      fail+=("$f ($from) includes $inc ($to): folders of the same rank do not include each other")
    fi
  done < <(grep -hoE '^#include "(engine|models|kernels)/[^"]+"' "$f" | sed -E 's/^#include "(.*)"$/\1/')
done

root_files=$(find engine -maxdepth 1 -type f | wc -l)
((root_files <= 5)) || fail+=("engine/ holds $root_files files at its root (at most 5: a file belongs to a folder)")

if ((${#fail[@]})); then
  echo "FAIL: the layering of docs/architecture.md is broken:"
  printf '  %s\n' "${fail[@]}"
  exit 1
fi
echo "ok: ${#files[@]} files, every include runs down the layering; $root_files files at engine/'s root"
