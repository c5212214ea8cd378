// Runtime CPU feature detection (cpuid + xgetbv, Linux AMX permission request) and
// the ISA level every kernel dispatches on. Detection runs once per process; callers
// cap the level through KernelContext::isa (tests force each path in turn).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace rlx::cpu {

/// Instruction-set tiers the kernels are compiled for. Ordered: a higher level
/// implies every lower one is also usable.
enum class IsaLevel : uint8_t {
  kScalar = 0,  ///< portable C++ (any x86-64)
  kAvx2 = 1,    ///< AVX2 + FMA + F16C, 256-bit vectors
  kAvx512 = 2,  ///< AVX-512 F/BW/VL/DQ, 512-bit vectors
  kAmx = 3,     ///< AVX-512 (+BF16, VNNI) and the AMX tiles (BF16 and INT8) for matmuls of many rows
};

/// What the CPU and the operating system support. `os_*` flags mean the OS saves
/// the register state (XCR0), so the instructions are really usable.
struct CpuFeatures {
  bool avx = false, avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vnni = false, avx512bf16 = false, avx512fp16 = false;
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;
  bool os_avx = false;     ///< XCR0 has SSE+AVX state
  bool os_avx512 = false;  ///< XCR0 has opmask + ZMM state
  bool amx_usable = false; ///< AMX present, XCR0 tile state on, and Linux granted XTILEDATA
  IsaLevel max_isa = IsaLevel::kScalar;  ///< highest level this machine runs
  std::string vendor;      ///< "GenuineIntel", "AuthenticAMD", ...
};

/// Features of this machine, detected on first call (thread-safe, cached).
const CpuFeatures& cpu_features();

/// min(requested, cpu_features().max_isa): the level a kernel really uses.
IsaLevel resolve_isa(IsaLevel requested);

/// "scalar", "avx2", "avx512", "amx".
const char* isa_name(IsaLevel level);

/// The cap a name sets (RLX_CPU_ISA): "scalar", "avx2" and "avx512" those levels
/// ("avx512": no AMX tiles), anything else (empty, "amx") no cap.
IsaLevel isa_cap_from_name(std::string_view name);

/// One line listing the detected features, for logs and benchmark output.
std::string describe_cpu_features(const CpuFeatures& f);

}  // namespace rlx::cpu
