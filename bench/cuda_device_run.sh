#!/usr/bin/env bash
# One call on the GPU machine (see bench/CUDA_NOTES.md): the CUDA tests, the same under
# compute-sanitizer memcheck, the card's copy bandwidth, and decode speed of a synthetic
# llama-3.2-1b (f16, q8_0, q4_k_m) on CUDA, then conformance logits cuda vs cpu and, where
# .devrun/refs/cases.txt lists cases (case, model, tokens), both against llama.cpp's logits.
# Expects the binaries and their shared libraries in .devrun/ (built on the workstation,
# stripped, carried with the call), or packed as .devpack/devrun.tar.xz (unpacked here:
# the carry limit is 64 MiB). Optional: .devrun/rlx_old and .devrun/rlx_cuda_tests_old, an
# earlier build, for a baseline in the same call.
# Knobs: SANITIZE=0 skips memcheck, TYPES="f16 q8_0 q4_k_m", CTX="128,2048", STEPS=64,
# CONFORMANCE=0 skips the conformance models, PDL_AB=1 also times with RLX_CUDA_PDL=0,
# GRAPHS_OFF=0 skips the graphs-off and `rlx run` timings, TESTS=0 skips the tests,
# NCU=1 times every kernel of one decode step with Nsight Compute (ncu_<type>.csv),
# NCU_TYPES limits it to some types, NCU_CLOCK=base locks the clocks for it (default none:
# idle gaps between its replays let the clock drop), RACECHECK=1 runs racecheck,
# PREFILL="512,2048" the prefill lengths (PREFILL=0 skips prefill; each next to cuBLASLt
# GEMM times at the model's shapes), PREFILL_PROFILE=1 per-step GPU times of a prefill of
# the first length, DECODE=0 skips decode, MEMCHECK_FILTER the tests memcheck runs,
# BENCH=1 runs `rlx bench --device cuda` per type (BENCH_ARGS, default "--batch 1,4,16,64";
# its JSON to bench_<type>.json), BENCH_AB="VAR=x ..." also runs it with each setting,
# BENCH_NCU=REGEX times the kernels whose names match with Nsight Compute over one
# `rlx bench` of BENCH_NCU_ARGS (default "--batch 16 --steps 4 --repeat 1 --ctx 128
# --prefill 16"), by kernel and grid in launch order (BENCH_NCU_COUNT of them, default
# 400, after BENCH_NCU_SKIP),
# AB="VAR=x ..." / PREFILL_AB="VAR=x ..." also time decode / prefill with each setting,
# NCU_SKIP / NCU_COUNT the kernels ncu skips and profiles (default 1200 / 133: one f16
# token with the decode-step fusions).
set -u -o pipefail
if [ -f .devpack/devrun.tar.xz ]; then tar -xJf .devpack/devrun.tar.xz; fi
D=.devrun
export LD_LIBRARY_PATH=$PWD/$D/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$OUT/card.txt"
if [ "${TESTS:-1}" = 1 ]; then
echo "== tests"
timeout 300 $D/rlx_cuda_tests 2>&1 | tee "$OUT/tests.log" | grep -E '^\[( +OK|  FAILED|  PASSED|  SKIPPED| +RUN)|Failure|error|Expected|Which is|relative|differs' | grep -v ' RUN ' | head -80
fi
if [ "${TESTS:-1}" = 1 ] && [ -x $D/rlx_runtime_tests ]; then
  echo "== every op on cuda against the reference backend (BackendOps)"
  timeout 200 $D/rlx_runtime_tests --gtest_filter='*BackendOps*' 2>&1 | tee "$OUT/backend_ops.log" |
    grep -E '^\[(  FAILED|  PASSED)|Failure|relative|Which is' | head -40
fi
if [ "${SANITIZE:-1}" = 1 ]; then
  echo "== compute-sanitizer memcheck (op, decode and graph tests)"
  timeout 240 compute-sanitizer --tool memcheck --print-limit 10 $D/rlx_cuda_tests \
    --gtest_filter="${MEMCHECK_FILTER:-CudaOps.*:CudaModel.*:CudaDecode.*:CudaGraphs.*}" > "$OUT/memcheck.log" 2>&1
  echo "memcheck rc=$?"; grep -E 'ERROR SUMMARY|Invalid|PASSED|FAILED' "$OUT/memcheck.log" | head -20
