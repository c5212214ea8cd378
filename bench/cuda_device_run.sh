#!/usr/bin/env bash
# One call on the GPU machine (see bench/CUDA_NOTES.md): the CUDA tests, the same
# under compute-sanitizer memcheck, the card's copy bandwidth, and decode speed of a
# synthetic llama-3.2-1b (f16, q8_0) on CUDA. Expects the binaries and their shared
# libraries in .devrun/ (built on the workstation, carried with the call).
set -u -o pipefail
D=.devrun
export LD_LIBRARY_PATH=$PWD/$D/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$OUT/card.txt"
echo "== tests"
timeout 240 $D/rlx_cuda_tests 2>&1 | tee "$OUT/tests.log" | grep -E '^\[( +OK|  FAILED|  PASSED|  SKIPPED| +RUN)|Failure|error|Expected|Which is|relative' | grep -v ' RUN ' | head -80
if [ "${SANITIZE:-1}" = 1 ]; then
  echo "== compute-sanitizer memcheck (op tests)"
  timeout 200 compute-sanitizer --tool memcheck --print-limit 10 $D/rlx_cuda_tests \
    --gtest_filter='CudaOps.*:CudaModel.*' > "$OUT/memcheck.log" 2>&1
  echo "memcheck rc=$?"; grep -E 'ERROR SUMMARY|Invalid|PASSED|FAILED' "$OUT/memcheck.log" | head -20
fi
echo "== copy bandwidth (device-to-device, bytes read + written)"
python3 - <<'PY' 2>&1 | tee "$OUT/bandwidth.txt"
import torch
x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda"); y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
torch.cuda.synchronize()
s, e = torch.cuda.Event(True), torch.cuda.Event(True)
ts = []
for _ in range(20):
    s.record(); y.copy_(x); e.record(); e.synchronize(); ts.append(s.elapsed_time(e))
ts.sort(); t = ts[len(ts)//2] / 1e3
print(f"copy 1 GiB: median {t*1e3:.3f} ms -> {2*(1<<30)/t/1e9:.0f} GB/s (read+write)")
PY
echo "== decode"
for ty in f16 q8_0; do
  timeout 120 $D/rlx synth --preset llama-3.2-1b --type $ty -o /tmp/m_$ty.gguf > /dev/null 2>&1 || echo "synth $ty failed"
  ls -l /tmp/m_$ty.gguf 2>/dev/null | awk '{print "model bytes", $5}'
  for dev in cuda cpu; do
    echo "-- $ty on $dev"
    timeout 150 $D/rlx run --model /tmp/m_$ty.gguf --device $dev -n 64 --temp 0 -p "Once upon a time" 2>&1 | tail -4
  done
done
