// GGML tensor element types as numbered in GGUF files, with their block geometry.
// The formats layer owns this enum (it does not know the IR's DType); a model
// loader maps a GgmlType onto an IR dtype.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace rlx::formats {

/// A tensor type id exactly as stored in a GGUF tensor info (values are the file's ids).
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
};

/// Block geometry of a type: `block_size` elements are stored in `block_bytes` bytes.
/// Plain types (F32, F16, BF16, I8 ...) have block_size 1.
struct GgmlTypeInfo {
  std::string_view name;  ///< "Q4_K", "F32", ... (as llama.cpp prints it)
  int64_t block_size;
  int64_t block_bytes;
};

/// Maps a raw id from a file to a known type; nullopt for ids that are unknown or
/// were removed from the format (4, 5, 31-33, > 35).
std::optional<GgmlType> ggml_type_from_id(uint32_t id);

/// Geometry and name of a known type.
const GgmlTypeInfo& ggml_type_info(GgmlType type);

inline std::string_view ggml_type_name(GgmlType type) { return ggml_type_info(type).name; }
inline int64_t ggml_block_size(GgmlType type) { return ggml_type_info(type).block_size; }
inline int64_t ggml_block_bytes(GgmlType type) { return ggml_type_info(type).block_bytes; }

/// The i-quants that index a codebook (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
/// IQ3_S): their quantizers search the grid guided by an importance matrix.
constexpr bool ggml_is_codebook_type(GgmlType type) {
  switch (type) {
    case GgmlType::IQ1_S:
    case GgmlType::IQ1_M:
    case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS:
    case GgmlType::IQ2_S:
    case GgmlType::IQ3_XXS:
    case GgmlType::IQ3_S: return true;
    default: return false;
  }
}

/// Parses a type name such as "Q4_K" or "f16" (case-insensitive); nullopt if unknown.
std::optional<GgmlType> ggml_type_from_name(std::string_view name);

/// Bytes taken by `n_elements` of `type`, or nullopt when `n_elements` is negative,
/// not a multiple of the block size, or the byte count would overflow int64.
std::optional<int64_t> ggml_bytes_for(GgmlType type, int64_t n_elements);

}  // namespace rlx::formats
