// Element types of RLX tensors: plain scalars and the packed GGUF block formats.
// A packed type stores `block_size` logical elements in `bytes_per_block` bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace rlx::ir {

#define RLX_DTYPES(X)                          \
  /* name   text     block  bytes  kind */     \
  X(F32, "f32", 1, 4, kFloat)                  \
  X(F16, "f16", 1, 2, kFloat)                  \
  X(BF16, "bf16", 1, 2, kFloat)                \
  X(F64, "f64", 1, 8, kFloat)                  \
  X(I8, "i8", 1, 1, kInt)                      \
  X(U8, "u8", 1, 1, kInt)                      \
  X(I32, "i32", 1, 4, kInt)                    \
  X(I64, "i64", 1, 8, kInt)                    \
  X(Bool, "bool", 1, 1, kBool)                 \
  X(Q4_0, "q4_0", 32, 18, kPacked)             \
  X(Q4_1, "q4_1", 32, 20, kPacked)             \
  X(Q5_0, "q5_0", 32, 22, kPacked)             \
  X(Q5_1, "q5_1", 32, 24, kPacked)             \
  X(Q8_0, "q8_0", 32, 34, kPacked)             \
  X(Q2_K, "q2_k", 256, 84, kPacked)            \
  X(Q3_K, "q3_k", 256, 110, kPacked)           \
  X(Q4_K, "q4_k", 256, 144, kPacked)           \
  X(Q5_K, "q5_k", 256, 176, kPacked)           \
  X(Q6_K, "q6_k", 256, 210, kPacked)           \
  X(Q8_K, "q8_k", 256, 292, kPacked)           \
  X(IQ4_NL, "iq4_nl", 32, 18, kPacked)         \
  X(IQ4_XS, "iq4_xs", 256, 136, kPacked)       \
  X(IQ3_S, "iq3_s", 256, 110, kPacked)         \
  X(IQ3_XXS, "iq3_xxs", 256, 98, kPacked)      \
  X(IQ2_S, "iq2_s", 256, 82, kPacked)          \
  X(IQ2_XS, "iq2_xs", 256, 74, kPacked)        \
  X(IQ2_XXS, "iq2_xxs", 256, 66, kPacked)      \
  X(IQ1_S, "iq1_s", 256, 50, kPacked)          \
  X(IQ1_M, "iq1_m", 256, 56, kPacked)          \
  X(TQ1_0, "tq1_0", 256, 54, kPacked)          \
  X(TQ2_0, "tq2_0", 256, 66, kPacked)

enum class DType : uint8_t {
#define RLX_DTYPE_ENUM(name, text, block, bytes, kind) name,
  RLX_DTYPES(RLX_DTYPE_ENUM)
#undef RLX_DTYPE_ENUM
};

enum class DTypeKind : uint8_t { kFloat, kInt, kBool, kPacked };

struct DTypeInfo {
  std::string_view name;   ///< text form, e.g. "f32", "q4_k"
  int64_t block_size;      ///< logical elements per block (1 for scalars)
  int64_t bytes_per_block; ///< bytes per block (element size for scalars)
  DTypeKind kind;
};

const DTypeInfo& dtype_info(DType t);
inline std::string_view dtype_name(DType t) { return dtype_info(t).name; }
std::optional<DType> parse_dtype(std::string_view text);

inline bool is_packed(DType t) { return dtype_info(t).kind == DTypeKind::kPacked; }
inline bool is_float(DType t) { return dtype_info(t).kind == DTypeKind::kFloat; }
inline bool is_integer(DType t) { return dtype_info(t).kind == DTypeKind::kInt; }

/// Bytes needed for `n_elements` of `t`; nullopt when a packed type gets a count
/// that is not a multiple of its block size, or on overflow.
std::optional<int64_t> dtype_bytes(DType t, int64_t n_elements);

/// Number of distinct DType values (for tables indexed by dtype).
inline constexpr int kNumDTypes = 0
#define RLX_DTYPE_COUNT(name, text, block, bytes, kind) +1
    RLX_DTYPES(RLX_DTYPE_COUNT)
#undef RLX_DTYPE_COUNT
    ;

}  // namespace rlx::ir