fi
if [ "${RACECHECK:-0}" = 1 ]; then
  echo "== compute-sanitizer racecheck (attention, norms, decode GEMV)"
  timeout 240 compute-sanitizer --tool racecheck --print-limit 10 $D/rlx_cuda_tests \
    --gtest_filter="${RACECHECK_FILTER:-CudaOps.Attention*:CudaOps.NormsRopeSoftmaxReduce:CudaDecode.*}" > "$OUT/racecheck.log" 2>&1
  echo "racecheck rc=$?"; grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|hazard|PASSED|FAILED' "$OUT/racecheck.log" | head -20
fi
echo "== copy bandwidth (device-to-device, bytes read + written)"
python3 bench/copy_bandwidth.py 2>&1 | tee "$OUT/bandwidth.txt"
echo "== decode (LanguageModel::forward per token, logits to the host each step)"
for ty in ${TYPES:-f16 q8_0 q4_k_m}; do
  timeout 180 $D/rlx synth --preset llama-3.2-1b --type $ty -o /tmp/m_$ty.gguf > /dev/null 2>&1 || echo "synth $ty failed"
  ls -l /tmp/m_$ty.gguf 2>/dev/null | awk '{print "model bytes", $5}'
  if [ "${BENCH:-0}" = 1 ]; then
    echo "-- $ty, rlx bench --device cuda ${BENCH_ARGS:---batch 1,4,16,64}"
    # shellcheck disable=SC2086
    timeout 400 $D/rlx bench -m /tmp/m_$ty.gguf --device cuda ${BENCH_ARGS:---batch 1,4,16,64} \
      --json "$OUT/bench_$ty.json" 2>&1 | grep -vE '^rlx bench:' | tee "$OUT/bench_$ty.txt"
    for ab in ${BENCH_AB:-}; do
      echo "-- $ty, rlx bench --device cuda ${BENCH_ARGS:---batch 1,4,16,64}, $ab"
      # shellcheck disable=SC2086
      env $ab timeout 400 $D/rlx bench -m /tmp/m_$ty.gguf --device cuda ${BENCH_ARGS:---batch 1,4,16,64} 2>&1 |
        grep -vE '^rlx bench:'
    done
  fi
  if [ -n "${BENCH_NCU:-}" ]; then
    echo "-- $ty, ncu over rlx bench ${BENCH_NCU_ARGS:---batch 16 --steps 4 --repeat 1 --ctx 128 --prefill 16}: kernels matching ${BENCH_NCU}"
    # shellcheck disable=SC2086
    RLX_CUDA_GRAPHS=0 timeout 400 ncu --clock-control none --cache-control none --kernel-name "regex:${BENCH_NCU}" --launch-skip ${BENCH_NCU_SKIP:-0} \
      --launch-count ${BENCH_NCU_COUNT:-400} --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__registers_per_thread \
      --csv --print-units base --log-file "$OUT/ncu_bench_$ty.csv" \
      $D/rlx bench -m /tmp/m_$ty.gguf --device cuda --no-cache ${BENCH_NCU_ARGS:---batch 16 --steps 4 --repeat 1 --ctx 128 --prefill 16} \
      > /dev/null 2>&1; echo "ncu rc=$?"
    python3 - "$OUT/ncu_bench_$ty.csv" <<'PY'
import csv, re, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; ii, ki, mi, vi, gi = h.index("ID"), h.index("Kernel Name"), h.index("Metric Name"), h.index("Metric Value"), h.index("Grid Size")
ks = {}
for r in rows[1:]:
    k = ks.setdefault(r[ii], {"name": re.sub(r"\(.*", "", r[ki].replace("rlx::cuda_backend::", "").replace("(anonymous namespace)::", "").replace("void ", "")), "grid": r[gi]})
    k[r[mi]] = float(r[vi].replace(",", ""))
