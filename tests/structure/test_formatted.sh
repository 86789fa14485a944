#!/usr/bin/env bash
# The C++ and CUDA sources are formatted with the repository's .clang-format (issue 40):
# clang-format --dry-run reports any file it would change. Skips (77) without clang-format.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root"
command -v clang-format >/dev/null || { echo "skip: clang-format not installed (scripts/setup.sh)"; exit 77; }
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -d '' files < <(git ls-files -z -- 'engine/*.cpp' 'engine/*.h' 'models/*.cpp' 'models/*.h' 'kernels/*.cpp' \
    'kernels/*.h' 'kernels/*.cu' 'kernels/*.cuh' 'tests/*.cpp' 'tests/*.h' 'benchmarks/*.cpp')
else
  mapfile -d '' files < <(find engine models kernels tests benchmarks -type f \
    \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print0)
fi
if ! out=$(clang-format --dry-run --Werror "${files[@]}" 2>&1); then
  echo "FAIL: not formatted with .clang-format (run: clang-format -i FILE):"
  printf '%s\n' "$out" | grep -E '^[^ ].*(warning|error):' | cut -d: -f1 | sort -u | head -20
  exit 1
fi
echo "ok: ${#files[@]} files formatted with .clang-format"
