#!/usr/bin/env bash
# Runs the CPU backend's tests and benchmarks on a borrowed machine (e.g. the GPU host,
# whose Xeon has AMX) from the pack of bench/cpu_device_pack.sh. Knobs (environment):
#   TESTS=1         rlx_cpu_kernels_tests (all ISA levels the CPU has) and the GGUF
#                   conformance suite with each path forced: default (AMX where usable),
#                   RLX_CPU_AMX_MIN_ROWS=1 (every matmul on the tiles), avx512, avx2
#   KERNELS=1       rlx_kernels_qmatmul_bench prefill + the f16/bf16 GEMM (KFILTER), prefill
#                   attention of rlx_kernels_gemm_bench (AFILTER), on CPUS; again with each
#                   setting of KAB (e.g. KAB="RLX_CPU_GEMV_ZMM=0")
#   MODELS="q4_k_m q8_0 f16"  rlx synth --preset llama-3.2-1b of each type, then rlx bench
#                   on CPUS with the default ISA and with AB (e.g. AB="RLX_CPU_ISA=avx512")
#   CPUS=0,1        the cores the benchmarks are pinned to (taskset); THREADS = their count
#   PREFILL="64 512" CTX="128" STEPS=8 BENCH_ARGS="--chunk 512" (more rlx bench flags)
set -uo pipefail
[ -d .cpurun ] || tar -xJf .devpack/cpurun.tar.xz
D=$PWD/.cpurun
export LD_LIBRARY_PATH=$D/lib
CPUS=${CPUS:-0,1}
THREADS=${THREADS:-$(echo "$CPUS" | tr ',' '\n' | wc -l)}
echo "== machine"; lscpu | grep -E "Model name|^CPU\(s\)|Thread|MHz|L2|L3" ; nproc
if [ "${TESTS:-1}" = 1 ]; then
  echo "== rlx_cpu_kernels_tests"
  $D/rlx_cpu_kernels_tests 2>&1 | grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED|Failure|error" | head -60
  for env in "" "RLX_CPU_AMX_MIN_ROWS=1" "RLX_CPU_ISA=avx512" "RLX_CPU_ISA=avx2"; do
    echo "== conformance ${env:-default}"
    env $env RLX_CONFORMANCE_DIR=$D/conformance $D/rlx_integration_tests --gtest_filter='*Gguf*:*GGUF*' 2>&1 |
      grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|max_abs|Expected|Which is|batch|incremental" | head -40
  done
fi
if [ "${KERNELS:-1}" = 1 ]; then
  for env in "" ${KAB:-}; do
    echo "== kernels ${env:-default} on cpus $CPUS ($THREADS threads)"
    env $env RLX_THREADS=$THREADS taskset -c $CPUS $D/rlx_kernels_qmatmul_bench \
      --benchmark_filter="${KFILTER:-BM_QPrefill/M:512/K:2048/N:8192/type:(12|14|8)/|BM_HalfGemm}" --benchmark_min_time=0.3 2>&1 |
      grep -vE "^-+$|Run on|CPU Caches|L[123] |Load Average|\*\*\*" | head -60
    env $env RLX_THREADS=$THREADS taskset -c $CPUS $D/rlx_kernels_gemm_bench --benchmark_filter="${AFILTER:-BM_Attention/S:512}" \
      --benchmark_min_time=0.3 2>&1 | grep -E "BM_|limits" | head -10
  done
fi
for ty in ${MODELS:-}; do
  m=/tmp/m_$ty.gguf
  [ -f $m ] || timeout 300 $D/rlx synth --preset llama-3.2-1b --type $ty -o $m > /dev/null 2>&1 || echo "synth $ty failed"
  for env in "" ${AB:-}; do
    echo "== rlx bench $ty ${env:-default} (cpus $CPUS)"
    env $env taskset -c $CPUS $D/rlx bench --model $m --threads $THREADS --prefill ${PREFILL:-64 512} \
      --ctx ${CTX:-128} --steps ${STEPS:-8} ${BENCH_ARGS:-} 2>&1 | grep -vE "^rlx bench: measuring"
  done
done
