#!/usr/bin/env bash
# Regenerates the command output that the book shows, under book/src/generated/.
#
#   bash book/generate.sh                  every output; the tour and the scaling study run in
#                                          release mode, and the GPU kernels' planted bugs
#   bash book/generate.sh --deterministic  only the outputs that do not depend on the machine
#   bash book/generate.sh --check          those same outputs, failing if they differ from the
#                                          committed ones, and every {{#include}} of a missing
#                                          file or anchor or an anchor no chapter shows, and
#                                          every output no page shows or no command makes (CI)
#   bash book/generate.sh --gpu            the deterministic outputs and the GPU ones (on a
#                                          machine with a GPU with tensor cores and PyTorch)
#
# Each file starts with the command a learner types. Outputs that contain timings end with the
# date and the machine they were measured on.
set -euo pipefail
cd "$(dirname "$0")/.."
out=book/src/generated
mkdir -p "$out"
export CARGO_TERM_QUIET=true # cargo's own progress lines are not part of the output
# Mesa's Vulkan driver (lavapipe) prints an error for every device when XDG_RUNTIME_DIR is
# unset, as it is on CI machines; a private directory silences it.
if [[ -z "${XDG_RUNTIME_DIR:-}" ]]; then
    XDG_RUNTIME_DIR=$(mktemp -d)
    export XDG_RUNTIME_DIR
fi

check=false
timings=true
gpu=false
[[ "${1:-}" == "--check" ]] && check=true && timings=false
[[ "${1:-}" == "--deterministic" ]] && timings=false
[[ "${1:-}" == "--gpu" ]] && gpu=true && timings=false
stale=0

# show NAME SHOWN COMMAND...: write "$ SHOWN" and what COMMAND prints to NAME.txt (or, with
# --check, compare with NAME.txt)
show() {
    local name=$1 shown=$2
    shift 2
    local tmp
    tmp=$(mktemp)
    { echo "\$ $shown"; "$@" 2>&1; } >"$tmp"
    if $check; then
        if ! diff -u "$out/$name.txt" "$tmp"; then
            echo "book/src/generated/$name.txt is stale: run bash book/generate.sh" >&2
            stale=1
        fi
        rm "$tmp"
    else
        mv "$tmp" "$out/$name.txt"
    fi
}

# stamp NAME: append where and when a machine-dependent output was measured
stamp() {
    local cpu
    cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | xargs || true)
    echo "# measured $(date -u +%Y-%m-%d) on ${cpu:-an unknown CPU}, $(nproc) threads" >>"$out/$1.txt"
}

# test_list PACKAGE: the names and results of a lesson's tests, without timings or binary hashes.
# With --check the tests are listed, not run again: CI checks the book after `cargo test
# --workspace` has run every one of them and passed, so each listed test is "ok" (or
# "ignored", if it is marked so).
test_list() {
    local log
    if $check; then
        log=$(cargo test -p "$1" -- --list 2>/dev/null)
        local ignored
        ignored=$(cargo test -p "$1" -- --list --ignored 2>/dev/null | grep -E ': test$' || true)
        grep -E ': test$' <<<"$log" | sed -E 's/: test$//' | while read -r name; do
            if grep -qxF "$name: test" <<<"$ignored"; then
                echo "test $name ... ignored"
            else
                echo "test $name ... ok"
            fi
        done | sort
        grep -E ': test$' <<<"$log" | grep -cvxF -f <(echo "$ignored") |
            awk '{ print "in all: " $1 " passed; 0 failed" }'
        return
    fi
    log=$(cargo test -p "$1" -- --format pretty 2>&1)
    grep -E '^test .* \.\.\. ' <<<"$log" | sort
    grep -E '^test result' <<<"$log" | awk '{ p += $4; f += $6 } END { print "in all: " p " passed; " f " failed" }'
}

# grade_fresh EXERCISE: `cargo grade EXERCISE` as on a fresh clone (no saved progress); a stub
# is expected to fail
grade_fresh() {
    local saved
    saved=$(mktemp -d)
    [[ -d .grade ]] && mv .grade "$saved/"
    cargo grade "$1" 2>&1 || true
    rm -rf .grade
    [[ -d "$saved/.grade" ]] && mv "$saved/.grade" .
    rm -rf "$saved"
}

