#!/usr/bin/env bash
# Builds libFuzzer targets (clang, AddressSanitizer + UndefinedBehaviorSanitizer) for the
# config parser and every file reader, and fuzzes each for a bounded time (default 20 s).
# Usage: scripts/fuzz.sh [SECONDS]. A crash leaves its input in build-fuzz/ and exits non-zero.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-20}
out=${SUBDP_FUZZ_DIR:-$root/build-fuzz}
mkdir -p "$out"
# The readers of engine/data (not its batch sources, which need the backend) and the parsers.
sources=()
for src in "$root"/engine/data/*.cpp; do [[ $src == *_source.cpp ]] || sources+=("$src"); done
sources+=("$root/engine/io/safetensors.cpp" "$root/engine/cli/config_toml.cpp" "$root/engine/cli/config_rules.cpp"
  "$root/engine/cli/config_schema.cpp" "$root/engine/cli/suggest.cpp"
  "$root/engine/train/stop_signals.cpp")
flags=(-std=c++17 -O1 -g -DNDEBUG -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I"$root")
libs=(-lz -lfmt)
# The readers are the same in every target: compiled once (fuzzer instrumentation without
# libFuzzer's main), one compiler per core, into objects each target's driver links. Before,
# each target compiled them all again: about 55 s a target on 2 cores, 6 in CI.
mkdir -p "$out/obj"
objects=() pids=()
for src in "${sources[@]}"; do
  obj="$out/obj/$(basename "$(dirname "$src")")_$(basename "$src" .cpp).o"
  objects+=("$obj")
  [[ -f $obj && ! $src -nt $obj && -z $(find "$root/engine" -name '*.h' -newer "$obj" -print -quit) ]] && continue
  clang++ "${flags[@]/fuzzer,/fuzzer-no-link,}" -c "$src" -o "$obj" &
  pids+=($!)
  if ((${#pids[@]} == $(nproc))); then  # a batch per core count; a failed compile stops here
    for pid in "${pids[@]}"; do wait "$pid"; done
    pids=()
  fi
done
for pid in "${pids[@]}"; do wait "$pid"; done
for target in ${SUBDP_FUZZ_TARGETS:-config idx cifar tokens text safetensors}; do
  bin="$out/fuzz_$target"
  stale=0
  [[ -f $bin && -n $(find "$root/engine" -name '*.h' -newer "$bin" -print -quit) ]] && stale=1  # a header changed
  for dep in "$root/tests/fuzz/fuzz_readers.cpp" "${objects[@]}"; do [[ $dep -nt $bin ]] && stale=1; done
  if [[ ! -x $bin || $stale == 1 ]]; then
    clang++ "${flags[@]}" -DSUBDP_FUZZ_TARGET="\"$target\"" "$root/tests/fuzz/fuzz_readers.cpp" "${objects[@]}" \
      "${libs[@]}" -o "$bin"
  fi
  mkdir -p "$out/corpus_$target"
  echo "fuzzing $target for ${seconds}s"
  (cd "$out" && "$bin" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 -print_final_stats=0 \
      "$out/corpus_$target" 2>"$out/fuzz_$target.log") || { tail -30 "$out/fuzz_$target.log"; exit 1; }
  grep -E "^#[0-9]+ *DONE|Done [0-9]+ runs" "$out/fuzz_$target.log" | tail -1 || true
done