groups = {}  # (name, grid) in order of first launch: count, total time, bytes, registers
for i, k in sorted(ks.items(), key=lambda x: int(x[0])):
    g = groups.setdefault((k["name"], k["grid"]), [int(i), 0, 0.0, 0.0, k.get("launch__registers_per_thread", 0), 1e30, 0.0])
    t = k.get("gpu__time_duration.sum", 0) / 1e3
    g[1] += 1; g[2] += t; g[3] += k.get("dram__bytes_read.sum", 0); g[5] = min(g[5], t); g[6] = max(g[6], t)
for (name, grid), (first, n, t, b, regs, lo, hi) in groups.items():
    print(f"{first:>4} {name[-50:]:<50} grid {grid:<15} regs {regs:4.0f} {n:4d} x {t / n:7.2f} us ({lo:.1f}-{hi:.1f}) {b / max(t * 1e3, 1):5.0f} GB/s")
PY
  fi
  if [ "${PREFILL:-512,2048}" != 0 ]; then
    echo "-- $ty, prefill (LanguageModel::forward of N tokens, one chunk, last row's logits to the host)"
    RLX_CUDA_BENCH_MODEL=/tmp/m_$ty.gguf RLX_CUDA_BENCH_PREFILL=${PREFILL:-512,2048} \
      timeout 240 $D/rlx_cuda_tests --gtest_filter='CudaBench.Prefill' 2>&1 | grep -E '^cublaslt|^prefill|FAILED|Failure|error'
    for ab in ${PREFILL_AB:-}; do
      echo "-- $ty, prefill, $ab"
      env $ab RLX_CUDA_BENCH_MODEL=/tmp/m_$ty.gguf RLX_CUDA_BENCH_PREFILL=${PREFILL:-512,2048} \
        timeout 240 $D/rlx_cuda_tests --gtest_filter='CudaBench.Prefill' 2>&1 | grep -E '^prefill|FAILED|Failure|error'
    done
    if [ "${PREFILL_PROFILE:-0}" = 1 ]; then
      echo "-- $ty, prefill per-step GPU profile (RLX_CUDA_PROFILE=1, step by step)"
      RLX_CUDA_PROFILE=1 RLX_CUDA_BENCH_MODEL=/tmp/m_$ty.gguf RLX_CUDA_BENCH_PREFILL=$(echo "${PREFILL:-512,2048}" | cut -d, -f1) RLX_CUDA_BENCH_PREFILL_RUNS=3 \
        timeout 240 $D/rlx_cuda_tests --gtest_filter='CudaBench.Prefill' 2>&1 | sed -n '/rlx cuda profile/,$p' | grep -vE '^\[|^$|^cublaslt' | head -40
    fi
  fi
  if [ "${DECODE:-1}" = 0 ]; then rm -f /tmp/m_$ty.gguf; continue; fi
  echo "-- $ty, graphs on"
  RLX_CUDA_BENCH_MODEL=/tmp/m_$ty.gguf RLX_CUDA_BENCH_CTX=${CTX:-128,2048} RLX_CUDA_BENCH_STEPS=${STEPS:-64} \
    timeout 180 $D/rlx_cuda_tests --gtest_filter='CudaBench.Decode' 2>&1 | grep -E 'decode ctx|FAILED|Failure|error'
  for ab in ${AB:-}; do
    echo "-- $ty, graphs on, $ab"
    env $ab RLX_CUDA_BENCH_MODEL=/tmp/m_$ty.gguf RLX_CUDA_BENCH_CTX=${CTX:-128,2048} RLX_CUDA_BENCH_STEPS=${STEPS:-64} \
      timeout 180 $D/rlx_cuda_tests --gtest_filter='CudaBench.Decode' 2>&1 | grep -E 'decode ctx|FAILED|Failure|error'
  done
  if [ "${PDL_AB:-0}" = 1 ]; then
    echo "-- $ty, graphs on, programmatic launch off (RLX_CUDA_PDL=0)"
    RLX_CUDA_PDL=0 RLX_CUDA_BENCH_MODEL=/tmp/m_$ty.gguf RLX_CUDA_BENCH_CTX=${CTX:-128,2048} RLX_CUDA_BENCH_STEPS=${STEPS:-64} \
      timeout 180 $D/rlx_cuda_tests --gtest_filter='CudaBench.Decode' 2>&1 | grep -E 'decode ctx|FAILED|Failure|error'
  fi
  if [ -x $D/rlx_cuda_tests_old ]; then
    echo "-- $ty, graphs on, earlier build (rlx_cuda_tests_old)"
    RLX_CUDA_BENCH_MODEL=/tmp/m_$ty.gguf RLX_CUDA_BENCH_CTX=${CTX:-128,2048} RLX_CUDA_BENCH_STEPS=${STEPS:-64} \
      timeout 180 $D/rlx_cuda_tests_old --gtest_filter='CudaBench.Decode' 2>&1 | grep -E 'decode ctx|FAILED|Failure|error'
  fi
  if [ "${NCU:-0}" = 1 ] && [[ " ${NCU_TYPES:-$ty} " == *" $ty "* ]]; then
    echo "-- $ty, ncu: GPU time of each kernel of one decode step (ctx 128, graphs off, caches and clocks untouched)"
    RLX_CUDA_GRAPHS=0 RLX_CUDA_BENCH_MODEL=/tmp/m_$ty.gguf RLX_CUDA_BENCH_CTX=128 RLX_CUDA_BENCH_STEPS=4 \
      timeout 300 ncu --clock-control ${NCU_CLOCK:-none} --cache-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum \
      --launch-skip ${NCU_SKIP:-1200} --launch-count ${NCU_COUNT:-133} --csv --print-units base --log-file "$OUT/ncu_$ty.csv" \
      $D/rlx_cuda_tests --gtest_filter='CudaBench.Decode' > /dev/null 2>&1; echo "ncu rc=$?"
    python3 - "$OUT/ncu_$ty.csv" <<'PY'
