#!/usr/bin/env bash
# One long libFuzzer run of one target over every core of a host (issue 35's 10 M inputs):
# libFuzzer's -jobs/-workers, all workers sharing one corpus, bounded by a time limit.
#
# Usage: fuzz/long_run.sh TARGET SECONDS [RUNS] [FUZZ_DIR] [OUT_DIR]
#   TARGET    the name after rlx_fuzz_ (jinja, ir_text, tokenizer, ...)
#   SECONDS   libFuzzer -max_total_time of every worker
#   RUNS      inputs wanted over all workers (default 10000000); each worker gets
#             -runs=ceil(RUNS / workers), so a figure above 10 M keeps fast workers busy
#             until the time bound instead of idle while slow ones finish
#   FUZZ_DIR  a folder with the built rlx_fuzz_TARGET (default build-fuzz/fuzz); the seeds
#             come from fuzz/corpus/rlx_fuzz_TARGET and the dictionary from fuzz/
#   OUT_DIR   where the summary, the workers' logs and any crash inputs go (default
#             FUZZ_DIR/long_TARGET)
# Flags as fuzz/README.md records: -max_len=65536 -timeout=10 -rss_limit_mb=2048. ASan
# keeps no allocation stacks (malloc_context_size=0: reports name the faulting access
# and its frames, not where the memory was allocated), which made the allocation-heavy
# Jinja renderer 7 % faster. Prints one summary line: total inputs, errors, artifacts.
set -u

if [[ $# -lt 2 || ! "$2" =~ ^[0-9]+$ ]]; then
  sed -n '2,18p' "$0" >&2
  exit 2
fi
target=$1
seconds=$2
runs=${3:-10000000}
repo=$(cd "$(dirname "$0")/.." && pwd)
fuzz_dir=$(cd "${4:-$repo/build-fuzz/fuzz}" && pwd)
out=${5:-$fuzz_dir/long_$target}
binary=$fuzz_dir/rlx_fuzz_$target
[[ -x "$binary" ]] || { echo "long_run: $binary is not built" >&2; exit 2; }

workers=$(nproc)
per_worker=$(((runs + workers - 1) / workers))
rm -rf "$out" && mkdir -p "$out/corpus" "$out/artifacts"
cp "$repo/fuzz/corpus/rlx_fuzz_$target"/* "$out/corpus/"
dict=()
[[ -f "$repo/fuzz/rlx_fuzz_$target.dict" ]] && dict=(-dict="$repo/fuzz/rlx_fuzz_$target.dict")
start_units=$(find "$out/corpus" -type f | wc -l)
start=$(date +%s)
(cd "$out/artifacts" &&
  ASAN_OPTIONS=malloc_context_size=0 "$binary" -jobs="$workers" -workers="$workers" -runs="$per_worker" \
    -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 "${dict[@]}" \
    -artifact_prefix="$out/artifacts/" -print_final_stats=1 "$out/corpus" > "$out/main.log" 2>&1)
end=$(date +%s)
total=$(cat "$out"/artifacts/fuzz-*.log | grep -oE "^Done [0-9]+ runs" | awk '{s += $2} END {print s + 0}')
errors=$(cat "$out"/artifacts/fuzz-*.log | grep -cE "ERROR|SUMMARY: |crash-|timeout-|leak-|oom-")
artifacts=$(find "$out/artifacts" -type f ! -name '*.log' | wc -l)
echo "rlx_fuzz_$target workers=$workers runs_per_worker=$per_worker wall_s=$((end - start)) total_runs=$total" \
  "error_lines=$errors start_units=$start_units corpus_units=$(find "$out/corpus" -type f | wc -l) artifacts=$artifacts" |
  tee "$out/summary.txt"
[[ $errors -eq 0 && $artifacts -eq 0 ]]
