// Limits of the machine measured inside the running process, so that benchmark
// figures can be printed next to them: streaming read bandwidth, peak f32 FMA and
// int8 dot-product throughput, all with a given number of threads.
#pragma once

namespace rlx::cli {

/// Read bandwidth of `threads` threads summing a 1 GiB buffer, over `reps` passes that
/// alternate between a plain loop and one prefetching 4 KiB ahead into L2 (as the decode
/// GEMVs do).
struct Bandwidth {
  double best = 0;    ///< bytes/s of the fastest pass
  double median = 0;  ///< bytes/s of the median pass
};
Bandwidth measure_read_bandwidth(int threads, int reps = 7);
/// f32 FLOP/s of `threads` threads running independent FMA chains in registers
/// (AVX-512 when the CPU has it, else AVX2+FMA, else scalar).
double measure_peak_flops(int threads);
/// int8 multiply-add operations per second (2 per u8 x s8 product summed) of `threads`
/// threads running independent chains of the instruction the quantized matmul kernels
/// use: vpdpbusd on 512-bit vectors with AVX-512 VNNI, else vpmaddubsw + vpmaddwd on
/// 256-bit vectors with AVX2; 0 without AVX2.
double measure_peak_int8_ops(int threads);
/// bf16 FLOP/s of `threads` threads running four independent TDPBF16PS chains on the
/// AMX tiles (what the CPU backend's many-row matmuls use); 0 where the tiles are not
/// usable or RLX_CPU_ISA caps them off.
double measure_peak_amx_bf16_flops(int threads);
/// bf16 FLOP/s (2 per product) of `threads` threads running 16 independent 512-bit
/// VDPBF16PS chains (what many-row f16 / bf16 matmuls use on CPUs without AMX); 0 where
/// the CPU lacks AVX512_BF16, RLX_CPU_ISA caps AVX-512 off, or the AMX tiles take those
/// matmuls instead.
double measure_peak_bf16_dot_flops(int threads);
/// Which kernel instruction set the CPU backend runs with here: "amx+avx512-vnni", "avx512-vnni",
/// "avx512", "avx2" or "scalar" (the CPU's best, capped by RLX_CPU_ISA).
const char* kernel_isa_description();
/// "AMD EPYC ... (avx512f avx512_vnni ...)" from /proc/cpuinfo.
const char* cpu_description();

}  // namespace rlx::cli
