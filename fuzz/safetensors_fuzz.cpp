// libFuzzer target: parses arbitrary bytes as a .safetensors file in memory and reads
// the first and last byte of every tensor view, so ASan catches any view the offset
// validation let run past the buffer.
#include <cstddef>
#include <cstdint>

#include "rlx/formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rlx::Expected<rlx::formats::SafetensorsFile> f = rlx::formats::SafetensorsFile::parse({data, size}, "fuzz.safetensors");
  if (!f.has_value()) return 0;
  uint64_t sum = 0;
  for (const rlx::formats::SafetensorsTensor& t : f->tensors()) {
    sum += static_cast<uint64_t>(t.n_elements());
    if (t.n_bytes > 0) sum += t.data[0] + t.data[t.n_bytes - 1];
    if (f->find(t.name) != &t) __builtin_trap();
  }
  for (const auto& [k, v] : f->metadata()) sum += k.size() + v.size();
  volatile uint64_t sink = sum;
  (void)sink;
  return 0;
}
