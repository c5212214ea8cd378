// What the front ends of EncoderModel share (rlx embed, rlx forward, rlx serve's
// /v1/embeddings, the Python binding): texts to encoder token ids, Hugging Face's padded
// [batch, n] layout to sequences and back, Matryoshka truncation, and embed_all, which
// embeds any number of sequences in length-sorted batches of power-of-two sizes.
#include <algorithm>
#include <limits>
#include <numeric>

#include "rlx/models/encoder.h"

namespace rlx::models {

void truncate_embedding(std::vector<float>& v, int64_t dimensions) {
  if (dimensions >= 1 && dimensions < static_cast<int64_t>(v.size())) v.resize(static_cast<size_t>(dimensions));
  l2_normalize(v);
}

std::vector<int32_t> encoder_tokens(const Tokenizer& tokenizer, std::string_view text, int64_t truncate_to) {
  std::vector<int32_t> ids = tokenizer.encode(text, /*add_special=*/true);
  if (ids.empty()) {
    const SpecialTokenIds& s = tokenizer.special_ids();
    ids.push_back(s.cls >= 0 ? s.cls : std::max<int32_t>(s.bos, 0));
  }
  if (truncate_to > 0 && static_cast<int64_t>(ids.size()) > truncate_to) {
    const int32_t last = ids.back();
    ids.resize(static_cast<size_t>(truncate_to));
    if (tokenizer.add_eos()) ids.back() = last;
  }
  return ids;
}

Expected<EncoderBatch> unpad_encoder_batch(std::span<const int64_t> input_ids, std::span<const int64_t> attention_mask,
                                           std::span<const int64_t> token_type_ids, int64_t batch, int64_t n) {
  if (batch < 1 || n < 1) return Error::invalid_argument("input_ids: an empty batch ({} x {})", batch, n);
  if (n > std::numeric_limits<int64_t>::max() / batch || static_cast<int64_t>(input_ids.size()) != batch * n)
    return Error::invalid_argument("input_ids: {} values for a batch of {} x {}", input_ids.size(), batch, n);
  auto check_size = [&](std::span<const int64_t> v, const char* name) -> Status {
    if (!v.empty() && static_cast<int64_t>(v.size()) != batch * n)
      return Error::invalid_argument("{}: {} values; input_ids has {} x {}", name, v.size(), batch, n);
    return {};
  };
  TRY(check_size(attention_mask, "attention_mask"));
  TRY(check_size(token_type_ids, "token_type_ids"));
  auto row = [&](std::span<const int64_t> v, const char* name, int64_t b,
                 int64_t len) -> Expected<std::vector<int32_t>> {
    std::vector<int32_t> out(static_cast<size_t>(len));
    for (int64_t i = 0; i < len; ++i) {
      const int64_t x = v[static_cast<size_t>(b * n + i)];
      if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max())
        return Error::invalid_argument("{}: row {} holds {}, outside int32", name, b, x);
      out[static_cast<size_t>(i)] = static_cast<int32_t>(x);
    }
    return out;
  };
  EncoderBatch out;
  for (int64_t b = 0; b < batch; ++b) {
    int64_t len = n;
    if (!attention_mask.empty()) {  // right padding: ones, then zeros
      const std::span<const int64_t> m = attention_mask.subspan(static_cast<size_t>(b * n), static_cast<size_t>(n));
      len = 0;
      while (len < n && m[static_cast<size_t>(len)] == 1) ++len;
      for (int64_t i = len; i < n; ++i)
        if (m[static_cast<size_t>(i)] != 0)
          return Error::invalid_argument(
              "attention_mask: row {} must be ones then zeros (right padding), found {} at {}", b,
              m[static_cast<size_t>(i)], i);
      if (len == 0) return Error::invalid_argument("attention_mask: row {} masks every token", b);
    }
    ASSIGN_OR_RETURN(std::vector<int32_t> ids, row(input_ids, "input_ids", b, len));
    out.tokens.push_back(std::move(ids));
    if (!token_type_ids.empty()) {
      ASSIGN_OR_RETURN(std::vector<int32_t> types, row(token_type_ids, "token_type_ids", b, len));
      out.types.push_back(std::move(types));
    }
  }
  return out;
}

std::vector<float> padded_hidden_states(const EncoderOutput& out, int64_t n) {
  const int64_t D = out.dim;
  std::vector<float> values(static_cast<size_t>(out.batch * n * D), 0.0f);
  for (int64_t b = 0; b < out.batch; ++b)
    for (int64_t i = 0; i < std::min(n, out.seq); ++i)
      std::copy_n(out.hidden.begin() + (b * out.seq + i) * D, D, values.begin() + (b * n + i) * D);
  return values;
}

Expected<std::vector<std::vector<float>>> EncoderModel::embed_all(std::span<const std::vector<int32_t>> tokens,
                                                                  const EmbedOptions& o) {
  if (o.pooling == Pooling::None)
    return Error::invalid_argument("pooling 'none' keeps every token's state; an embedding needs cls, mean or last");
  if (o.max_batch < 1 || o.max_batch > 4096)
    return Error::invalid_argument("embed: the batch size must be 1..4096, got {}", o.max_batch);
  if (o.dimensions < 0 || o.dimensions > config_.n_embd)
    return Error::invalid_argument("embed: dimensions must be 1..{} (the model's width), got {}", config_.n_embd,
                                   o.dimensions);
  // Longest first: each run pads its sequences to the bucket of its first one.
  std::vector<size_t> order(tokens.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return tokens[x].size() > tokens[y].size(); });
  std::vector<std::vector<float>> result(tokens.size());
  std::vector<std::vector<int32_t>> batch;
  for (size_t start = 0; start < order.size();) {
    // The largest power of two that fits both the limit and what is left.
    size_t size = 1;
    while (size * 2 <= static_cast<size_t>(o.max_batch) && size * 2 <= order.size() - start) size *= 2;
    if (o.interrupt) TRY(o.interrupt());
    batch.clear();
    for (size_t k = start; k < start + size; ++k) batch.push_back(tokens[order[k]]);
    ASSIGN_OR_RETURN(std::vector<std::vector<float>> e, embed(batch, o.pooling, o.normalize));
    for (size_t k = 0; k < size; ++k) {
      if (o.dimensions > 0) truncate_embedding(e[k], o.dimensions);
      result[order[start + k]] = std::move(e[k]);
    }
    start += size;
  }
  return result;
}

}  // namespace rlx::models
