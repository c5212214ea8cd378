#!/usr/bin/env bash
# Tests of the rlx program as a user meets it: bad flags, missing and hostile files end
# with a non-zero exit and one message naming what was wrong (and where), and good input
# runs. Needs nothing outside the repository: the model is made by `rlx synth`.
# Usage: tests/cli/cli_test.sh PATH_TO_RLX
set -u
rlx=${1:?usage: cli_test.sh PATH_TO_RLX}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export RLX_CACHE_DIR=$work/cache  # compile caches and the demo model stay in this run's folder
failures=0
cases=0

# Every refused input (a "fail" case) must also end within kFailSeconds and under
# kFailRssKb of resident memory, measured with GNU time where the machine has it.
kFailSeconds=20
kFailRssKb=$((1024 * 1024))
gnu_time=/usr/bin/time
[ -x "$gnu_time" ] || gnu_time=""
fail_cases=0
peak_rss_kb=0
peak_rss_case=""
slowest=0
slowest_case=""

# check NAME EXPECT PATTERN -- ARGS...: runs rlx ARGS; EXPECT is "ok" (exit 0) or "fail"
# (non-zero exit, no crash: the status is below 128); PATTERN is an extended regular
# expression that stdout + stderr must contain.
check() {
  local name=$1 expect=$2 pattern=$3
  shift 4
  cases=$((cases + 1))
  local out status
  if [ -n "$gnu_time" ]; then
    out=$("$gnu_time" -f '%M %e' -o "$work/.usage" "$rlx" "$@" 2>&1)
  else
    out=$("$rlx" "$@" 2>&1)
  fi
  status=$?
  local bad=""
  if [ "$expect" = ok ] && [ $status -ne 0 ]; then bad="exit $status, expected 0"; fi
  if [ "$expect" = fail ] && { [ $status -eq 0 ] || [ $status -ge 128 ]; }; then
    bad="exit $status, expected an error exit"
  fi
  if [ "$expect" = fail ] && [ -n "$gnu_time" ] && [ -s "$work/.usage" ]; then
    local rss secs
    read -r rss secs < <(tail -n 1 "$work/.usage")
    fail_cases=$((fail_cases + 1))
    if [ "${rss:-0}" -gt "$peak_rss_kb" ]; then peak_rss_kb=$rss; peak_rss_case=$name; fi
    if awk -v a="${secs:-0}" -v b="$slowest" 'BEGIN { exit !(a > b) }'; then slowest=$secs; slowest_case=$name; fi
    if [ -z "$bad" ] && [ "${rss:-0}" -gt "$kFailRssKb" ]; then bad="used $((rss / 1024)) MB (limit $((kFailRssKb / 1024)) MB)"; fi
    if [ -z "$bad" ] && awk -v a="${secs:-0}" -v b="$kFailSeconds" 'BEGIN { exit !(a > b) }'; then
      bad="took $secs s (limit $kFailSeconds s)"
    fi
  fi
  if [ -z "$bad" ] && ! grep -Eq -- "$pattern" <<<"$out"; then bad="output lacks /$pattern/"; fi
  if [ -n "$bad" ]; then
    failures=$((failures + 1))
    echo "FAIL $name: $bad"
    echo "---- rlx $*"
    echo "$out" | tail -20
    echo "----"
  else
    echo "ok   $name"
  fi
}

model=$work/tiny.gguf
check synth ok "wrote .*tiny\.gguf" -- synth --preset tiny --type q8_0 --seed 3 -o "$model"
check info ok "architecture: llama" -- info "$model"
check synth_arch_mismatch fail "preset 'llama-3.2-1b' is a llama model; --arch gemma2 does not fit" -- \
  synth --arch gemma2 --preset llama-3.2-1b -o "$work/never.gguf"

# Files: missing, not GGUF, truncated, empty.
echo "hello" >"$work/text.gguf"
head -c 300 "$model" >"$work/truncated.gguf"
: >"$work/empty.gguf"
check info_missing fail "missing\.gguf" -- info "$work/missing.gguf"
check info_not_gguf fail "text\.gguf.*magic" -- info "$work/text.gguf"
check info_truncated fail "truncated\.gguf: byte [0-9]+" -- info "$work/truncated.gguf"
check info_empty fail "empty\.gguf" -- info "$work/empty.gguf"
check bench_missing_model fail "--model: model '.*missing\.gguf' does not exist" -- bench --model "$work/missing.gguf"

# Commands and flags.
check no_command fail "subcommand is required" --
check unknown_command fail "'bogus' is not a command \(commands: run, info" -- bogus
check unknown_flag fail "'--bogus' is not a command" -- --bogus
check unknown_sub_flag fail "--bogus" -- info "$model" --bogus
check threads_not_a_number fail "--threads: Value x not in range 0 to 4096" -- bench --model "$model" --threads x
check prefill_zero fail "--prefill: Value 0 not in range 1 to" -- bench --model "$model" --prefill 0
check repeat_zero fail "--repeat: Value 0 not in range 1 to 100" -- bench --model "$model" --repeat 0
check kv_type fail "--kv: .*f32" -- bench --model "$model" --kv q4
check top_p fail "--top-p: Value 2 not in range" -- run --top-p 2
check serve_step_rows fail "--step-rows: Value -5 not in range 0 to" -- serve --model "$model" --step-rows -5
check quantize_type fail "'q9_x' is not a quantization mix \(f32" -- quantize "$model" "$work/out.gguf" q9_x
check quantize_args fail "expected MODEL OUT\.gguf MIX, got 2 arguments" -- quantize "$model" "$work/out.gguf"
check version ok "^rlx [0-9]+\.[0-9]+\.[0-9]+ \(commit [0-9a-z-]+\)" -- --version

# Exit status: 2 for a wrong request (README), 1 for other failures, 0 for --help.
# check_status NAME STATUS -- ARGS...
check_status() {
  local name=$1 want=$2
  shift 3
  cases=$((cases + 1))
  "$rlx" "$@" >/dev/null 2>&1
  local status=$?
  if [ $status -eq "$want" ]; then
    echo "ok   $name"
  else
    failures=$((failures + 1))
    echo "FAIL $name: exit $status, expected $want (rlx $*)"
  fi
}
check_status status_unknown_command 2 -- bogus
check_status status_no_command 2 --
check_status status_unknown_flag 2 -- info "$model" --bogus
check_status status_bad_value 2 -- bench --model "$model" --threads x
check_status status_help 0 -- run --help
check_status status_missing_file 1 -- info "$work/missing.gguf"

check logits_bad_token fail "--tokens: 'x' is not a token id" -- logits --model "$model" --tokens 1,2,x \
  --out "$work/l.bin"
check logits_out_of_vocab fail "token id 999999 is outside the vocabulary \[0, 512\)" -- logits --model "$model" \
  --tokens 1,2,999999 --out "$work/l.bin"
check logits_unwritable fail "--out: '$work/no/such/dir/l.bin': its folder '$work/no/such/dir' does not exist" -- \
  logits --model "$model" --tokens 1,2 --out "$work/no/such/dir/l.bin"