import csv, re, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; ki, mi, vi, gi = h.index("Kernel Name"), h.index("Metric Name"), h.index("Metric Value"), h.index("Grid Size")
t = collections.defaultdict(float); b = collections.defaultdict(float); n = collections.Counter()
for r in rows[1:]:
    k = re.sub(r"^(void )?rlx::cuda_backend::(\(anonymous namespace\)::)?", "", r[ki])
    k = re.sub(r"\(.*", "", k.replace("rlx::cuda_backend::", "").replace("(anonymous namespace)::", "")) + " " + r[gi]
    v = float(r[vi].replace(",", ""))
    if r[mi] == "gpu__time_duration.sum": t[k] += v; n[k] += 1
    else: b[k] += v
tot = sum(t.values())
print(f"{sum(n.values())} kernels, GPU time {tot/1e3:.1f} us (sum of kernel durations)")
for k in sorted(t, key=lambda k: -t[k]):
    print(f"  {k[-78:]:<78} {n[k]:4d} x {t[k]/n[k]/1e3:7.2f} us = {t[k]/1e3:8.1f} us, {b[k]/max(t[k],1):6.0f} GB/s")
PY
  fi
  if [ "${PROFILE:-0}" = 1 ]; then
    echo "-- $ty, per-step GPU profile (RLX_CUDA_PROFILE=1, step by step, ctx 128)"
    RLX_CUDA_PROFILE=1 RLX_CUDA_BENCH_MODEL=/tmp/m_$ty.gguf RLX_CUDA_BENCH_CTX=128 RLX_CUDA_BENCH_STEPS=32 \
      timeout 180 $D/rlx_cuda_tests --gtest_filter='CudaBench.Decode' 2>&1 | sed -n '/profile: .* 35 runs/,$p' | grep -vE '^\[|^$'
  fi
  [ "${GRAPHS_OFF:-1}" = 1 ] || { rm -f /tmp/m_$ty.gguf; continue; }
  echo "-- $ty, graphs off"
  RLX_CUDA_GRAPHS=0 RLX_CUDA_BENCH_MODEL=/tmp/m_$ty.gguf RLX_CUDA_BENCH_CTX=128 RLX_CUDA_BENCH_STEPS=${STEPS:-64} \
    timeout 180 $D/rlx_cuda_tests --gtest_filter='CudaBench.Decode' 2>&1 | grep -E 'decode ctx|FAILED|Failure|error'
  echo "-- $ty, rlx run -n 64"
  timeout 120 $D/rlx run --model /tmp/m_$ty.gguf --device cuda -n 64 --temp 0 -p "Once upon a time" 2>&1 | grep -E 'tok/s|rror' 
  if [ -x $D/rlx_old ]; then
    echo "-- $ty, rlx run -n 64 (earlier build)"
    timeout 120 $D/rlx_old run --model /tmp/m_$ty.gguf --device cuda -n 64 --temp 0 -p "Once upon a time" 2>&1 | grep -E 'tok/s|rror' 
  fi
  rm -f /tmp/m_$ty.gguf
