// The dtype table (sizes of every scalar and GGUF block type) and symbolic Dim /
// Shape arithmetic, parsing, printing and broadcasting.
#include <gtest/gtest.h>

#include "ir_test_util.h"

namespace rlx::ir {
namespace {

// GGUF block layouts (ggml-common.h), byte by byte: d/dmin are f16 unless noted.
TEST(DType, GgufBlockSizes) {
  struct Block {
    DType t;
    int64_t block_size;
    int64_t bytes;
  };
  const Block blocks[] = {
      {DType::Q4_0, 32, 2 + 32 / 2},                       // d, 4-bit quants
      {DType::Q4_1, 32, 2 + 2 + 32 / 2},                   // d, m, 4-bit quants
      {DType::Q5_0, 32, 2 + 4 + 32 / 2},                   // d, qh (high bits), low nibbles
      {DType::Q5_1, 32, 2 + 2 + 4 + 32 / 2},               // d, m, qh, low nibbles
      {DType::Q8_0, 32, 2 + 32},                           // d, int8 quants
      {DType::Q2_K, 256, 256 / 16 + 256 / 4 + 2 + 2},      // scales, qs, d, dmin
      {DType::Q3_K, 256, 256 / 8 + 256 / 4 + 12 + 2},      // hmask, qs, scales, d
      {DType::Q4_K, 256, 2 + 2 + 12 + 256 / 2},            // d, dmin, scales, qs
      {DType::Q5_K, 256, 2 + 2 + 12 + 256 / 8 + 256 / 2},  // d, dmin, scales, qh, qs
      {DType::Q6_K, 256, 256 / 2 + 256 / 4 + 256 / 16 + 2},  // ql, qh, scales, d
      {DType::Q8_K, 256, 4 + 256 + 256 / 16 * 2},          // d (f32), qs, bsums (i16)
  };
  for (const Block& b : blocks) {
    const DTypeInfo& info = dtype_info(b.t);
    EXPECT_EQ(info.block_size, b.block_size) << info.name;
    EXPECT_EQ(info.bytes_per_block, b.bytes) << info.name;
    EXPECT_TRUE(is_packed(b.t)) << info.name;
    EXPECT_EQ(dtype_bytes(b.t, 4 * b.block_size), 4 * b.bytes) << info.name;
    EXPECT_EQ(dtype_bytes(b.t, b.block_size + 1), std::nullopt) << info.name;
  }
}

TEST(DType, ScalarsNamesAndKinds) {
  const std::pair<DType, int64_t> scalars[] = {{DType::F32, 4}, {DType::F16, 2}, {DType::BF16, 2}, {DType::F64, 8},
                                               {DType::I8, 1},  {DType::U8, 1},  {DType::I32, 4},  {DType::I64, 8},
                                               {DType::Bool, 1}};
  for (const auto& [t, size] : scalars) {
    EXPECT_EQ(dtype_info(t).block_size, 1);
    EXPECT_EQ(dtype_bytes(t, 3), 3 * size) << dtype_name(t);
  }
  EXPECT_TRUE(is_float(DType::BF16));
  EXPECT_TRUE(is_integer(DType::U8));
  EXPECT_FALSE(is_integer(DType::Bool));
  EXPECT_FALSE(is_float(DType::Q8_0));
  EXPECT_EQ(kNumDTypes, 31);  // 9 scalars, 11 legacy and K-quant blocks, 11 i-quant and ternary blocks
  for (int i = 0; i < kNumDTypes; ++i) {
    const auto t = static_cast<DType>(i);
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  }
  EXPECT_EQ(parse_dtype("f31"), std::nullopt);
  EXPECT_EQ(parse_dtype("F32"), std::nullopt);
  EXPECT_EQ(dtype_bytes(DType::F32, -1), std::nullopt);
  EXPECT_EQ(dtype_bytes(DType::F64, INT64_MAX / 4), std::nullopt);
  EXPECT_EQ(dtype_bytes(DType::Q8_K, 0), 0);
}

TEST(Dim, ArithmeticAndText) {
  const Dim seq = Dim::symbol(SEQ), batch = Dim::symbol(BATCH);
  const Dim bs = *Dim::mul(seq, batch);
  EXPECT_EQ(bs, *Dim::mul(batch, seq));  // symbols are kept sorted
  EXPECT_EQ(bs.to_string(), "BATCH*SEQ");
  EXPECT_EQ(Dim::mul(Dim(2), seq)->to_string(), "2*SEQ");
  EXPECT_EQ(Dim::mul(bs, seq), std::nullopt);  // three symbols
  EXPECT_EQ(Dim::mul(Dim(INT64_MAX), Dim(2)), std::nullopt);
  EXPECT_EQ(Dim::mul(Dim(0), seq), Dim(0));
  EXPECT_EQ(Dim::add(seq, seq), Dim::symbol(SEQ, 2));
  EXPECT_EQ(Dim::add(Dim(0), seq), seq);
  EXPECT_EQ(Dim::add(seq, Dim(1)), std::nullopt);
  EXPECT_EQ(Dim::add(Dim(3), Dim(4)), Dim(7));
  EXPECT_EQ(Dim::symbol(SEQ, 6).div(3), Dim::symbol(SEQ, 2));
  EXPECT_EQ(Dim(7).div(2), std::nullopt);
  EXPECT_EQ(Dim(7).div(0), std::nullopt);
  EXPECT_EQ(seq.n_syms(), 1);
  EXPECT_EQ(bs.n_syms(), 2);
  EXPECT_EQ(Dim(5).value(), 5);
  EXPECT_EQ(symbol_name(PAST_SEQ), "PAST_SEQ");
  EXPECT_EQ(intern_symbol("SEQ"), SEQ);
}

TEST(Dim, Parse) {
  EXPECT_EQ(parse_dim("64"), Dim(64));
  EXPECT_EQ(parse_dim("SEQ"), Dim::symbol(SEQ));
  EXPECT_EQ(parse_dim("2*SEQ"), Dim::symbol(SEQ, 2));
  EXPECT_EQ(parse_dim("SEQ*2*BATCH"), Dim::mul(Dim::symbol(SEQ, 2), Dim::symbol(BATCH)));
  for (const char* bad : {"", "*", "2*", "*SEQ", "S-Q", "SEQ*SEQ*SEQ", "99999999999999999999"})
    EXPECT_EQ(parse_dim(bad), std::nullopt) << bad;
}

TEST(Shape, QueriesAndBroadcast) {
  const Shape s{Dim::symbol(SEQ), 4, 8};
  EXPECT_EQ(s.to_string(), "[SEQ, 4, 8]");
  EXPECT_FALSE(s.is_static());
  EXPECT_EQ(s.num_elements(), std::nullopt);
  EXPECT_EQ(s.product(), Dim::symbol(SEQ, 32));
  EXPECT_EQ(s.axis(-1), 2);
  EXPECT_EQ(s.axis(3), std::nullopt);
  EXPECT_EQ(s.axis(-4), std::nullopt);
  const Shape t = Shape::of({2, 3, 4});
  EXPECT_EQ(t.num_elements(), 24);
  EXPECT_EQ(t.strides(), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(Shape{}.num_elements(), 1);
  EXPECT_EQ(Shape::of({INT64_MAX, 2}).num_elements(), std::nullopt);
  EXPECT_EQ(broadcast_shapes(Shape{Dim::symbol(SEQ), 1}, Shape::of({5})), (Shape{Dim::symbol(SEQ), 5}));
  EXPECT_EQ(broadcast_shapes(Shape::of({3, 1}), Shape::of({2, 1, 4})), Shape::of({2, 3, 4}));
  EXPECT_EQ(broadcast_shapes(Shape{Dim::symbol(SEQ)}, Shape{Dim::symbol(BATCH)}), std::nullopt);
  EXPECT_EQ(broadcast_shapes(Shape::of({2}), Shape::of({3})), std::nullopt);
}

}  // namespace
}  // namespace rlx::ir
