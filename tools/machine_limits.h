// Limits of the machine measured inside the running process, so that benchmark
// figures can be printed next to them: streaming read bandwidth and peak f32 FMA
// throughput, both with a given number of threads.
#pragma once

namespace rlx::cli {

/// Bytes per second read by `threads` threads summing a 1 GiB buffer (best of 3).
double measure_read_bandwidth(int threads);
/// f32 FLOP/s of `threads` threads running independent FMA chains in registers
/// (AVX-512 when the CPU has it, else AVX2+FMA, else scalar).
double measure_peak_flops(int threads);
/// "AMD EPYC ... (avx512f avx512_vnni ...)" from /proc/cpuinfo.
const char* cpu_description();

}  // namespace rlx::cli
