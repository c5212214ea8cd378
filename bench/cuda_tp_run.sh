#!/usr/bin/env bash
# Tensor parallelism on a host with two GPUs (see bench/CUDA_NOTES.md, "Several GPUs"):
# one call of the device tool on an nvidia-h200-x2 (or -x4) machine, with the pack of
# bench/cuda_device_pack.sh carried (.devpack). Steps (STEPS="tests models synth bench",
# any subset, in that order):
#   tests  - the tensor-parallel tests: NCCL missing, group collectives on cuda:0,1 against
#            the CPU group, and the CPU group suites;
#   models - logits of the packed conformance models and a synthetic MoE (moe-tiny) on cuda:0,1 against cuda:0 (1e-3);
#   synth  - writes an 8B-shaped f16 model (rlx synth --preset llama-3-8b) to .devrun/8b.gguf
#            unless it is there (the machine keeps it while it stays warm);
#   bench  - on that model: logits cuda:0,1 against cuda:0, decode tokens/s at CTX (default
#            128) and prefill tokens/s at PREFILL (default 512) on one and two GPUs, and the
#            all-reduce time per call at decode and prefill sizes.
set -u -o pipefail
if [ ! -x .devrun/rlx ] && [ -f .devpack/devrun.tar.xz ]; then tar -xJf .devpack/devrun.tar.xz; fi
D=.devrun
export LD_LIBRARY_PATH=$PWD/$D/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
STEPS=${STEPS:-tests models synth bench}
has() { case " $STEPS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv | tee "$OUT/card.txt"
nvidia-smi topo -m 2>/dev/null | head -6
ldconfig -p | grep -i nccl | head -3
python3 -c "import torch; print('torch NCCL', torch.cuda.nccl.version())" 2>/dev/null
if has tests; then
  echo "== tensor-parallel tests"
  timeout 240 $D/rlx_cuda_tests --gtest_filter='CudaTensorParallel.*' 2>&1 | tee "$OUT/tp_tests.log" |
    grep -E '^\[( +OK|  FAILED|  PASSED|  SKIPPED)|Failure|error|Expected|Which is' | head -40
  timeout 120 $D/rlx_runtime_tests --gtest_filter='*TensorParallel*:DeviceGroup*:HostCommunicator*' 2>&1 |
    grep -E '^\[(  FAILED|  PASSED)|Failure' | head -20
fi
if has models; then
  echo "== conformance models: cuda:0,1 against cuda:0"
  # and a small mixture of experts (every expert's hidden units split)
  mkdir -p $D/models && $D/rlx synth --arch qwen3moe --preset moe-tiny --type q8_0 -o $D/models/moe-tiny-q8_0.gguf > /dev/null 2>&1
  models=$(ls $D/models/*.gguf 2>/dev/null | tr '\n' ',' | sed 's/,$//')
  RLX_TP_MODELS="$models" RLX_TP_CPU_REF=1 timeout 240 $D/rlx_cuda_tests --gtest_filter='CudaTensorParallel.ModelLogitsEqualOneGpu' 2>&1 |
    tee "$OUT/tp_models.log" | grep -E 'tensor parallel|against the cpu|^\[(  FAILED|  PASSED)|Failure|error' | head -40
fi
M=$D/8b.gguf
if has synth && [ ! -f "$M" ]; then
  echo "== synth llama-3-8b f16"
  /usr/bin/time -f "synth %e s, peak %M KB" $D/rlx synth --arch llama --preset llama-3-8b --type f16 -o "$M" 2>&1 | tail -2
  ls -l "$M"
fi
if has bench && [ -f "$M" ]; then
  echo "== 8B-shaped f16: logits cuda:0,1 against cuda:0"
  RLX_TP_MODELS="$M" RLX_TP_CPU_REF=1 timeout 300 $D/rlx_cuda_tests --gtest_filter='CudaTensorParallel.ModelLogitsEqualOneGpu' 2>&1 |
    tee "$OUT/tp_8b_logits.log" | grep -E 'tensor parallel|against the cpu|^\[(  FAILED|  PASSED)|Failure' | head
  echo "== copy bandwidth per GPU (device to device, bytes read + written)"
  python3 bench/copy_bandwidth.py 2>&1 | tee "$OUT/bandwidth.txt"
  for dev in cuda:0 cuda:0,1; do
    echo "== 8B-shaped f16 on $dev"
    RLX_CUDA_BENCH_MODEL=$M RLX_CUDA_BENCH_DEVICE=$dev RLX_CUDA_BENCH_CTX=${CTX:-128} RLX_CUDA_BENCH_STEPS=32 \
      RLX_CUDA_BENCH_PREFILL=${PREFILL:-512} RLX_CUDA_BENCH_PREFILL_RUNS=3 \
      timeout 280 $D/rlx_cuda_tests --gtest_filter='CudaBench.Decode:CudaBench.Prefill' 2>&1 | tee "$OUT/bench_$dev.log" |
      grep -E 'decode ctx|decode executable|prefill|GEMM|tok/s|Failure|error' | grep -v 'sampl' | head -20
  done
  echo "== all-reduce time"
  RLX_TP_BENCH=1 timeout 120 $D/rlx_cuda_tests --gtest_filter='CudaTensorParallel.AllReduceTime' 2>&1 |
    grep -E 'all_reduce|Failure|error' | head -10
fi