# Requests beyond the machine: refused up front with the sizes, never an abort
# (RLX_MAX_MEMORY_MB caps what counts as available, so that the result does not depend
# on this machine's memory).
check threads_too_many fail "threads 4096 is more than the [0-9]+ threads RLX starts" -- run --model "$model" -p hi -n 1 \
  --threads 4096
check demo_threads_too_many fail "--threads 4096 is more than" -- run --demo --threads 4096
RLX_MAX_MEMORY_MB=1024 check ctx_too_big fail "the KV cache for ctx 16777216 needs [0-9.]+ GB, more than the 1\.1 GB" \
  -- run --model "$model" -p hi -n 1 --ctx 16777216
RLX_MAX_MEMORY_MB=1024 check seq_too_big fail "--seq 16777216 needs [0-9.]+ GB, more than the 1\.1 GB" -- \
  run --demo --seq 16777216
check run_bad_device fail "unknown device 'gpu'" -- run --model "$model" -p hi --device gpu
printf 'fusion = [\n' >"$work/broken.rlx.toml"
printf '[fusion]\nfoo = 1\n' >"$work/typo.rlx.toml"
check profile_broken fail "broken\.rlx\.toml:1: " -- compile --profile "$work/broken.rlx.toml"
check profile_typo fail "typo\.rlx\.toml:2: unknown key 'fusion\.foo'" -- compile --profile "$work/typo.rlx.toml"
check profile_missing fail "compile profile 'nosuch' cannot be opened" -- compile --profile nosuch
printf '[backend.cdua]\nskip_fusion = true\n' >"$work/section.rlx.toml"
check profile_backend_typo fail "\[backend\.cdua\] names no device kind" -- compile --profile "$work/section.rlx.toml"
check compile_phase_needs_model fail "--phase decode needs --model" -- compile --phase decode
check compile_phase_bad fail "--phase: decoder not in" -- compile --model "$model" --phase decoder
# The decode step as rlx run builds it: one token against a KV cache (update_slice into
# the cache handles).
check compile_decode ok "update_slice +native" -- compile --model "$model" --phase decode --ctx 64 --report
# --tensor-parallel N: a group of N devices of --device's kind (the CPU group here).
check compile_tensor_parallel ok "tensor parallel over 2 ranks" -- \
  compile --model "$model" --device cpu --tensor-parallel 2 --phase decode --ctx 64 --report
check tensor_parallel_mismatch fail "--tensor-parallel: 3 ranks, but --device cpu:0,1 names a group of 2" -- \
  logits --model "$model" --tokens 1,2 --device cpu:0,1 --tensor-parallel 3 --out "$work/tp.bin"
check tensor_parallel_zero fail "--tensor-parallel: Value 0 not in range 1 to 64" -- \
  bench --model "$model" --tensor-parallel 0
check tensor_parallel_bad_device fail "--device: .*gpu" -- run --model "$model" --device gpu --tensor-parallel 2
# CUDA's decode fusions are IR ops, reported on a machine without a GPU too (builds
# with the CUDA backend only).
if "$rlx" compile --model "$model" --device cuda --phase decode --report 2>&1 | grep -q "no cuda backend"; then
  echo "skip compile_decode_cuda: this build has no CUDA backend"
else
  check compile_decode_cuda ok "fused linear_norm +x[0-9]+" -- compile --model "$model" --device cuda --phase decode --report
  check compile_decode_cuda_group ok "fused linear_group +x[0-9]+" -- compile --model "$model" --device cuda --phase decode
  # several streams' decode step, as rlx bench --batch and rlx serve build it: rows the
  # one-row norm prologue does not take
  check compile_decode_cuda_batch ok "missed linear_norm: more rows than the GEMV takes" -- \
    compile --model "$model" --device cuda --phase decode --batch 4 --policy fusable --report
fi
check compile_batch_needs_model fail "--batch 2 needs --model and --phase prefill or decode" -- compile --batch 2

# Good input end to end.
check synth_f32 ok "wrote" -- synth --preset tiny --type f32 -o "$work/f32.gguf"
check quantize ok "wrote .*q4\.gguf \(q4_k_m\)" -- quantize "$work/f32.gguf" "$work/q4.gguf" q4_k_m
# The tiny model's rows (64, 128) are no multiple of a K-quant's 256: as llama-quantize,
# Q4_K falls back to Q5_0 and Q6_K (the output, raised attn_v / ffn_down) to Q8_0.
check info_quantized ok "Q5_0 +12 tensors" -- info "$work/q4.gguf"
check info_quantized_q6 ok "Q8_0 +3 tensors" -- info "$work/q4.gguf"
check logits ok "" -- logits --model "$model" --tokens 1,2,3 --out "$work/l.bin"
if [ "$(stat -c %s "$work/l.bin" 2>/dev/null)" != $((3 * 512 * 4)) ]; then
  failures=$((failures + 1))
  echo "FAIL logits_size: $work/l.bin is not 3 x 512 float32"
fi
check bench ok "runs +2 per figure, median shown" -- bench --model "$model" --threads 1 --prefill 8 --ctx 8 \
  --steps 2 --repeat 2 --json "$work/bench.json"
if ! grep -q '"time_to_first_token_ms"' "$work/bench.json" 2>/dev/null; then
  failures=$((failures + 1))
  echo "FAIL bench_json: no time_to_first_token_ms in the JSON"
fi
# Batched decode: B streams of different lengths stepping together, aggregate tokens/s
# next to batch 1 and the bandwidth ceiling, also in the JSON.
check bench_batch ok "batch 3 +[0-9.]+ +[0-9.]+ +[0-9.]+x batch 1, [0-9.]+% of the" -- bench --model "$model" -t 1 \
  --prefill 8 --ctx 8 --steps 2 --repeat 1 --no-cache --batch 1,3 --json "$work/bench_batch.json"
if ! python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); b=d["batch"]; assert b["3"]["tokens_per_s"] > 0 and b["1"]["tokens_per_s"] > 0' \
  "$work/bench_batch.json" 2>/dev/null; then
  failures=$((failures + 1))
  echo "FAIL bench_batch_json: no batch figures in the JSON"
fi
cases=$((cases + 1))
check bench_batch_zero fail "--batch: Value 0 not in range 1 to 256" -- bench --model "$model" --batch 1,0
check bench_bad_device fail "--device|device" -- bench --model "$model" --device gpu7
if "$rlx" bench --model "$model" --device cuda --prefill 8 --ctx 8 --steps 1 --repeat 1 --no-cache 2>&1 |
  grep -qiE "no cuda backend|no CUDA device|not available|not built"; then
  echo "skip bench_cuda: no CUDA device or backend here"
else
  check bench_cuda ok "copy-bandwidth ceiling" -- bench --model "$model" --device cuda --prefill 8,16 --ctx 8 \
    --steps 2 --repeat 1 --batch 1,4
fi

# render-chat: the rendering on stdout byte for byte (nothing added); a template that
# raises exits 1 with its own message; missing and malformed files name themselves.
printf '%s%s%s\n' '{{- bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content | trim }}{{ eos_token }}' \
  '{% endfor %}{%- if tools %}[{{ tools | map(attribute="name") | join(",") }}]{% endif %}' \
  '{%- if add_generation_prompt %}<|assistant|>{% endif %}' >"$work/chat.jinja"
printf '[{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi \\u00e9\\n "}]' \
  >"$work/messages.json"
