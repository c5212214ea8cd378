// quantize_gguf: dequantize each tensor to f32, re-encode it with the mix's type and
// write a new GGUF with the metadata copied.
#include "rlx/models/quantize.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

#include <fmt/ranges.h>

#include "rlx/formats/gguf.h"
#include "rlx/formats/gguf_writer.h"
#include "rlx/formats/quant.h"

namespace rlx::models {
namespace {

using formats::GgmlType;
using formats::GgufMetaValue;
using formats::GgufValueType;

GgufMetaValue scalar_value(GgufValueType t, const formats::GgufValue& v) {
  switch (t) {
    case GgufValueType::kU8: return GgufMetaValue::u8(static_cast<uint8_t>(std::get<uint64_t>(v.data)));
    case GgufValueType::kU16: return GgufMetaValue::u16(static_cast<uint16_t>(std::get<uint64_t>(v.data)));
    case GgufValueType::kU32: return GgufMetaValue::u32(static_cast<uint32_t>(std::get<uint64_t>(v.data)));
    case GgufValueType::kU64: return GgufMetaValue::u64(std::get<uint64_t>(v.data));
    case GgufValueType::kI8: return GgufMetaValue::i8(static_cast<int8_t>(std::get<int64_t>(v.data)));
    case GgufValueType::kI16: return GgufMetaValue::i16(static_cast<int16_t>(std::get<int64_t>(v.data)));
    case GgufValueType::kI32: return GgufMetaValue::i32(static_cast<int32_t>(std::get<int64_t>(v.data)));
    case GgufValueType::kI64: return GgufMetaValue::i64(std::get<int64_t>(v.data));
    case GgufValueType::kF32: return GgufMetaValue::f32(static_cast<float>(std::get<double>(v.data)));
    case GgufValueType::kF64: return GgufMetaValue::f64(std::get<double>(v.data));
    case GgufValueType::kBool: return GgufMetaValue::boolean(std::get<bool>(v.data));
    case GgufValueType::kString: return GgufMetaValue::string(std::string(std::get<std::string_view>(v.data)));
    case GgufValueType::kArray: break;
  }
  return GgufMetaValue::u8(0);
}

GgufMetaValue array_value(const formats::GgufArray& a) {
  std::vector<GgufMetaValue> items;
  items.reserve(a.count);
  for (uint64_t i = 0; i < a.count; ++i) {
    switch (a.elem_type) {
      case GgufValueType::kString: items.push_back(GgufMetaValue::string(std::string(a.strings[i]))); break;
      case GgufValueType::kArray: items.push_back(array_value(a.arrays[i])); break;
      case GgufValueType::kU8: items.push_back(GgufMetaValue::u8(a.scalar_at<uint8_t>(i))); break;
      case GgufValueType::kI8: items.push_back(GgufMetaValue::i8(a.scalar_at<int8_t>(i))); break;
      case GgufValueType::kU16: items.push_back(GgufMetaValue::u16(a.scalar_at<uint16_t>(i))); break;
      case GgufValueType::kI16: items.push_back(GgufMetaValue::i16(a.scalar_at<int16_t>(i))); break;
      case GgufValueType::kU32: items.push_back(GgufMetaValue::u32(a.scalar_at<uint32_t>(i))); break;
      case GgufValueType::kI32: items.push_back(GgufMetaValue::i32(a.scalar_at<int32_t>(i))); break;
      case GgufValueType::kU64: items.push_back(GgufMetaValue::u64(a.scalar_at<uint64_t>(i))); break;
      case GgufValueType::kI64: items.push_back(GgufMetaValue::i64(a.scalar_at<int64_t>(i))); break;
      case GgufValueType::kF32: items.push_back(GgufMetaValue::f32(a.scalar_at<float>(i))); break;
      case GgufValueType::kF64: items.push_back(GgufMetaValue::f64(a.scalar_at<double>(i))); break;
      case GgufValueType::kBool: items.push_back(GgufMetaValue::boolean(a.scalar_at<bool>(i))); break;
    }
  }
  return GgufMetaValue::array(a.elem_type, std::move(items));
}

}  // namespace

int64_t gguf_tensor_layer(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  int64_t il = -1;
  std::from_chars(name.data() + 4, name.data() + name.size(), il);
  return il;
}

uint32_t mix_file_type(const std::string& mix) {
  if (mix == "f32") return 0;
  if (mix == "f16") return 1;
  if (mix == "bf16") return 32;  // LLAMA_FTYPE_MOSTLY_BF16
  if (mix == "q4_0") return 2;
  if (mix == "q4_1") return 3;
  if (mix == "q8_0") return 7;
  if (mix == "q5_0") return 8;
  if (mix == "q5_1") return 9;
  if (mix == "q2_k") return 10;
  if (mix == "q3_k_s") return 11;
  if (mix == "q3_k_m") return 12;
  if (mix == "q3_k_l") return 13;
  if (mix == "q4_k_s") return 14;
  if (mix == "q4_k_m") return 15;
  if (mix == "q5_k_s") return 16;
  if (mix == "q5_k_m") return 17;
  if (mix == "iq4_nl") return 25;
  if (mix == "iq4_xs") return 30;
  if (mix == "iq2_xxs") return 19;
  if (mix == "iq2_xs") return 20;
  if (mix == "iq3_xxs") return 23;
  if (mix == "iq1_s") return 24;
  if (mix == "iq3_s") return 26;
  if (mix == "iq2_s") return 28;
  if (mix == "iq1_m") return 31;
  if (mix == "tq1_0") return 36;
  if (mix == "tq2_0") return 37;
  return 18;  // q6_k
}

std::vector<std::string> quant_mixes() {
  return {"f32",    "f16",    "bf16",   "q8_0",   "q6_k",   "q5_k_m", "q5_k_s", "q5_1",   "q5_0",  "q4_k_m", "q4_k_s", "q4_1",
          "q4_0",   "q3_k_l", "q3_k_m", "q3_k_s", "q2_k",   "iq4_xs", "iq4_nl", "iq3_s", "iq3_xxs", "iq2_s",
          "iq2_xs", "iq2_xxs", "iq1_m", "iq1_s", "tq2_0", "tq1_0"};
}

std::string quant_mix_names() { return fmt::format("{}", fmt::join(quant_mixes(), ", ")); }

Expected<MixChoice> mix_weight_choice(const std::string& mix, const std::string& name, int64_t rows, int64_t cols,
                                      int64_t layer, int64_t n_layer, bool tied_embeddings) {
  if (rows <= 1 || cols <= 0) return MixChoice{GgmlType::F32, GgmlType::F32};  // norms, biases, scalars
  GgmlType wanted = GgmlType::F32;
  if (mix == "f32") {
    wanted = GgmlType::F32;
  } else if (mix == "f16") {
    wanted = GgmlType::F16;
  } else if (mix == "bf16") {
    wanted = GgmlType::BF16;
  } else if (mix == "q8_0") {
    wanted = GgmlType::Q8_0;
  } else if (mix == "q6_k" || mix.rfind("q5_", 0) == 0 || mix.rfind("q4_", 0) == 0 || mix.rfind("q3_k", 0) == 0 ||
             mix == "q2_k") {
    // llama-quantize's rules (llama_tensor_get_type) for one dense model: the output (or a
    // tied embedding) in Q6_K; attn_v, ffn_down and attn_output raised where the mix says.
    const bool is_output = name == "output.weight" || (tied_embeddings && name == "token_embd.weight");
    const bool more_bits = layer >= 0 && (layer < n_layer / 8 || layer >= 7 * n_layer / 8 ||
                                          (layer - n_layer / 8) % 3 == 2);
    const bool attn_v = name.find("attn_v.weight") != std::string::npos;
    // ffn_down covers the stacked experts' ffn_down_exps as well.
    const bool ffn_down = name.find(".ffn_down") != std::string::npos;
    const bool attn_out = name.find("attn_output.weight") != std::string::npos;
    const bool q4km = mix == "q4_k_m", q5km = mix == "q5_k_m";
    wanted = mix == "q6_k"                       ? GgmlType::Q6_K
             : q5km || mix == "q5_k_s"           ? GgmlType::Q5_K
             : q4km || mix == "q4_k_s"           ? GgmlType::Q4_K
             : mix.rfind("q3_k", 0) == 0         ? GgmlType::Q3_K
             : mix == "q2_k"                     ? GgmlType::Q2_K
             : mix == "q5_0"                     ? GgmlType::Q5_0
             : mix == "q5_1"                     ? GgmlType::Q5_1
             : mix == "q4_1"                     ? GgmlType::Q4_1
                                                 : GgmlType::Q4_0;
    if (is_output) {
      wanted = GgmlType::Q6_K;
    } else if ((q4km || q5km) && (attn_v || ffn_down) && more_bits) {
      wanted = GgmlType::Q6_K;
    } else if (mix == "q2_k" && (attn_v || ffn_down || attn_out)) {
      wanted = GgmlType::Q3_K;  // llama.cpp: Q4_K for attn_v when n_head / n_head_kv >= 4
    } else if (mix == "q3_k_m" && attn_v) {
      wanted = layer < 2 ? GgmlType::Q5_K : GgmlType::Q4_K;
    } else if (mix == "q3_k_m" && ffn_down) {
      wanted = layer < n_layer / 16 ? GgmlType::Q5_K : GgmlType::Q4_K;
    } else if (mix == "q3_k_m" && attn_out) {
      wanted = GgmlType::Q4_K;
    } else if (mix == "q3_k_l" && (attn_v || ffn_down || attn_out)) {
      wanted = GgmlType::Q5_K;
    } else if (mix == "q4_k_s" && ((attn_v && layer < 4) || (ffn_down && layer < n_layer / 8))) {
      wanted = GgmlType::Q5_K;
    }
  } else if (mix.rfind("iq", 0) == 0 || mix == "tq2_0" || mix == "tq1_0") {
    // One type for every matrix but the output (and a tied embedding), kept in Q6_K.
    const bool is_output = name == "output.weight" || (tied_embeddings && name == "token_embd.weight");
    static const std::pair<const char*, GgmlType> kOneType[] = {
        {"iq4_xs", GgmlType::IQ4_XS},   {"iq4_nl", GgmlType::IQ4_NL}, {"iq3_s", GgmlType::IQ3_S},
        {"iq3_xxs", GgmlType::IQ3_XXS}, {"iq2_s", GgmlType::IQ2_S},   {"iq2_xs", GgmlType::IQ2_XS},
        {"iq2_xxs", GgmlType::IQ2_XXS}, {"iq1_m", GgmlType::IQ1_M},   {"iq1_s", GgmlType::IQ1_S},
        {"tq2_0", GgmlType::TQ2_0},     {"tq1_0", GgmlType::TQ1_0}};
    bool found = false;
    for (const auto& [m, t] : kOneType)
      if (mix == m) {
        wanted = t;
        found = true;
      }
    if (!found) return Error::invalid_argument("unknown quantization mix '{}' ({})", mix, quant_mix_names());
    if (is_output) wanted = GgmlType::Q6_K;
  } else {
    return Error::invalid_argument("unknown quantization mix '{}' ({})", mix, quant_mix_names());
  }
  // Rows must hold whole blocks. Else llama-quantize's fallback for the wanted type, a
  // type of 32-value blocks of about as many bits (ternary: Q4_0; Q2_K, Q3_K, IQ4_XS:
  // IQ4_NL; Q4_K: Q5_0; Q5_K: Q5_1; Q6_K: Q8_0), and F16 when those do not fit either.
  if (cols % formats::ggml_block_size(wanted) == 0) return MixChoice{wanted, wanted};
  GgmlType fallback = GgmlType::F16;
  switch (wanted) {
    case GgmlType::TQ1_0:
    case GgmlType::TQ2_0: fallback = GgmlType::Q4_0; break;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::IQ4_XS:
    case GgmlType::IQ3_S:
    case GgmlType::IQ3_XXS:
    case GgmlType::IQ2_S:
    case GgmlType::IQ2_XS:
    case GgmlType::IQ2_XXS:
    case GgmlType::IQ1_M:
    case GgmlType::IQ1_S: fallback = GgmlType::IQ4_NL; break;
    case GgmlType::Q4_K: fallback = GgmlType::Q5_0; break;
    case GgmlType::Q5_K: fallback = GgmlType::Q5_1; break;
    case GgmlType::Q6_K: fallback = GgmlType::Q8_0; break;
    default: break;
  }
  if (cols % formats::ggml_block_size(fallback) != 0) fallback = GgmlType::F16;
  return MixChoice{fallback, wanted};
}

Expected<GgmlType> mix_weight_type(const std::string& mix, const std::string& name, int64_t rows, int64_t cols,
                                   int64_t layer, int64_t n_layer, bool tied_embeddings) {
  ASSIGN_OR_RETURN(MixChoice c, mix_weight_choice(mix, name, rows, cols, layer, n_layer, tied_embeddings));
  return c.type;
}

std::string describe_fallback(const std::string& name, int64_t rows, int64_t cols, const MixChoice& choice) {
  return fmt::format("tensor '{}' [{}, {}]: wanted {}, chose {} (rows of {} values are no multiple of {}'s {}-value "
                     "block)",
                     name, rows, cols, formats::ggml_type_name(choice.wanted), formats::ggml_type_name(choice.type),
                     cols, formats::ggml_type_name(choice.wanted), formats::ggml_block_size(choice.wanted));
}

Expected<bool> add_quantized_tensor(formats::GgufWriter& w, const std::string& name, GgmlType type,
                                    const std::vector<int64_t>& dims, std::span<const float> values,
                                    const Imatrix* imatrix) {
  const int64_t cols = dims.empty() ? 1 : dims[0];
  const int64_t mats = dims.size() == 3 ? dims[2] : 1;
  const int64_t rows = cols > 0 && mats > 0 ? static_cast<int64_t>(values.size()) / (cols * mats) : 0;
  // The importance of each matrix (one per expert of a stacked weight; empty for a matrix
  // the imatrix has no tokens for), or none at all.
  std::vector<std::vector<float>> importance;
  if (imatrix != nullptr && formats::takes_importance(type) && dims.size() >= 2 && dims.size() <= 3) {
    // A fused or grouped matrix reads the same input as the part the model measured.
    static const std::pair<const char*, const char*> kSameInput[] = {
        {".attn_qkv.", ".attn_q."}, {".ssm_ba.", ".ssm_beta."}, {".ssm_in.", ".attn_qkv."}};
    std::string key = name;
    for (const auto& [stored, measured] : kSameInput)
      if (!imatrix->entries.count(key) && key.find(stored) != std::string::npos)
        key.replace(key.find(stored), std::strlen(stored), measured);
    auto it = imatrix->entries.find(key);
    const auto have = it == imatrix->entries.end() ? 0 : static_cast<int64_t>(it->second.counts.size());
    if (have > 0 && it->second.columns() == cols && (have == mats || have == 1)) {
      bool any = false;
      for (int64_t e = 0; e < mats; ++e) {
        importance.push_back(imatrix->importance(key, have == mats ? e : 0));
        any = any || !importance.back().empty();
      }
      if (!any) importance.clear();
    }
  }
  const std::optional<int64_t> row_bytes = formats::ggml_bytes_for(type, cols);
  if (!row_bytes || rows * cols * mats != static_cast<int64_t>(values.size()))
    return Error::invalid_argument("tensor '{}': {} values do not fill rows of {} {} values", name, values.size(), cols,
                                   formats::ggml_type_name(type));
  // Rows are independent: quantized on several threads (the codebook types search their
  // grids for every run of values), each row as one call.
  std::vector<uint8_t> data(static_cast<size_t>(*row_bytes * rows * mats));
  const int64_t total = rows * mats;
  const auto hw = static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t threads = std::clamp<int64_t>(total * cols / (int64_t{1} << 16), 1, std::min<int64_t>(hw, 16));
  std::atomic<int64_t> next{0};
  std::mutex error_mutex;
  Status first_error;
  auto work = [&] {
    for (int64_t at = next.fetch_add(16); at < total; at = next.fetch_add(16)) {
      for (int64_t row = at; row < std::min(at + 16, total); ++row) {
        const float* imp = nullptr;
        if (!importance.empty() && !importance[static_cast<size_t>(row / rows)].empty())
          imp = importance[static_cast<size_t>(row / rows)].data();
        Status st = formats::quantize_row_weighted(type, values.data() + row * cols, data.data() + row * *row_bytes,
                                                   cols, imp);
        if (!st.ok()) {
          std::lock_guard<std::mutex> lock(error_mutex);
          if (first_error.ok()) first_error = std::move(st);
          return;
        }
      }
    }
  };
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // no more threads to be had: the ones running (and this one) do the rows
    }
  }
  work();
  for (std::thread& t : pool) t.join();
  if (!first_error.ok()) return first_error.error().with_context(fmt::format("tensor '{}'", name));
  TRY(w.add_tensor(name, type, dims, std::move(data)));
  return !importance.empty();
}

