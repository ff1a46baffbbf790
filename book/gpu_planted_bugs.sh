#!/usr/bin/env bash
# Plants classic bugs in the GPU kernels one at a time, runs the lesson's tests against each,
# restores the kernel, and prints a Markdown table of which tests went red. Used for
# book/src/generated/gpu_mutants.md (bash book/generate.sh runs it in full mode).
#
#   bash book/gpu_planted_bugs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
flash=lessons/09_gpu_flash/src/flash.wgsl
naive=lessons/08_gpu_naive/src/naive.wgsl
backup=$(mktemp -d)
cp "$flash" "$naive" "$backup/"
restore() { cp "$backup/flash.wgsl" "$flash"; cp "$backup/naive.wgsl" "$naive"; rm -rf "$backup"; }
trap restore EXIT

# plant NAME FILE PACKAGE OLD NEW: replace the first OLD by NEW in FILE, run PACKAGE's tests,
# print a table row, restore FILE
plant() {
    local name=$1 file=$2 package=$3 old=$4 new=$5 log failed
    python3 - "$file" "$old" "$new" <<'PY'
import sys
path, old, new = sys.argv[1:]
text = open(path).read()
if old not in text:
    sys.exit(f"planted bug not applicable, text not found in {path}: {old!r}")
open(path, "w").write(text.replace(old, new, 1))
PY
    # --format pretty: one line per test, even when CARGO_TERM_QUIET asks for dots
    log=$(RUST_BACKTRACE=0 cargo test -p "$package" --test contract -- --format pretty 2>&1 || true)
    if ! grep -q '^test result' <<<"$log"; then
        echo "the tests of $package did not run with the bug '$name' planted:" >&2
        echo "$log" >&2
        exit 1
    fi
    failed=$( (grep -E '^test .* \.\.\. FAILED$' <<<"$log" || true) |
        sed -E 's/^test (.*) \.\.\. FAILED$/`\1`/' | sort | paste -sd, - | sed 's/,/, /g')
    echo "| $name | \`$(basename "$file")\` | ${failed:-**none: the bug went unseen**} |"
    cp "$backup/$(basename "$file")" "$file"
}

echo "| planted bug | file | tests that failed |"
echo "|---|---|---|"
plant "no barrier after loading a tile" "$flash" lesson09 \
    $'        load_tile(slice, kv_start, thread);\n        workgroupBarrier();' \
    $'        load_tile(slice, kv_start, thread);'
plant "no barrier before loading the next tile" "$flash" lesson09 \
    $'        workgroupBarrier();                   // everyone is done' \
    $'                                              // everyone is done'
plant "tail tile of keys ignored (loop stops at the last whole tile)" "$flash" lesson09 \
    'kv_start < kv_end; kv_start += BLOCK_KV' 'kv_start + BLOCK_KV <= kv_end; kv_start += BLOCK_KV'
plant "causal mask shifted by one key" "$flash" lesson09 \
    'let end = i32(row) + 1 +' 'let end = i32(row) + 2 +'
plant "no rescale of the accumulator by exp(m - m')" "$flash" lesson09 \
    'acc[c] *= correction;' 'acc[c] *= 1.0;'
plant "no causal tile skipping (every tile loaded, the mask does the rest)" "$flash" lesson09 \
    'let kv_end = visible_keys(last_row);' 'let kv_end = params.kv_len;'
plant "causal mask shifted by one key" "$naive" lesson08 \
    'let end = i32(row) + 1 +' 'let end = i32(row) +'
plant "last key of each row left out of O = PV" "$naive" lesson08 \
    'for (var j = 0u; j < visible_keys(i); j++) {' 'for (var j = 0u; j + 1u < visible_keys(i); j++) {'
