// DType table: names, block sizes and byte sizes, generated from RLX_DTYPES.
#include "rlx/ir/dtype.h"

#include <array>
#include <limits>

namespace rlx::ir {
namespace {

constexpr std::array<DTypeInfo, kNumDTypes> kInfos = {{
#define RLX_DTYPE_INFO(name, text, block, bytes, kind) {text, block, bytes, DTypeKind::kind},
    RLX_DTYPES(RLX_DTYPE_INFO)
#undef RLX_DTYPE_INFO
}};

}  // namespace

const DTypeInfo& dtype_info(DType t) { return kInfos[static_cast<size_t>(t)]; }

std::optional<DType> parse_dtype(std::string_view text) {
  for (size_t i = 0; i < kInfos.size(); ++i)
    if (kInfos[i].name == text) return static_cast<DType>(i);
  return std::nullopt;
}

std::optional<int64_t> dtype_bytes(DType t, int64_t n_elements) {
  const DTypeInfo& info = dtype_info(t);
  if (n_elements < 0 || n_elements % info.block_size != 0) return std::nullopt;
  const int64_t blocks = n_elements / info.block_size;
  if (blocks > std::numeric_limits<int64_t>::max() / info.bytes_per_block) return std::nullopt;
  return blocks * info.bytes_per_block;
}

}  // namespace rlx::ir
