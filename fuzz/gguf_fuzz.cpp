// libFuzzer target: parses arbitrary bytes as GGUF in memory, then exercises every
// accessor and reads every tensor view (and decodes small ones), so ASan/UBSan catch any
// out-of-bounds view or bad arithmetic the validation let through.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "rlx/formats/gguf.h"
#include "rlx/formats/quant.h"

namespace {

using rlx::formats::GgufFile;

void touch_metadata(const GgufFile& f) {
  for (const rlx::formats::GgufKeyValue& kv : f.metadata()) {
    (void)f.get_string(kv.key);
    (void)f.get_int(kv.key);
    (void)f.get_float(kv.key);
    (void)f.get_bool(kv.key);
    (void)f.get_string_array(kv.key);
    (void)f.get_f32_array(kv.key);
    (void)f.get_int_array(kv.key);
  }
}

uint64_t touch_tensors(const GgufFile& f) {
  uint64_t sum = 0;
  std::vector<float> scratch;
  for (const rlx::formats::GgufTensor& t : f.tensors()) {
    sum += static_cast<uint64_t>(t.shape().size()) + static_cast<uint64_t>(t.n_elements());
    if (t.n_bytes > 0) sum += t.data[0] + t.data[t.n_bytes - 1];
    const int64_t n = t.n_elements();
    if (n > 0 && n <= (1 << 16) && rlx::formats::can_dequantize(t.type)) {
      scratch.resize(static_cast<size_t>(n));
      if (rlx::formats::dequantize_row(t.type, t.data, scratch.data(), n).ok()) sum += scratch[0] != 0.0f;
    }
  }
  return sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The parser keeps views into the input: copy it into 32-byte-aligned storage, as a
  // mapping would be, so block structs are read at their natural alignment.
  std::vector<uint64_t> aligned((size + 7) / 8 + 4);
  auto* bytes = reinterpret_cast<uint8_t*>(aligned.data());
  if (size > 0) std::memcpy(bytes, data, size);
  rlx::Expected<GgufFile> f = GgufFile::parse({bytes, size}, "fuzz.gguf");
  if (!f.has_value()) return 0;
  touch_metadata(*f);
  volatile uint64_t sink = touch_tensors(*f);
  (void)sink;
  return 0;
}