# check_includes: every {{#include FILE}} or {{#include FILE:ANCHOR}} of the book names a file
# that exists and, where given, an anchor the file defines (mdBook renders a missing anchor as
# empty text, with no error); every anchor defined in the repository is shown by some chapter.
check_includes() {
    local bad=0 md spec path anchor file name
    declare -A used=()
    while IFS= read -r hit; do
        md=${hit%%:*}
        spec=${hit#*\{\{#include }
        spec=${spec%\}\}}
        path=${spec%%:*}
        file=$(realpath -m "$(dirname "$md")/$path")
        if [[ ! -f "$file" ]]; then
            echo "$md: {{#include $spec}}: no file $path" >&2
            bad=1
            continue
        fi
        [[ "$spec" == *:* ]] || continue
        anchor=${spec#*:}
        used["$file:$anchor"]=1
        if ! grep -Eq "ANCHOR:[[:space:]]*${anchor}([^[:alnum:]_-]|$)" "$file"; then
            echo "$md: {{#include $spec}}: $path has no anchor \`$anchor\`" >&2
            bad=1
        fi
    done < <(grep -roE '\{\{#include [^}]*\}\}' book/src --include='*.md')
    while IFS= read -r hit; do
        file=$(realpath -m "${hit%%:*}")
        name=${hit##*ANCHOR: }
        name=${name%%[!A-Za-z0-9_-]*}
        if [[ -z "${used["$file:$name"]:-}" ]]; then
            echo "${hit%%:*}: anchor \`$name\` is not shown by any chapter" >&2
            bad=1
        fi
    done < <(git ls-files -z | xargs -0 grep -oE 'ANCHOR: [A-Za-z0-9_-]+' 2>/dev/null | grep -v '^book/src/')
    return $bad
}

if $check && ! check_includes; then
    echo "fix the includes or anchors above" >&2
    stale=1
fi

# Graded checks draw random cases; a fixed seed makes their output repeatable.
export PROPTEST_RNG_SEED=20261121

show memory_table "cargo run -p lesson01 --example memory_table" cargo run -p lesson01 --example memory_table
show overflow "cargo run -p lesson02 --example overflow" cargo run -p lesson02 --example overflow
show tile_schedule "cargo run -p lesson03 --example tile_schedule" cargo run -p lesson03 --example tile_schedule
show window_band "cargo run -p reference --example window_band" cargo run -p reference --example window_band
show io_model "cargo run --release -p lesson04 --example io_model" cargo run -p lesson04 --example io_model
# The WGSL primer's kernel on whatever adapter there is (lavapipe in CI): exact answers.
show wgsl_primer "cargo run -p lesson08 --example primer" cargo run -p lesson08 --example primer
# Lesson 08's naive kernels refusing chapter 8's problem: the fields of the error that do not
# depend on the adapter (the limit itself does: lavapipe's is smaller than an H200's).
show lesson08_too_large "cargo run -p lesson08 --example too_large" cargo run -p lesson08 --example too_large
# The decode kernels' time per step split into a fixed part and a read rate, from the GPU
# benchmark's committed tables (book/src/figures/decode_gpu_b*.csv, measured on an H200).
show lesson11_decode_fit "cargo run -p lesson11 --example decode_fit" cargo run -p lesson11 --example decode_fit
# The same fit to the tables of the run on an H100 (book/src/figures/h100/).
show lesson11_decode_fit_h100 "cargo run -p lesson11 --example decode_fit -- --out book/src/figures/h100" \
    cargo run -p lesson11 --example decode_fit -- --out book/src/figures/h100
show error_table "cargo run --release -p lesson06 --example error_table" cargo run -p lesson06 --example error_table
# The lessons, from the course manifest (course.toml); a failure to read it stops the script.
lessons=$(cargo run -q --locked -p course -- list lessons)
[[ -n "$lessons" ]] || { echo "course.toml lists no lessons" >&2; exit 1; }
for package in $lessons; do
    show "${package}_tests" "cargo test -p $package" test_list "$package"
done

# From course.toml: the learning path's table on the first page (with the chapters' lengths),
# the introduction's table of stages, the exercises page's table, and the book's table of
# contents from book/SUMMARY.template.md (`cargo test -p tests --test manifest` fails when a
# committed one is stale).
if ! $check; then
    cargo run -q --locked -p course -- path >"$out/learning_path.md"
    cargo run -q --locked -p course -- stages >"$out/stages.md"
    cargo run -q --locked -p course -- exercises >"$out/exercise_table.md"
    cargo run -q --locked -p course -- summary >book/src/SUMMARY.md
fi

show grade_stub "cargo grade ex01" grade_fresh ex01
show planted_bug "cargo run -p grader --example planted_bug" cargo run -p grader --example planted_bug
show self_check "cargo grade --self-check" cargo grade --self-check

if $timings; then
    show tour "cargo run --release" cargo run --release
    stamp tour
    # PyTorch is timed beside lesson 07 when ${PYTHON:-python3} can import torch.
    show scaling "cargo run --release -p lesson07 --example scaling" cargo run --release -p lesson07 --example scaling
    stamp scaling
    show kernels "cargo run --release -p lesson07 --example kernels" cargo run --release -p lesson07 --example kernels
    stamp kernels
    # Every stage's worst error as a fraction of the error model (the numbers behind its safety
    # factor), on this machine's GPU or lavapipe.
    show error_model "cargo run --release -p lab --bin error_model" cargo run --release -p lab --bin error_model
    stamp error_model
    # Differences in the last bits of f32 sums, which depend on the CPU's vector instructions.
    show lesson12_consistency "cargo run --release -p lab --bin consistency" cargo run --release -p lab --bin consistency
    stamp lesson12_consistency
    show lesson12_precision "cargo run --release -p lesson12 --example precision" cargo run --release -p lesson12 --example precision
    stamp lesson12_precision
    # Which tests each bug planted in the WGSL kernels turns red (GPU races make this vary
    # from run to run, so it is not part of --check).
    cargo run -p grader --features gpu --example gpu_planted_bugs >"$out/gpu_mutants.md"
fi
# The book's diagrams (the diagrams crate), drawn from the lessons' code and from the
# measurements above; `cargo test -p diagrams` fails when a committed drawing is stale.
if ! $check; then
    cargo run -q --locked -p diagrams
fi
# Outputs measured on a GPU with tensor cores (an NVIDIA H100 or H200), PyTorch beside it for
# the peers: the release binaries are built on a machine with Rust and run on the GPU. Each
# file's first line is the command that made it, and the file names the machine and the date;
# `bash book/generate.sh --gpu` runs every one of those commands again, on a machine that has
# both, except the outputs named for another device; a command that fails keeps its file.
# (lesson10_sass*.txt disassemble the driver's caches that `shader_stats --out stats` brings
# back, with nvdisasm on the PATH.)
gpu_outputs=(
    gpu_benchmark
    lesson10_occupancy
    lesson10_peer_v8
    lesson10_primitives
    lesson10_roofline
    lesson10_sass
    lesson10_sass_v8
    lesson10_shader_stats
    lesson10_side_by_side
    lesson10_side_by_side_d128
    lesson10_side_by_side_d128_h200
    lesson10_side_by_side_d128_small
    lesson10_side_by_side_d64_h200_cut
    lesson10_side_by_side_h100_d128
    lesson10_side_by_side_h100_d128_cap
    lesson10_side_by_side_h100_d64
    lesson10_side_by_side_h100_longest_d128
    lesson10_side_by_side_h100_longest_d64
    lesson10_side_by_side_h100_repeat
    lesson10_side_by_side_h200_d128
    lesson10_side_by_side_h200_d64
    lesson10_side_by_side_rotated
    lesson10_stats_v10
    lesson10_stats_v8
    lesson10_stats_v8_d128
    lesson10_stats_v9
    lesson10_tune_ablate_v10
    lesson10_tune_batch
    lesson10_tune_groups
    lesson10_tune_kv
    lesson10_tune_longest_first
    lesson10_tune_occupancy
    lesson10_tune_rotation
    lesson10_tune_spread
    lesson10_tune_spread_cap
    lesson10_tune_staging
    lesson10_tune_v10
    lesson10_tune_v11
    lesson10_tune_v6
    lesson10_tune_v7
    lesson10_tune_v8
    lesson10_tune_v8_d128
    lesson10_tune_v8_d128_passes
    lesson10_tune_v8_sweep
    lesson10_tune_v9
    lesson11_decode_anatomy
    lesson11_decode_benchmark
    lesson11_decode_benchmark_h100
    lesson11_decode_cpu
    lesson11_decode_stats_h200
    lesson11_decode_tune
    lesson12_consistency_h200
    lesson12_forward_time
    tf32_trap_h200
)
# gpu_stamp NAME: append where and when a GPU output was measured, to the outputs whose command
# prints no date (lesson 12's model on the GPU); the others' device lines carry it
gpu_stamp() {
    local line gpu driver threads=""
    line=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)
    gpu=${line%%, *}
    driver=${line##*, }
    case "$1" in
    lesson12_consistency_h200) ;;
    lesson12_forward_time) threads=" and its host's $(nproc) CPU threads" ;;
    *) return 0 ;;
    esac
    echo "# measured $(date -u +%Y-%m-%d) on an $gpu (driver $driver)$threads" >>"$out/$1.txt"
}
if $gpu; then
    # The driver's caches that the sass outputs disassemble.
    cargo run --release -p lab --bin shader_stats -- --out stats >/dev/null
    # A file named for a device (`_h100`, `_h200`) is made again only on that device.
    device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 |
        grep -oiE 'h100|h200' | tr '[:upper:]' '[:lower:]' || true)
    for name in "${gpu_outputs[@]}"; do
        tag=$(grep -oE '_h(100|200)' <<<"$name" | head -1 || true)
        if [[ -n "$tag" && "$tag" != "_$device" ]]; then
            echo "kept $name.txt: measured on another device (${tag#_})" >&2
            continue
        fi
        command=$(head -1 "$out/$name.txt")
        command=${command#\$ }
        # The figures of the committed runs went to a folder of their own (`--out fig`); here,
        # to target/, so that the book's figures change only when copied on purpose.
        run=${command//--out fig/--out target\/gpu-figures}
        tmp=$(mktemp)
        if { echo "\$ $command"; bash -c "$run" 2>&1; } >"$tmp"; then
            mv "$tmp" "$out/$name.txt"
            gpu_stamp "$name"
        else
            echo "kept $name.txt: its command failed (nvdisasm for the sass outputs?)" >&2
            rm -f "$tmp"
        fi
    done
fi

# made_here NAME: whether this script makes NAME: a `show NAME ...` line, a lesson's test list
# (the loop over the manifest's lessons), or a redirect to "$out/NAME.md"
made_here() {
    local script=book/generate.sh
    grep -qE "^[[:space:]]*show $1 " "$script" || [[ "$1" =~ ^lesson[0-9]+_tests$ ]] ||
        grep -qF ">\"\$out/$1.md\"" "$script"
}

# check_outputs: every file of book/src/generated/ is made by a command of this script (shown
# above, or a GPU output that names its command and its device), and is shown by the book
# (check_includes finds an include of a missing file; this finds a file no page includes).
check_outputs() {
    local bad=0 file name
    for file in "$out"/*; do
        name=$(basename "$file")
        name=${name%.*}
        if ! grep -rqF "generated/$(basename "$file")" book/src --include='*.md'; then
            echo "book/src/generated/$(basename "$file") is shown by no page" >&2
            bad=1
        fi
        if grep -qxF "$name" <(printf '%s\n' "${gpu_outputs[@]}"); then
            if ! head -1 "$file" | grep -q '^\$ ' || ! grep -qE 'NVIDIA|Device:|CPU:' "$file"; then
                echo "$file: a GPU output starts with its command and names its machine" >&2
                bad=1
            fi
        elif ! made_here "$name"; then
            echo "$file is made by no command of book/generate.sh" >&2
            bad=1
        fi
    done
    return $bad
}
if $check && ! check_outputs; then
    echo "remove or regenerate the outputs above" >&2
    stale=1
fi
exit $stale
