#!/usr/bin/env bash
# Integration test of `rlx serve` with the official OpenAI client library (npm `openai`):
# starts the server on a free loopback port with a tiny synthetic language model and runs
# openai_client.cjs against it, then with a synthetic BERT and runs openai_embeddings.cjs. Exits 77 (ctest: skipped) when node/npm are missing or
# the package cannot be installed. The server is always killed on exit.
# Usage: openai_test.sh path/to/rlx NPM_DIR   (NPM_DIR keeps node_modules between runs)
set -euo pipefail
rlx=$1
npm_dir=$2
case $0 in */*) here=${0%/*} ;; *) here=. ;; esac

skip() { echo "skipped: $*"; exit 77; }
command -v node >/dev/null || skip "node is not installed"
command -v npm >/dev/null || skip "npm is not installed"
node_major=$(node -p 'process.versions.node.split(".")[0]')
[ "$node_major" -ge 18 ] || skip "node $node_major is too old (the openai package needs 18+)"
if [ ! -f "$npm_dir/node_modules/openai/package.json" ]; then
  mkdir -p "$npm_dir"
  [ -f "$npm_dir/package.json" ] || echo '{"name": "rlx-serve-test", "private": true}' > "$npm_dir/package.json"
  (cd "$npm_dir" && timeout 300 npm install --no-audit --no-fund --loglevel=error openai >/dev/null 2>&1) \
    || skip "npm install openai failed (is the npm registry reachable?)"
fi

work=$(mktemp -d)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true  # (no record when the shell reaped it already)
  fi
  rm -rf "$work"
}
trap cleanup EXIT

cat > "$work/template.jinja" <<'TEMPLATE'
{{ bos_token }}{% for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}
TEMPLATE
"$rlx" synth --seed 3 --chat-template "$work/template.jinja" -o "$work/tiny.gguf" >/dev/null

# start_server MODEL NAME [ARGS...]: rlx serve on a free loopback port; sets $port, $server_pid.
start_server() {
  local model=$1 name=$2
  shift 2
  : > "$work/serve.log"
  "$rlx" serve -m "$model" --port 0 --threads 2 --api-key sk-rlx-test --name "$name" --max-body 1048576 "$@" \
    2> "$work/serve.log" &
  server_pid=$!
  port=""
  for _ in $(seq 1 1200); do  # start-up compiles the executables; bounded, not timed
    port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/serve.log" || true)
    [ -n "$port" ] && return 0
    kill -0 "$server_pid" 2>/dev/null || { cat "$work/serve.log"; echo "FAIL: rlx serve exited at start"; exit 1; }
    sleep 0.1
  done
  cat "$work/serve.log"
  echo "FAIL: rlx serve did not start listening"
  exit 1
}

# stop_server: SIGTERM, then (bounded) SIGKILL.
stop_server() {
  kill -TERM "$server_pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}

# run_client SCRIPT: the node client against the running server; the server must survive it.
run_client() {
  local status=0
  node "$here/$1" "$npm_dir" "http://127.0.0.1:$port" sk-rlx-test || status=$?
  kill -0 "$server_pid" 2>/dev/null || { echo "FAIL: rlx serve died during the test"; status=1; }
  if [ "$status" -ne 0 ]; then
    echo "--- server log ---"
    tail -50 "$work/serve.log"
    exit "$status"
  fi
}

# A language model: chat, completions, streaming, cancellation, refusals, prefix cache.
start_server "$work/tiny.gguf" tiny --parallel 8 --ctx 1024
run_client openai_client.cjs
stop_server

# An encoder: embeddings.
"$rlx" synth --preset bert-tiny --seed 5 -o "$work/bert-tiny.gguf" >/dev/null
start_server "$work/bert-tiny.gguf" enc --batch 16
run_client openai_embeddings.cjs
