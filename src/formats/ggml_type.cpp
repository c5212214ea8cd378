// Table of GGML type ids, names and block geometry (element count and bytes per block),
// matching the block structs of the GGUF format.
#include "rlx/formats/ggml_type.h"

#include <array>
#include <cctype>
#include <limits>

namespace rlx::formats {
namespace {

struct TypeRow {
  GgmlType type;
  GgmlTypeInfo info;
};

constexpr std::array<TypeRow, 31> kTypes = {{
    {GgmlType::F32, {"F32", 1, 4}},
    {GgmlType::F16, {"F16", 1, 2}},
    {GgmlType::Q4_0, {"Q4_0", 32, 18}},
    {GgmlType::Q4_1, {"Q4_1", 32, 20}},
    {GgmlType::Q5_0, {"Q5_0", 32, 22}},
    {GgmlType::Q5_1, {"Q5_1", 32, 24}},
    {GgmlType::Q8_0, {"Q8_0", 32, 34}},
    {GgmlType::Q8_1, {"Q8_1", 32, 36}},
    {GgmlType::Q2_K, {"Q2_K", 256, 84}},
    {GgmlType::Q3_K, {"Q3_K", 256, 110}},
    {GgmlType::Q4_K, {"Q4_K", 256, 144}},
    {GgmlType::Q5_K, {"Q5_K", 256, 176}},
    {GgmlType::Q6_K, {"Q6_K", 256, 210}},
    {GgmlType::Q8_K, {"Q8_K", 256, 292}},
    {GgmlType::IQ2_XXS, {"IQ2_XXS", 256, 66}},
    {GgmlType::IQ2_XS, {"IQ2_XS", 256, 74}},
    {GgmlType::IQ3_XXS, {"IQ3_XXS", 256, 98}},
    {GgmlType::IQ1_S, {"IQ1_S", 256, 50}},
    {GgmlType::IQ4_NL, {"IQ4_NL", 32, 18}},
    {GgmlType::IQ3_S, {"IQ3_S", 256, 110}},
    {GgmlType::IQ2_S, {"IQ2_S", 256, 82}},
    {GgmlType::IQ4_XS, {"IQ4_XS", 256, 136}},
    {GgmlType::I8, {"I8", 1, 1}},
    {GgmlType::I16, {"I16", 1, 2}},
    {GgmlType::I32, {"I32", 1, 4}},
    {GgmlType::I64, {"I64", 1, 8}},
    {GgmlType::F64, {"F64", 1, 8}},
    {GgmlType::IQ1_M, {"IQ1_M", 256, 56}},
    {GgmlType::BF16, {"BF16", 1, 2}},
    {GgmlType::TQ1_0, {"TQ1_0", 256, 54}},
    {GgmlType::TQ2_0, {"TQ2_0", 256, 66}},
}};

const TypeRow* find_row(uint32_t id) {
  for (const TypeRow& row : kTypes) {
    if (static_cast<uint32_t>(row.type) == id) return &row;
  }
  return nullptr;
}

}  // namespace

std::optional<GgmlType> ggml_type_from_id(uint32_t id) {
  const TypeRow* row = find_row(id);
  if (row == nullptr) return std::nullopt;
  return row->type;
}

const GgmlTypeInfo& ggml_type_info(GgmlType type) {
  const TypeRow* row = find_row(static_cast<uint32_t>(type));
  static const GgmlTypeInfo kUnknown{"unknown", 1, 0};
  return row != nullptr ? row->info : kUnknown;
}

std::optional<GgmlType> ggml_type_from_name(std::string_view name) {
  for (const TypeRow& row : kTypes) {
    const std::string_view candidate = row.info.name;
    if (candidate.size() != name.size()) continue;
    bool equal = true;
    for (size_t i = 0; i < name.size() && equal; ++i) {
      equal = std::toupper(static_cast<unsigned char>(name[i])) == candidate[i];
    }
    if (equal) return row.type;
  }
  return std::nullopt;
}

std::optional<int64_t> ggml_bytes_for(GgmlType type, int64_t n_elements) {
  const GgmlTypeInfo& info = ggml_type_info(type);
  if (n_elements < 0 || info.block_bytes == 0 || n_elements % info.block_size != 0) return std::nullopt;
  const int64_t n_blocks = n_elements / info.block_size;
  if (n_blocks > std::numeric_limits<int64_t>::max() / info.block_bytes) return std::nullopt;
  return n_blocks * info.block_bytes;
}

}  // namespace rlx::formats