printf '[{"name": "get_weather"}, {"name": "clock"}]' >"$work/tools.json"
render_exact() {  # render_exact NAME EXPECTED ARGS...: stdout must be EXPECTED exactly, exit 0
  local name=$1 expected=$2
  shift 2
  cases=$((cases + 1))
  "$rlx" render-chat "$@" >"$work/render.out" 2>"$work/render.err"
  local status=$?
  printf '%s' "$expected" >"$work/render.want"
  if [ $status -ne 0 ] || ! cmp -s "$work/render.out" "$work/render.want"; then
    failures=$((failures + 1))
    echo "FAIL $name: exit $status, stdout differs from the expected rendering"
    echo "---- want:"; cat "$work/render.want"; echo; echo "---- got:"; cat "$work/render.out"; echo
    cat "$work/render.err"
  else
    echo "ok   $name"
  fi
}
render_exact render_chat "<s><|system|>Be brief.</s><|user|>Hi é</s>[get_weather,clock]<|assistant|>" \
  --template "$work/chat.jinja" --messages "$work/messages.json" --add-generation-prompt --bos "<s>" --eos "</s>" \
  --tools "$work/tools.json"
render_exact render_chat_plain "<|system|>Be brief.<|user|>Hi é" --template "$work/chat.jinja" \
  --messages "$work/messages.json"
printf '{{ strftime_now("%%d %%b %%Y") }}\n\n' >"$work/date.jinja"
render_exact render_chat_now "27 Nov 2026
" --template "$work/date.jinja" --messages "$work/messages.json" --now "2026-11-27 12:00"

printf '%s' "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}" \
  >"$work/raise.jinja"
cases=$((cases + 1))
"$rlx" render-chat --template "$work/raise.jinja" --messages "$work/messages.json" >"$work/raise.out" 2>"$work/raise.err"
status=$?
if [ $status -ne 1 ] || ! grep -q "System role not supported" "$work/raise.err" || [ -s "$work/raise.out" ]; then
  failures=$((failures + 1))
  echo "FAIL render_chat_raise: exit $status (want 1), stderr: $(cat "$work/raise.err")"
else
  echo "ok   render_chat_raise"
fi
printf '{%% for m in messages %%}\n{{ m.role + 1 }}{%% endfor %%}' >"$work/typo.jinja"
check render_chat_type_error fail "template line 2 column 11: can only concatenate str" -- render-chat \
  --template "$work/typo.jinja" --messages "$work/messages.json"
printf '{%% if true %%}never closed' >"$work/unclosed.jinja"
check render_chat_parse_error fail "unclosed\.jinja: line 1 column 26: unexpected end of template: 'if' opened" -- \
  render-chat --template "$work/unclosed.jinja" --messages "$work/messages.json"
check render_chat_missing_template fail "cannot open '.*missing\.jinja'" -- render-chat --template \
  "$work/missing.jinja" --messages "$work/messages.json"
check render_chat_missing_messages fail "cannot open '.*missing\.json'" -- render-chat --template "$work/chat.jinja" \
  --messages "$work/missing.json"
printf '[{"role": ' >"$work/broken.json"
check render_chat_bad_json fail "broken\.json: not valid JSON" -- render-chat --template "$work/chat.jinja" \
  --messages "$work/broken.json"
check render_chat_bad_now fail "--now: 'tomorrow' is not a date" -- render-chat --template "$work/chat.jinja" \
  --messages "$work/messages.json" --now tomorrow
# rlx run --chat renders with the model's own template; --template picks a built-in format.
check synth_chat_template ok "wrote" -- synth --preset tiny --type f32 --chat-template "$work/chat.jinja" \
  -o "$work/chat.gguf"
check run_chat_model_template ok "the model's own chat template" -- run --model "$work/chat.gguf" --chat -p "Hi" \
  -n 2 --threads 1
check run_chat_builtin ok "a built-in chat format" -- run --model "$work/chat.gguf" --chat -p "Hi" -n 2 \
  --threads 1 --template chatml
check run_chat_no_template fail "no chat template \(tokenizer\.chat_template\); pass --template" -- run --model \
  "$model" --chat -p "Hi" -n 2 --threads 1

# quantize: its own output re-quantizes; mix names in any case; a line per fallback.
check requantize_f32 ok "wrote .*a\.gguf \(f32\)" -- quantize "$work/q4.gguf" "$work/a.gguf" f32
check requantize_q8 ok "wrote .*b\.gguf \(q8_0\)" -- quantize "$work/a.gguf" "$work/b.gguf" q8_0
check quantize_upper_case ok "wrote .*c\.gguf \(q4_k_m\)" -- quantize --model "$work/f32.gguf" "$work/c.gguf" Q4_K_M
fallback="tensor 'blk\.0\.attn_q\.weight' \[64, 64\]: wanted Q4_K, chose Q5_0 \(rows of 64 values are no multiple of "
check quantize_fallback ok "${fallback}Q4_K's 256-value block\)" -- \
  quantize "$work/f32.gguf" "$work/d.gguf" q4_k_m

# llama.cpp's short flags and long names.
printf 'Once upon' >"$work/prompt.txt"
check run_llama_flags ok "^Once upon" -- run -m "$model" -f "$work/prompt.txt" -n 2 -c 64 -t 1 -s 5 --temp 0.8
cases=$((cases + 1))  # -f -: the prompt from standard input
if out=$(printf 'Once upon' | "$rlx" run -m "$model" -f - -n 2 --temp 0 2>&1) && grep -q "^Once upon" <<<"$out"; then
  echo "ok   run_prompt_stdin"
else
  failures=$((failures + 1))
  echo "FAIL run_prompt_stdin: $(tail -3 <<<"$out")"
fi
check run_seed_default ok "seed [0-9]+ \(--seed [0-9]+ repeats this run\)" -- run --model "$model" -p hi -n 2 --temp 0.8
check run_stop_reason ok "stop: length" -- run --model "$model" -p hi -n 2 --temp 0
check run_llama_long ok "decode 3 tokens" -- run --model "$model" -p hi --n-predict 3 --ctx-size 64 --threads 1
check run_file_missing fail "--file: File does not exist" -- run -m "$model" -f "$work/nope.txt"
check run_file_and_prompt fail "excludes" -- run -m "$model" -f "$work/prompt.txt" -p hi
check logits_short_flags ok "wrote logits" -- logits -m "$model" --tokens 1,2 -t 1 --out "$work/l2.bin"

# One model path for every command: a Hugging Face folder (config.json + safetensors),
# its .safetensors file or its index mean the folder.
hf=$work/hf
python3 "$(dirname "$0")/make_hf_folder.py" "$hf"
check hf_info ok "config: llama" -- info "$hf"
check hf_info_tensors ok "model\.layers\.1\.mlp\.down_proj\.weight +F32 +\[64, 128\]" -- info "$hf"
check hf_info_params ok "parameters: 106816 " -- info -m "$hf/model.safetensors"
check hf_run ok "rlx: load .* decode 2 tokens" -- run -m "$hf" -p "hi" -n 2 -t 1
check hf_logits ok "wrote logits \[3, 256\]" -- logits --model "$hf/model.safetensors.index.json" --tokens 1,2,3 \
  --out "$work/hf.bin"