Status quantize_gguf(const std::string& in, const std::string& out, const QuantizeOptions& o) {
  ASSIGN_OR_RETURN(formats::GgufFile file, formats::GgufFile::open(in));
  bool known = false;
  for (const auto& m : quant_mixes()) known |= m == o.mix;
  if (!known) return Error::invalid_argument("unknown quantization mix '{}' ({})", o.mix, quant_mix_names());
  std::string arch;
  if (auto a = file.get_string("general.architecture")) arch = std::string(*a);
  const int64_t n_layer = file.get_int(arch + ".block_count").value_or(0);
  const bool tied = file.find_tensor("output.weight") == nullptr;

  formats::GgufWriter w;
  if (file.alignment() != formats::kGgufDefaultAlignment) TRY(w.set_alignment(file.alignment()));
  for (const auto& kv : file.metadata()) {
    // Keys this function writes itself (an input that rlx quantize wrote holds them too).
    if (kv.key == "general.alignment" || kv.key == "general.file_type" || kv.key == "general.quantized_by") continue;
    GgufMetaValue v = kv.value.type == GgufValueType::kArray
                          ? array_value(std::get<formats::GgufArray>(kv.value.data))
                          : scalar_value(kv.value.type, kv.value);
    TRY(w.add(kv.key, std::move(v)));
  }
  TRY(w.add_u32("general.file_type", mix_file_type(o.mix)));
  TRY(w.add_string("general.quantized_by", "rlx quantize"));

  std::vector<float> values;
  const auto& tensors = file.tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    const auto shape = t.shape();
    const int64_t cols = shape.empty() ? 1 : shape.back();
    const int64_t rows = t.n_elements() / std::max<int64_t>(cols, 1);
    ASSIGN_OR_RETURN(MixChoice choice, mix_weight_choice(o.mix, t.name, rows, cols, gguf_tensor_layer(t.name), n_layer, tied));
    if (choice.fell_back() && o.on_fallback) o.on_fallback(describe_fallback(t.name, rows, cols, choice));
    const GgmlType type = choice.type;
    if (type == t.type) {
      TRY(w.add_tensor(t.name, t.type, t.dims, std::vector<uint8_t>(t.data, t.data + t.n_bytes)));
    } else {
      values.resize(static_cast<size_t>(t.n_elements()));
      if (Status s = formats::dequantize_row(t.type, t.data, values.data(), t.n_elements()); !s.ok())
        return s.error().with_context(fmt::format("{}: tensor '{}'", in, t.name));
      ASSIGN_OR_RETURN(const bool weighted, add_quantized_tensor(w, t.name, type, t.dims, values, o.imatrix.get()));
      if (o.imatrix && !weighted && formats::takes_importance(type) && o.on_no_importance) o.on_no_importance(t.name);
    }
    if (o.progress) o.progress(0.95 * static_cast<double>(i + 1) / static_cast<double>(tensors.size()));
  }
  const std::string tmp = out + ".tmp";
  TRY(w.write_file(tmp));
  std::error_code ec;
  std::filesystem::rename(tmp, out, ec);
  if (ec) return Error::io("cannot move '{}' to '{}': {}", tmp, out, ec.message());
  if (o.progress) o.progress(1.0);
  return {};
}

}  // namespace rlx::models
