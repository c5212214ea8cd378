// libFuzzer target: decodes arbitrary bytes as a binary LIR blob (the AOT cache payload).
// Whatever decodes must be a verified graph whose canonical encoding decodes again and
// re-encodes to the same bytes (the input itself may use non-canonical varints).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "rlx/ir/binary.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  rlx::Expected<rlx::ir::LirModule> m = rlx::ir::decode_lir_binary(in);
  if (!m.has_value()) return 0;
  if (!rlx::ir::verify(m->graph).ok()) __builtin_trap();
  const std::string canonical = rlx::ir::encode_lir_binary(*m);
  rlx::Expected<rlx::ir::LirModule> again = rlx::ir::decode_lir_binary(canonical);
  if (!again.has_value() || rlx::ir::encode_lir_binary(*again) != canonical) __builtin_trap();
  return 0;
}