check hf_compile ok "fusion report" -- compile --model "$hf"
check hf_config_json ok "config: llama" -- info "$hf/config.json"
check hf_bench ok "runs +2 per figure, median shown" -- bench --model "$hf" -t 1 --prefill 8 --ctx 8 --steps 2 \
  --repeat 2
check hf_quantize ok "wrote .*hf8\.gguf \(q8_0\)" -- quantize "$hf" "$work/hf8.gguf" q8_0
check hf_quantize_gguf_runs ok "wrote logits \[3, 256\]" -- logits -m "$work/hf8.gguf" --tokens 1,2,3 \
  --out "$work/hf8.bin"
# rlx convert writes the folder's tokenizer: the GGUF tokenizes as the folder does.
check hf_convert ok "wrote .*hfc\.gguf \(f16, .*tokenizer from tokenizer\.json\)" -- convert "$hf" "$work/hfc.gguf"
hf_text=$'Hello, w\xc3\xb6rld! 123'
hf_ids=$("$rlx" tokenize --model "$hf" --no-special --text "$hf_text" 2>&1)
check hf_convert_tokenizer ok "^$hf_ids\$" -- tokenize --model "$work/hfc.gguf" --no-special --text "$hf_text"
# Paths that are no model: the same message from every command.
mkdir -p "$work/nohf" "$work/lone"
cp "$hf/model.safetensors" "$work/lone/"
nohf="folder without config\.json"
check nohf_info fail "$nohf" -- info "$work/nohf"
check nohf_run fail "--model: model '.*nohf' is a $nohf" -- run -m "$work/nohf" -p hi
check nohf_bench fail "--model: model '.*nohf' is a $nohf" -- bench -m "$work/nohf"
check nohf_compile fail "--model: model '.*nohf' is a $nohf" -- compile -m "$work/nohf"
check nohf_logits fail "--model: model '.*nohf' is a $nohf" -- logits -m "$work/nohf" --tokens 1 --out "$work/x.bin"
check nohf_quantize fail "model '.*nohf' is a $nohf" -- quantize "$work/nohf" "$work/x.gguf" q8_0
check lone_safetensors fail "lone/model\.safetensors': its folder has no config\.json" -- info \
  "$work/lone/model.safetensors"
check missing_model_run fail "--model: model '.*missing\.gguf' does not exist" -- run -m "$work/missing.gguf"
mkdir -p "$work/hf_notok"
cp "$hf/config.json" "$hf/model.safetensors" "$work/hf_notok/"
check hf_run_no_tokenizer fail "hf_notok' has no tokenizer\.json" -- run -m "$work/hf_notok" -p hi -n 1
# --tokens: the prompt as ids, the generated ids printed (no tokenizer needed); the first
# greedy id is the argmax of the prompt's last logits row.
check hf_run_tokens_no_tokenizer ok "stop: length" -- run -m "$work/hf_notok" --tokens 1,2,3 -n 3
cases=$((cases + 1))
"$rlx" logits -m "$work/hf_notok" --tokens 1,2,3 --out "$work/notok.bin" >/dev/null 2>&1
first=$("$rlx" run -m "$work/hf_notok" --tokens "1 2 3" -n 1 2>/dev/null | head -1)
if python3 -c 'import struct,sys; raw=open(sys.argv[1],"rb").read(); n=len(raw)//4; v=n//3; row=struct.unpack(f"<{n}f",raw)[2*v:]; sys.exit(0 if max(range(v),key=lambda i:(row[i],-i))==int(sys.argv[2]) else 1)' \
  "$work/notok.bin" "$first"; then
  echo "ok   run_tokens_greedy_is_argmax"
else
  failures=$((failures + 1))
  echo "FAIL run_tokens_greedy_is_argmax: rlx run --tokens gave '$first', not the argmax of rlx logits"
fi
check run_tokens_bad fail "--tokens: 'x' is not a token id" -- run -m "$work/hf_notok" --tokens 1,x
check run_tokens_excludes_chat fail "--tokens excludes --chat" -- run -m "$model" --tokens 1 --chat
# Encoders: rlx embed and rlx forward on a synthetic BERT (WordPiece vocabulary).
bert=$work/bert.gguf
check synth_bert ok "wrote .*bert\.gguf" -- synth --preset bert-tiny --seed 5 -o "$bert"
check info_bert ok "architecture: bert" -- info "$bert"
check embed_texts ok "2 texts .*dim 128, pooling cls" -- embed -m "$bert" --text "hello world" --text "a b c d e"
check embed_npy ok "3 texts" -- embed -m "$bert" --text x --text "y z" --text "w" --normalize --out "$work/e.npy"
if [ "$(head -c 6 "$work/e.npy" | tail -c 5)" != "NUMPY" ] || [ "$(stat -c %s "$work/e.npy")" -ne $((128 + 3 * 128 * 4)) ]; then
  failures=$((failures + 1)); echo "FAIL embed_npy_file: not a [3, 128] float32 .npy"
fi
printf 'one\ntwo words\n' >"$work/texts.txt"
check embed_file_jsonl ok "2 texts .*pooling mean, normalized" -- embed -m "$bert" -f "$work/texts.txt" \
  --pooling mean --normalize --out "$work/e.jsonl"
# Texts of different lengths in one batch embed as they do one at a time.
printf 'a\nthe longest text of all these texts by far\nmiddle sized text\nb c\n' >"$work/mixed.txt"
check embed_batched ok "4 texts" -- embed -m "$bert" -f "$work/mixed.txt" --batch 4 --pooling mean --out "$work/b4.jsonl"
check embed_one_by_one ok "4 texts" -- embed -m "$bert" -f "$work/mixed.txt" --batch 1 --pooling mean --out "$work/b1.jsonl"
if ! python3 - "$work/b4.jsonl" "$work/b1.jsonl" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) == 4, (len(a), len(b))
worst = max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb))
assert worst < 1e-5, worst
PY
then
  failures=$((failures + 1)); echo "FAIL embed_batch_equals_one_by_one"
fi
check embed_text_and_file fail "with --text .* or --file .*, not both" -- embed -m "$bert" --text a -f "$work/texts.txt"
check embed_bad_pooling fail "--pooling: max not in" -- embed -m "$bert" --text a --pooling max
check embed_lm fail "language model, not an encoder" -- embed -m "$model" --text a
check embed_bench ok "seq +batch +texts/s" -- embed -m "$bert" --bench --bench-seq 8 --bench-batch 1,2
check forward_bert ok "wrote last_hidden_state \[1, 3, 128\]" -- forward -m "$bert" \
  --input input_ids=1x3xi32=2,10,3 --output last_hidden_state=@"$work/h.bin"
[ "$(stat -c %s "$work/h.bin")" -eq $((3 * 128 * 4)) ] || { failures=$((failures + 1)); echo "FAIL forward_bert_size"; }
printf '\x02\x00\x00\x00\x0a\x00\x00\x00' >"$work/ids.bin"
check forward_file ok "wrote last_hidden_state \[1, 2, 128\]" -- forward -m "$bert" \
  --input input_ids=1x2xi32=@"$work/ids.bin" --output last_hidden_state=@"$work/h2.bin"
