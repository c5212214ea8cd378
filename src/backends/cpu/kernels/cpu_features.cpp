// CPUID/XGETBV based feature detection. Requests the AMX tile-data permission from
// Linux once (arch_prctl ARCH_REQ_XCOMP_PERM) so later AMX code may use the tiles.
#include "backends/cpu/kernels/cpu_features.h"

#include <cstdint>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define RLX_X86 1
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace rlx::cpu {
namespace {

#if defined(RLX_X86)
struct Regs {
  uint32_t a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(uint32_t leaf, uint32_t sub) {
  Regs r;
  __cpuid_count(leaf, sub, r.a, r.b, r.c, r.d);
  return r;
}

uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

bool bit(uint32_t v, int i) { return ((v >> i) & 1u) != 0; }

// Asks Linux for permission to use AMX tile data (XFEATURE 18). Returns true when granted.
bool request_amx_permission() {
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr int kArchGetXcompPerm = 0x1022;
  constexpr int kArchReqXcompPerm = 0x1023;
  constexpr unsigned long kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
  unsigned long mask = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &mask) != 0) return false;
  return (mask & (1ul << kXfeatureXtiledata)) != 0;
#else
  return false;
#endif
}
#endif

CpuFeatures detect() {
  CpuFeatures f;
#if defined(RLX_X86)
  const Regs r0 = cpuid(0, 0);
  const uint32_t max_leaf = r0.a;
  char vendor[13] = {};
  for (int i = 0; i < 4; ++i) {
    vendor[i] = static_cast<char>((r0.b >> (8 * i)) & 0xff);
    vendor[4 + i] = static_cast<char>((r0.d >> (8 * i)) & 0xff);
    vendor[8 + i] = static_cast<char>((r0.c >> (8 * i)) & 0xff);
  }
  f.vendor = vendor;
  if (max_leaf < 1) return f;
  const Regs r1 = cpuid(1, 0);
  const bool osxsave = bit(r1.c, 27);
  f.fma = bit(r1.c, 12);
  f.f16c = bit(r1.c, 29);
  f.avx = bit(r1.c, 28);
  uint64_t xcr0 = 0;
  if (osxsave) xcr0 = xgetbv0();
  f.os_avx = osxsave && (xcr0 & 0x6) == 0x6;
  f.os_avx512 = f.os_avx && (xcr0 & 0xe0) == 0xe0;
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;
  if (max_leaf >= 7) {
    const Regs r7 = cpuid(7, 0);
    f.avx2 = bit(r7.b, 5);
    f.avx512f = bit(r7.b, 16);
    f.avx512dq = bit(r7.b, 17);
    f.avx512bw = bit(r7.b, 30);
    f.avx512vl = bit(r7.b, 31);
    f.avx512vnni = bit(r7.c, 11);
    f.avx512fp16 = bit(r7.d, 23);
    f.amx_bf16 = bit(r7.d, 22);
    f.amx_tile = bit(r7.d, 24);
    f.amx_int8 = bit(r7.d, 25);
    if (r7.a >= 1) f.avx512bf16 = bit(cpuid(7, 1).a, 5);
  }
  if (f.amx_tile && os_amx) f.amx_usable = request_amx_permission();
  if (f.os_avx && f.avx && f.avx2 && f.fma && f.f16c) f.max_isa = IsaLevel::kAvx2;
  if (f.max_isa == IsaLevel::kAvx2 && f.os_avx512 && f.avx512f && f.avx512bw && f.avx512vl &&
      f.avx512dq)
    f.max_isa = IsaLevel::kAvx512;
  if (f.max_isa == IsaLevel::kAvx512 && f.amx_usable && f.amx_bf16 && f.amx_int8 && f.avx512bf16 && f.avx512vnni)
    f.max_isa = IsaLevel::kAmx;
#endif
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

IsaLevel resolve_isa(IsaLevel requested) {
  const IsaLevel max = cpu_features().max_isa;
  return static_cast<uint8_t>(requested) < static_cast<uint8_t>(max) ? requested : max;
}

IsaLevel isa_cap_from_name(std::string_view name) {
  if (name == "scalar") return IsaLevel::kScalar;
  if (name == "avx2") return IsaLevel::kAvx2;
  if (name == "avx512") return IsaLevel::kAvx512;
  return IsaLevel::kAmx;
}

const char* isa_name(IsaLevel level) {
  switch (level) {
    case IsaLevel::kScalar: return "scalar";
    case IsaLevel::kAvx2: return "avx2";
    case IsaLevel::kAvx512: return "avx512";
    case IsaLevel::kAmx: return "amx";
  }
  return "unknown";
}

std::string describe_cpu_features(const CpuFeatures& f) {
  std::string s = f.vendor + ":";
  auto add = [&s](bool on, const char* name) {
    if (on) {
      s += ' ';
      s += name;
    }
  };
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.f16c, "f16c");
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512vl, "avx512vl");
  add(f.avx512dq, "avx512dq");
  add(f.avx512vnni, "avx512vnni");
  add(f.avx512bf16, "avx512bf16");
  add(f.avx512fp16, "avx512fp16");
  add(f.amx_tile, "amx-tile");
  add(f.amx_bf16, "amx-bf16");
  add(f.amx_int8, "amx-int8");
  add(f.amx_usable, "(amx-usable)");
  s += " -> max isa ";
  s += isa_name(f.max_isa);
  return s;
}

}  // namespace rlx::cpu
