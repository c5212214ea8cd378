#!/usr/bin/env bash
# Runs every built RLX fuzzer for a bounded time. Builds nothing.
#
# Usage: fuzz/run.sh SECONDS [BUILD_DIR] [-- extra libFuzzer flags...]
#   SECONDS    time budget per fuzzer (libFuzzer -max_total_time)
#   BUILD_DIR  build folder configured with -DRLX_BUILD_FUZZ=ON (default: build-fuzz)
#
# For each target found in BUILD_DIR/fuzz (rlx_fuzz_gguf, rlx_fuzz_safetensors,
# rlx_fuzz_tokenizer, rlx_fuzz_lir_binary, rlx_fuzz_jinja, rlx_fuzz_ir_text,
# rlx_fuzz_safetensors_index, rlx_fuzz_hf_config, rlx_fuzz_imatrix, rlx_fuzz_openai), the
# committed seeds in fuzz/corpus/<target>/ are copied into a working corpus
# BUILD_DIR/fuzz/work/<target>/ (new inputs land there, the committed seeds stay
# untouched); crash inputs go to BUILD_DIR/fuzz/artifacts/<target>/. A target with a
# dictionary (fuzz/<target>.dict) gets it.
# Exit status: 0 if every fuzzer ran clean, 1 if any found a crash, 2 on usage errors.
set -u

if [[ $# -lt 1 || ! "$1" =~ ^[0-9]+$ ]]; then
  sed -n '2,14p' "$0" >&2
  exit 2
fi
seconds=$1
shift
build_dir=build-fuzz
if [[ $# -gt 0 && "$1" != "--" ]]; then
  build_dir=$1
  shift
fi
[[ $# -gt 0 && "$1" == "--" ]] && shift
extra_flags=("$@")

script_dir=$(cd "$(dirname "$0")" && pwd)
status=0
ran=0
for target in rlx_fuzz_gguf rlx_fuzz_safetensors rlx_fuzz_tokenizer rlx_fuzz_lir_binary rlx_fuzz_jinja rlx_fuzz_openai \
              rlx_fuzz_ir_text rlx_fuzz_safetensors_index rlx_fuzz_hf_config rlx_fuzz_imatrix; do
  binary="$build_dir/fuzz/$target"
  if [[ ! -x "$binary" ]]; then
    echo "skip $target: $binary not built" >&2
    continue
  fi
  work="$build_dir/fuzz/work/$target"
  artifacts="$build_dir/fuzz/artifacts/$target/"
  mkdir -p "$work" "$artifacts"
  cp -n "$script_dir/corpus/$target/"* "$work/" 2>/dev/null || true
  dict=()  # a target's libFuzzer dictionary, when it has one: fuzz/<target>.dict
  [[ -f "$script_dir/$target.dict" ]] && dict=(-dict="$script_dir/$target.dict")
  echo "== $target for ${seconds}s (corpus $work, artifacts $artifacts)"
  if ! "$binary" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
       -artifact_prefix="$artifacts" -print_final_stats=1 "${dict[@]}" "${extra_flags[@]}" "$work"; then
    echo "!! $target found a failure; inputs in $artifacts" >&2
    status=1
  fi
  ran=$((ran + 1))
done
if [[ $ran -eq 0 ]]; then
  echo "no fuzzers built under $build_dir/fuzz" >&2
  exit 2
fi
exit $status