check forward_short_file fail "ids\.bin' has 8 bytes; 1x3xi32 needs 12" -- forward -m "$bert" \
  --input input_ids=1x3xi32=@"$work/ids.bin" --output last_hidden_state=@"$work/h3.bin"
check forward_unknown_input fail "--input pixel_values: this bert encoder takes input_ids" -- forward -m "$bert" \
  --input input_ids=1x2xi32=2,3 --input pixel_values=1x2xf32=0,1 --output last_hidden_state=@"$work/h4.bin"
check forward_float_ids fail "input_ids must be i32 or i64, got f32" -- forward -m "$bert" \
  --input input_ids=1x2xf32=2,3 --output last_hidden_state=@"$work/h5.bin"
check forward_bad_spec fail "expected NAME=SHAPExDTYPE=@FILE" -- forward -m "$bert" --input input_ids \
  --output last_hidden_state=@"$work/h6.bin"
check forward_bad_dtype fail "element type 'u8' is not supported" -- forward -m "$bert" \
  --input input_ids=1x2xu8=2,3 --output last_hidden_state=@"$work/h7.bin"
check forward_no_pooler fail "this model has no pooler" -- forward -m "$bert" --input input_ids=1x2xi32=2,3 \
  --output pooler_output=@"$work/p.bin"
check forward_mask_gap fail "row 0 must be ones then zeros" -- forward -m "$bert" --input input_ids=1x3xi32=2,5,3 \
  --input attention_mask=1x3xi32=1,0,1 --output last_hidden_state=@"$work/h8.bin"
check forward_bad_token fail "token id 5000 is outside the vocabulary" -- forward -m "$bert" \
  --input input_ids=1x2xi32=2,5000 --output last_hidden_state=@"$work/h9.bin"
check forward_lm ok "wrote logits \[1, 3, 512\]" -- forward -m "$model" --input input_ids=1x3xi32=1,2,3 \
  --output logits=@"$work/l.bin"
check forward_lm_bad_output fail "a language model's output is logits" -- forward -m "$model" \
  --input input_ids=1x3xi32=1,2,3 --output last_hidden_state=@"$work/l2.bin"
check run_encoder fail "is an encoder .*rlx embed or rlx forward" -- run -m "$bert" -p hi -n 1

if [ -d "$(dirname "$0")/../../../shared/conformance/hf/llama" ]; then
  conf=$(cd "$(dirname "$0")/../../../shared/conformance/hf/llama" && pwd)
  check conformance_info ok "config: llama" -- info "$conf"
  check conformance_run ok "decode 3 tokens .*stop: length" -- run -m "$conf" --tokens 1,2,3 -n 3
  check conformance_bench ok "decode @ctx 8 " -- bench -m "$conf" -t 1 --prefill 8 --ctx 8 --steps 2 --repeat 1
  check conformance_logits ok "wrote logits \[2, 1024\]" -- logits -m "$conf" --tokens 1,2 --out "$work/c.bin"
  check conformance_compile ok "fusion report" -- compile -m "$conf"
  check conformance_quantize ok "wrote" -- quantize "$conf" "$work/conf.gguf" Q8_0
  bertdir=$(cd "$(dirname "$0")/../../../shared/conformance/hf/bert" && pwd)
  check conformance_forward_bert ok "wrote pooler_output \[1, 128\]" -- forward -m "$bertdir" \
    --input input_ids=1x7xi32=101,577,521,98,179,88,238 --output last_hidden_state=@"$work/bh.bin" \
    --output pooler_output=@"$work/bp.bin"
  # Vision and audio encoders (the values are checked in tests/integration/media_conformance_test.cpp).
  dino=$(cd "$(dirname "$0")/../../../shared/conformance/hf/dinov2" && pwd)
  check forward_dinov2 ok "wrote pooler_output \[1, 128\]" -- forward -m "$dino" \
    --input pixel_values=1x3x56x56xf32=@"$dino/pixels-img56.f32" --output last_hidden_state=@"$work/dh.bin" \
    --output pooler_output=@"$work/dp.bin"
  [ "$(stat -c %s "$work/dh.bin")" -eq $((17 * 128 * 4)) ] || { failures=$((failures + 1)); echo "FAIL forward_dinov2_size"; }
  check info_dinov2 fail "model_type 'dinov2' is a vision / audio encoder: rlx forward runs it" -- info "$dino"
  check forward_dinov2_ids fail "a dinov2 model takes pixel_values only" -- forward -m "$dino" \
    --input input_ids=1x2xi32=1,2 --output last_hidden_state=@"$work/x.bin"
  check forward_dinov2_int_pixels fail "pixel_values: must be f32, got i32" -- forward -m "$dino" \
    --input pixel_values=1x1x1x1xi32=1 --output last_hidden_state=@"$work/x.bin"
  halves() { printf '0.5%.0s,' $(seq $(($1 - 1))); printf '0.5'; }  # N inline values
  check forward_dinov2_channels fail "pixel_values must be \[batch, 3, height, width\], got \[1, 1, 28, 28\]" -- \
    forward -m "$dino" --input "pixel_values=1x1x28x28xf32=$(halves 784)" --output last_hidden_state=@"$work/x.bin"
  check forward_dinov2_small fail "a 8x14 image does not fit" -- forward -m "$dino" \
    --input "pixel_values=1x3x8x14xf32=$(halves 336)" --output last_hidden_state=@"$work/x.bin"
  check forward_dinov2_output fail "a dinov2 model's outputs are last_hidden_state, pooler_output" -- forward -m "$dino" \
    --input pixel_values=1x3x56x56xf32=@"$dino/pixels-img56.f32" --output logits=@"$work/x.bin"
  w2v=$(cd "$(dirname "$0")/../../../shared/conformance/hf/wav2vec2" && pwd)
  check forward_wav2vec2 ok "wrote last_hidden_state \[1, 79, 128\]" -- forward -m "$w2v" \
    --input input_values=1x1600xf32=@"$w2v/audio-a1600.f32" --output last_hidden_state=@"$work/wh.bin"
  check forward_wav2vec2_short fail "3 samples are too few" -- forward -m "$w2v" \
    --input input_values=1x3xf32=0.1,0.2,0.3 --output last_hidden_state=@"$work/x.bin"
  check forward_wav2vec2_pooler fail "a wav2vec2 model's outputs are last_hidden_state" -- forward -m "$w2v" \
    --input input_values=1x1600xf32=@"$w2v/audio-a1600.f32" --output pooler_output=@"$work/x.bin"
  # Segment Anything: forward's three outputs, segment's PNG mask, and what each refuses.
  sam=$(cd "$(dirname "$0")/../../../shared/conformance/hf/sam" && pwd)
  check forward_sam ok "wrote pred_masks \[1, 1, 3, 32, 32\]" -- forward -m "$sam" \
    --input pixel_values=1x3x128x128xf32=@"$sam/pixels.f32" --input input_points=1x1x1x2xf32=40,60 \
    --output image_embeddings=@"$work/se.bin" --output pred_masks=@"$work/sm.bin" --output iou_scores=@"$work/si.bin"
  [ "$(stat -c %s "$work/sm.bin")" -eq $((3 * 32 * 32 * 4)) ] || { failures=$((failures + 1)); echo "FAIL forward_sam_size"; }
  check forward_sam_from_embeddings ok "wrote iou_scores \[1, 2, 3\]" -- forward -m "$sam" \
    --input image_embeddings=1x32x8x8xf32=@"$work/se.bin" --input input_boxes=1x2x4xf32=1,2,30,40,5,6,70,80 \
    --output iou_scores=@"$work/si.bin"
  check forward_sam_label fail "input_labels value 5" -- forward -m "$sam" --input image_embeddings=1x32x8x8xf32=@"$work/se.bin" \
    --input input_points=1x1x1x2xf32=4,6 --input input_labels=1x1x1xi32=5 --output pred_masks=@"$work/x.bin"
  check forward_sam_no_prompt fail "pred_masks: needs input_points or input_boxes" -- forward -m "$sam" \
    --input pixel_values=1x3x128x128xf32=@"$sam/pixels.f32" --output pred_masks=@"$work/x.bin"
  check info_sam fail "model_type 'sam' is a segmentation model" -- info "$sam"
  printf '\x89PNG\r\n\x1a\n' >"$work/bad.png"
  check segment_bad_png fail "not a readable PNG" -- segment -m "$sam" --image "$work/bad.png" --point 1,2 -o "$work/m.png"
  check segment_bad_point fail "--point '7': expected 2 comma-separated numbers" -- segment -m "$sam" \
    --image "$work/bad.png" --point 7 -o "$work/m.png"
  python3 - "$work/img.png" <<'PY'