done
[ "${CONFORMANCE:-1}" = 1 ] || exit 0
if [ -x $D/rlx_integration_tests ] && [ -d $D/conformance ]; then
  for dev in cuda cpu; do
    echo "== conformance suite (rlx_integration_tests, the packed cases) on $dev"
    RLX_TEST_DEVICE=$dev RLX_CONFORMANCE_DIR=$PWD/$D/conformance timeout 300 $D/rlx_integration_tests \
      --gtest_filter='*Conformance*' 2>&1 | tee "$OUT/conformance_$dev.log" |
      grep -E '^\[( +OK|  FAILED|  PASSED|  SKIPPED)|Failure|rror|Which is|batch|incremental' | head -60
  done
fi
echo "== conformance models: rlx logits, cuda vs cpu"
for m in $D/models/*.gguf; do
  for mode in batch incremental; do
    ok=1
    for dev in cpu cuda; do
      timeout 60 $D/rlx logits --model $m --tokens 1,5,9,13,17,21,25,29 --mode $mode --device $dev --out /tmp/l_$dev.bin \
        > /tmp/l_$dev.log 2>&1 || { ok=0; echo "$(basename $m) $mode $dev failed: $(tail -2 /tmp/l_$dev.log)"; }
    done
    [ $ok = 1 ] && python3 -c "
import numpy as np,sys
a=np.fromfile('/tmp/l_cpu.bin',np.float32); b=np.fromfile('/tmp/l_cuda.bin',np.float32)
V=a.size//8; A=a.reshape(8,V); B=b.reshape(8,V)
print('$(basename $m) $mode: rel_l2 %.2e max_abs %.2e top1 agree %d/8' % (np.linalg.norm(a-b)/np.linalg.norm(a), np.abs(a-b).max(), (A.argmax(1)==B.argmax(1)).sum()))"
  done
done
[ -f $D/refs/cases.txt ] || exit 0
echo "== conformance models against llama.cpp's logits (refs from ../shared/conformance, kv f32)"
echo "   max|d| / std of the reference logits, and argmax agreement, for cpu and cuda"
while read -r case model toks _; do
  for mode in batch incremental; do
    line="$case $mode:"
    for dev in cpu cuda; do
      if timeout 60 $D/rlx logits --model $D/models/$model --tokens $toks --mode $mode --device $dev --out /tmp/r_$dev.bin \
        > /tmp/r_$dev.log 2>&1; then
        line="$line $(python3 -c "
import numpy as np
r=np.fromfile('$D/refs/$case.logits.bin',np.float32); a=np.fromfile('/tmp/r_$dev.bin',np.float32)
n=len('$toks'.split(',')); R=r.reshape(n,-1); A=a.reshape(n,-1)
print('$dev %.3f top1 %d/%d;' % (np.abs(A-R).max()/R.std(), (A.argmax(1)==R.argmax(1)).sum(), n))")"
      else line="$line $dev failed: $(tail -1 /tmp/r_$dev.log);"; fi
    done
    echo "$line"
  done
done < $D/refs/cases.txt