import struct, sys, zlib
w, h = 60, 45  # a red square on a dark ground
rows = b"".join(b"\0" + b"".join(bytes([220, 30, 30]) if 20 <= x < 40 and 10 <= y < 30 else bytes([15, 40, 60])
                                  for x in range(w)) for y in range(h))
chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
open(sys.argv[1], "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                              + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
PY
  check segment_point ok "of 60x45 pixels inside, written to" -- segment -m "$sam" --image "$work/img.png" --point 30,20 \
    --box 18,8,42,32 -o "$work/mask.png"
  [ "$(head -c 4 "$work/mask.png" | tail -c 3)" = PNG ] || { failures=$((failures + 1)); echo "FAIL segment_png_written"; }
  cases=$((cases + 1))
  if [ "$("$rlx" segment -m "$sam" --image "$work/img.png" --point 30,20 -o - 2>/dev/null | head -c 4 | tail -c 3)" = PNG ]; then
    echo "ok   segment_stdout"
  else
    failures=$((failures + 1)); echo "FAIL segment_stdout"
  fi
  check segment_no_prompt fail "give --point X,Y or --box" -- segment -m "$sam" --image "$work/bad.png" -o "$work/m.png"
  # A wav2vec2 folder whose config.json is broken says which key.
  mkdir -p "$work/w2v-bad" && cp "$w2v/model.safetensors" "$work/w2v-bad/"
  sed 's/"conv_kernel": \[/"conv_kernel": [7, /' "$w2v/config.json" >"$work/w2v-bad/config.json"
  check forward_wav2vec2_bad_config fail "conv_dim, conv_kernel and conv_stride must be lists of one length" -- forward \
    -m "$work/w2v-bad" --input input_values=1x1600xf32=@"$w2v/audio-a1600.f32" --output last_hidden_state=@"$work/x.bin"
else
  echo "skip conformance (no ../shared/conformance/hf/llama)"
fi

# The legacy and K-quant mixes llama-quantize offers: each file loads and runs.
for q in q4_0 q5_1 q2_k q3_k_m q4_k_s; do
  check "quantize_$q" ok "wrote .*m_$q\.gguf \($q\)" -- quantize "$work/f32.gguf" "$work/m_$q.gguf" "$(echo $q | tr a-z A-Z)"
  check "logits_$q" ok "wrote logits \[3, " -- logits --model "$work/m_$q.gguf" --tokens 1,2,3 --out "$work/m_$q.bin"
done

# One id format for tokenize / detokenize / logits (spaces or commas), "-" as standard
# output for the files commands write, and -v / -q on any command.
ids=$("$rlx" tokenize --model "$model" --text "Once upon a time" --no-special)
check detokenize_spaces ok "." -- detokenize --model "$model" --tokens "$ids"
check detokenize_mixed ok "." -- detokenize --model "$model" --tokens "$(echo "$ids" | sed 's/ /, /')"
check detokenize_bad fail "'x7' is not a token id" -- detokenize --model "$model" --tokens "1 x7"
cases=$((cases + 1))
if [ "$("$rlx" logits --model "$model" --tokens "1 2 3" --out - 2>/dev/null | wc -c)" -eq $((3 * 512 * 4)) ] && [ ! -e ./- ]; then
  echo "ok   logits_stdout"
else
  failures=$((failures + 1)); echo "FAIL logits_stdout"
fi
check verbose_flag ok "architecture: llama" -- -v info "$model"
check quiet_flag_after_command ok "stop: " -- run -m "$model" -p hi -n 2 -q
check verbose_and_quiet fail "--verbose and --quiet exclude each other" -- -v -q info "$model"

# rlx perplexity against a float64 reference computed here from `rlx logits` of the same
# windows: llama.cpp's chunks (first token -> BOS, second half scored) and sliding windows.
for i in 1 2 3 4 5 6; do echo "Once upon a time, there was a little girl named Lily. She liked to play outside."; done >"$work/ppl.txt"
check perplexity_chunks ok "Final estimate: PPL = " -- perplexity -m "$model" -f "$work/ppl.txt" -c 32 --chunks 3
check perplexity_too_short fail "perplexity needs at least 2 x --ctx = 2048" -- perplexity -m "$model" -f "$work/ppl.txt" -c 1024
check perplexity_bad_stride fail "--stride must be in \[1, --ctx 32\]" -- perplexity -m "$model" -f "$work/ppl.txt" -c 32 --stride 40
for mode in chunks sliding; do
  cases=$((cases + 1))
  extra=(--chunks 3)
  [ "$mode" = sliding ] && extra=(--stride 12 --chunks 4)
  got=$("$rlx" perplexity -m "$model" -f "$work/ppl.txt" -c 32 "${extra[@]}" 2>/dev/null | sed -n 's/^Final estimate: PPL = \([0-9.]*\).*/\1/p')
  ids=$("$rlx" tokenize --model "$model" --file "$work/ppl.txt")
  if python3 - "$rlx" "$model" "$work" "$mode" "$got" $ids <<'PY'
import math, struct, subprocess, sys
rlx, model, work, mode, got = sys.argv[1:6]
ids = [int(t) for t in sys.argv[6:]]
ctx = 32
def logits(window):
    out = f"{work}/ppl_logits.bin"
    subprocess.run([rlx, "logits", "--model", model, "--tokens", ",".join(map(str, window)), "--out", out],
                   check=True, capture_output=True)
    raw = open(out, "rb").read()
    v = len(raw) // 4 // len(window)
    flat = struct.unpack(f"<{len(raw) // 4}f", raw)
    return [flat[r * v:(r + 1) * v] for r in range(len(window))]
def nll(row, target):
    m = max(row)
    return math.log(sum(math.exp(x - m) for x in row)) + m - row[target]
total, count = 0.0, 0
if mode == "chunks":
    for c in range(3):
        window = ids[c * ctx:(c + 1) * ctx]
        window[0] = ids[0]  # the BOS the tokenizer put first
        rows = logits(window)
        for t in range(ctx // 2 + 1, ctx):
            total += nll(rows[t - 1], window[t]); count += 1
else:
    scored, begin, windows = 0, 0, 0
    while True:
        end = min(begin + ctx, len(ids))
        window = ids[begin:end]
        rows = logits(window)
        for t in range(max(scored - begin, 1), len(window)):
            total += nll(rows[t - 1], window[t]); count += 1
        scored, windows = end, windows + 1
        if end == len(ids) or windows >= 4:
            break
        begin += 12
want = math.exp(total / count)
print(f"perplexity {mode}: rlx {got}, float64 reference {want:.6f} over {count} tokens")
sys.exit(0 if abs(float(got) - want) <= 1e-4 * want else 1)
PY
  then echo "ok   perplexity_matches_reference_$mode"; else failures=$((failures + 1)); echo "FAIL perplexity_matches_reference_$mode"; fi
done

# rlx imatrix: llama.cpp's chunking (its PPL equals rlx perplexity's over the same
# chunks), a GGUF imatrix that rlx quantize --imatrix reads, merging, refusals.
check imatrix_writes ok "wrote .*imat\.gguf: 15 matrices, 3 chunks of 32 tokens" -- imatrix -m "$model" -f "$work/ppl.txt" \
  -c 32 --chunks 3 -o "$work/imat.gguf"
cases=$((cases + 1))
imatrix_ppl=$("$rlx" imatrix -m "$model" -f "$work/ppl.txt" -c 32 --chunks 3 -o "$work/imat2.gguf" 2>&1 | sed -n 's/^\[3\/3\] PPL \([0-9.]*\)$/\1/p')
ppl_ppl=$("$rlx" perplexity -m "$model" -f "$work/ppl.txt" -c 32 --chunks 3 2>/dev/null | sed -n 's/^Final estimate: PPL = \([0-9.]*\).*/\1/p')
if [ -n "$imatrix_ppl" ] && python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if abs(a - b) <= 1e-3 * b else 1)" "$imatrix_ppl" "$ppl_ppl"; then
  echo "ok   imatrix_ppl_matches_perplexity"
else
  failures=$((failures + 1)); echo "FAIL imatrix_ppl_matches_perplexity: imatrix $imatrix_ppl, perplexity $ppl_ppl"
fi
check imatrix_merge ok "wrote .*merged\.gguf: 15 matrices, 6 chunks" -- imatrix --in "$work/imat.gguf" --in "$work/imat2.gguf" \
  -o "$work/merged.gguf"
check quantize_imatrix ok "importance from .*imat\.gguf \(15 matrices\)" -- quantize "$work/f32.gguf" "$work/qi.gguf" q4_0 \
  --imatrix "$work/imat.gguf"
check quantize_imatrix_runs ok "stop: " -- run -m "$work/qi.gguf" -p hi -n 2
check quantize_imatrix_not_imatrix fail "entries in|truncated" -- quantize "$work/f32.gguf" "$work/qx.gguf" q4_0 --imatrix "$work/ppl.txt"
# An HF folder measured and converted with its imatrix (the folder serves GGUF names).
check hf_imatrix ok "wrote .*hfim\.gguf: [0-9]+ matrices, 2 chunks of 16 tokens" -- imatrix -m "$hf" -f "$work/ppl.txt" \
  -c 16 --chunks 2 -o "$work/hfim.gguf"
check hf_convert_imatrix ok "wrote .*hfq\.gguf \(q4_0" -- convert "$hf" "$work/hfq.gguf" --type q4_0 --imatrix "$work/hfim.gguf"
check hf_convert_imatrix_runs ok "wrote logits \[3, 256\]" -- logits -m "$work/hfq.gguf" --tokens 1,2,3 --out "$work/hfq.bin"
check synth_256 ok "wrote" -- synth --preset tiny-256 --type f32 -o "$work/t256.gguf"
check quantize_iq2_xxs ok "wrote .*iq2\.gguf \(iq2_xxs\)" -- quantize "$work/t256.gguf" "$work/iq2.gguf" iq2_xxs
check quantize_iq2_xxs_info ok "IQ2_XXS" -- info "$work/iq2.gguf"
check quantize_iq2_xxs_runs ok "stop: " -- run -m "$work/iq2.gguf" -p hi -n 2
check imatrix_nothing_to_do fail "give a text to run \(-f\) or imatrix files to merge \(--in\)" -- imatrix -o "$work/x.gguf"
check imatrix_text_needs_model fail "-f needs the model" -- imatrix -f "$work/ppl.txt" -o "$work/x.gguf"
check imatrix_too_short fail "fewer than one chunk of 4096" -- imatrix -m "$model" -f "$work/ppl.txt" -c 4096 -o "$work/x.gguf"
check imatrix_encoder fail "encoder" -- imatrix -m "$bert" -f "$work/ppl.txt" -c 8 -o "$work/x.gguf"

# Progress of long jobs: plain lines on a stderr that is no terminal (--progress plain
# shows them for short jobs too; auto only past a second), nothing with none.
check progress_quantize ok "rlx quantize: done in [0-9.]+ s" -- --progress plain quantize "$work/f32.gguf" \
  "$work/p8.gguf" q8_0
check progress_quantize_steps ok "rlx quantize: +[0-9]+% \([0-9.]+ s\)" -- --progress plain quantize "$work/f32.gguf" \
  "$work/p8.gguf" q8_0
check progress_synth ok "rlx synth: done in" -- synth --progress plain --preset tiny -o "$work/ps.gguf"
check progress_convert ok "rlx convert: done in" -- --progress plain convert "$hf" "$work/pc.gguf"
check progress_run_compile ok "rlx: preparing the model: +[0-9]+% .*compiling prefill, 16 rows" -- --progress plain \
  run -m "$model" -p hi -n 2 --no-cache
check progress_run_weights ok "rlx: preparing the model: 100% .*binding weights [0-9]+ of [0-9]+ MB" -- \
  --progress plain run -m "$model" -p hi -n 2 --no-cache
check progress_bench ok "rlx bench: +[0-9]+% .*decode at context 8" -- --progress plain bench -m "$model" -t 1 \
  --prefill 8 --ctx 8 --steps 2 --repeat 1
check progress_logits ok "rlx: preparing the model: done in" -- --progress plain logits -m "$model" --tokens 1,2 \
  --out "$work/pl.bin" --no-cache
check progress_compile ok "rlx compile: +[0-9]+% .*building the graph" -- --progress plain compile -m "$model" \
  --phase decode
check progress_bad fail "--progress: loud not in \{auto,bar,plain,none\}" -- --progress loud info "$model"
# check_quiet NAME -- ARGS...: runs rlx ARGS; it must succeed and print no progress line.
check_quiet() {
  local name=$1
  shift 2
  cases=$((cases + 1))
  local out status
  out=$("$rlx" "$@" 2>&1)
  status=$?
  if [ $status -ne 0 ] || grep -Eq "done in|[0-9]+% \(" <<<"$out"; then
    failures=$((failures + 1))
    echo "FAIL $name: exit $status or progress lines printed"
    echo "$out" | tail -5
  else
    echo "ok   $name"
  fi
}
check_quiet progress_none -- --progress none quantize "$work/f32.gguf" "$work/p8.gguf" q8_0
check_quiet progress_auto_short_job -- quantize "$work/f32.gguf" "$work/p8.gguf" q8_0

# Help shows defaults and the devices this build has.
check help_run_no_model ok "no --model: a built-in tiny synthetic model" -- run --help
check help_defaults ok "ctx-size INT:INT in \[1 - [0-9]+\]=512" -- run --help
check help_seed ok "seed UINT=random" -- run --help
check help_devices ok "the devices this build has: cpu" -- logits --help
check help_profiles ok "a preset \(llama32_prefill, llama32_decode, " -- compile --help
check help_quant_mixes ok "MIX: f32, f16, bf16, q8_0, q6_k" -- quantize --help
check help_bench_lists ok "prefill INT:INT in \[1 - [0-9]+\]=\[64,512\]" -- bench --help

# Output paths are checked before any work; "-" is standard output.
check bench_json_unwritable fail "--json: '$work/none/b\.json': its folder '$work/none' does not exist" -- \
  bench -m "$model" --json "$work/none/b.json"
check bench_json_folder fail "--json: '$work' is a folder, not a file" -- bench -m "$model" --json "$work"
check quantize_out_unwritable fail "OUT: '$work/none/q\.gguf': its folder '$work/none' does not exist" -- \
  quantize "$work/f32.gguf" "$work/none/q.gguf" q8_0
check synth_out_unwritable fail "--out: '$work/none/s\.gguf': its folder" -- synth --preset tiny -o "$work/none/s.gguf"
cases=$((cases + 1))
if "$rlx" bench -m "$model" -t 1 --prefill 8 --ctx 8 --steps 2 --repeat 1 --json - >"$work/bench_stdout.json" \
  2>"$work/bench_stderr.txt" && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["decode"]["8"]["tokens_per_s"] > 0' \
  "$work/bench_stdout.json" && grep -q "decode @ctx 8" "$work/bench_stderr.txt"; then
  echo "ok   bench_json_stdout"
else
  failures=$((failures + 1))
  echo "FAIL bench_json_stdout: standard output is not the JSON alone, or the table is not on stderr"
fi
cases=$((cases + 1))
if "$rlx" synth --preset tiny --seed 4 -o - >"$work/stdout.gguf" 2>/dev/null && \
  "$rlx" synth --preset tiny --seed 4 -o "$work/file.gguf" 2>/dev/null && cmp -s "$work/stdout.gguf" "$work/file.gguf"; then
  echo "ok   synth_stdout"
else
  failures=$((failures + 1))
  echo "FAIL synth_stdout: synth -o - differs from synth -o FILE"
fi
cases=$((cases + 1))
if "$rlx" quantize "$work/f32.gguf" - q8_0 >"$work/q_stdout.gguf" 2>"$work/q_stderr.txt" && \
  grep -q "wrote standard output (q8_0)" "$work/q_stderr.txt" && "$rlx" info "$work/q_stdout.gguf" >/dev/null 2>&1; then
  echo "ok   quantize_stdout"
else
  failures=$((failures + 1))
  echo "FAIL quantize_stdout: quantize to - did not write a GGUF on standard output"
fi

# -n -1: until end of text or a full context; chat turns print their figures.
check run_until_end ok "stop: (end of text|context full)" -- run -m "$model" -p hi -n -1 -c 16
check run_n_below fail "--n-predict: Value -2 not in range -1 to" -- run -m "$model" -p hi -n -2
check run_chat_stats ok "rlx: prefill [0-9]+ tokens .* decode [0-9]+ tokens .* stop: " -- run \
  --model "$work/chat.gguf" --chat -p "Hi" -n 2 --threads 1

# A model whose output turns NaN (a NaN written into output_norm.weight of an f32 GGUF):
# rlx run stops with an error instead of printing tokens; RLX_CHECK_FINITE=1 names the
# first op whose result is not finite.
python3 - "$work/f32.gguf" "$work/nan.gguf" <<'PY'
import struct, sys
data = bytearray(open(sys.argv[1], "rb").read())
at = 0
def take(fmt):
    global at
    v = struct.unpack_from("<" + fmt, data, at); at += struct.calcsize("<" + fmt); return v[0]
def string():
    global at
    n = take("Q"); v = bytes(data[at:at + n]); at += n; return v.decode()
sizes = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
def value(t):
    if t == 8: return string()
    if t == 9:
        et, n = take("I"), take("Q")
        return [value(et) for _ in range(n)]
    return take(sizes[t])
assert data[:4] == b"GGUF"
at = 4
take("I"); n_tensors, n_kv = take("Q"), take("Q")
alignment = 32
for _ in range(n_kv):
    key, t = string(), take("I")
    v = value(t)
    if key == "general.alignment": alignment = v
tensors = {}
for _ in range(n_tensors):
    name = string(); dims = [take("Q") for _ in range(take("I"))]; take("I"); tensors[name] = take("Q")
base = (at + alignment - 1) // alignment * alignment
struct.pack_into("<f", data, base + tensors["output_norm.weight"] + 12, float("nan"))
open(sys.argv[2], "wb").write(data)
PY
check run_nan_model fail "logits at position [0-9]+ are not finite" -- run -m "$work/nan.gguf" -p hi -n 4 --no-cache
check run_nan_model_sampled fail "logits at position [0-9]+ are not finite" -- run -m "$work/nan.gguf" -p hi -n 4 \
  --temp 0.8 --top-k 0 --no-cache
RLX_CHECK_FINITE=1 check run_nan_check_mode fail "check_finite: step [0-9]+ of [0-9]+ produced -?nan at element .*rms_norm" -- \
  run -m "$work/nan.gguf" -p hi -n 4 --no-cache
# Bad environment values are ignored with a warning naming the variable.
RLX_THREADS=abc check env_bad_threads ok "RLX_THREADS='abc' is not a whole number in \[1, 1024\]; ignored" -- \
  info "$model"
RLX_LOG=loud check env_bad_log ok "RLX_LOG='loud' is not one of trace, debug, info, warn, error, off; ignored" -- \
  info "$model"

# The built-in default model (no --model) is written once into the cache folder with its
# checksum; a damaged copy is written again, not trusted.
check default_model_first ok "writing the built-in default" -- run -n 2
check default_model_again ok "rlx: load" -- run -n 2
printf 'XXXX' | dd of="$RLX_CACHE_DIR/models/rlx-synth-llama-tiny-f32-seed0.gguf" bs=1 seek=4096 conv=notrunc 2>/dev/null
check default_model_damaged ok "does not match its checksum; writing it again" -- run -n 2

if [ -n "$gnu_time" ]; then
  echo "refused inputs: $fail_cases cases, peak resident $((peak_rss_kb / 1024)) MB ($peak_rss_case)," \
    "slowest $slowest s ($slowest_case); limits $((kFailRssKb / 1024)) MB and $kFailSeconds s each"
else
  echo "refused inputs: no GNU time (/usr/bin/time) here, so their memory and time were not measured"
fi
echo "$cases cases, $failures failed"
[ $failures -eq 0 ]
