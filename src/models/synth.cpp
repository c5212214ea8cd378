// Synthetic GGUF writer: architecture presets, a generated SentencePiece vocabulary
// (control tokens, 256 byte-fallback tokens, characters and frequent English pieces),
// and per-tensor seeded N(0, 0.02²) weights (norm weights 1 + 0.02·N(0,1)).
#include "rlx/models/synth.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "rlx/base/hash.h"
#include "rlx/formats/gguf_writer.h"
#include "rlx/models/quantize.h"

namespace rlx::models {
namespace {

using formats::GgmlType;

struct Preset {
  int64_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
  double rope_theta;
};

Expected<Preset> find_preset(const std::string& name) {
  static const std::map<std::string, Preset> kPresets = {
      {"tiny", {64, 2, 4, 2, 16, 128, 512, 512, 10000.0}},
      {"llama-3.2-1b", {2048, 16, 32, 8, 64, 8192, 32000, 4096, 500000.0}},
      {"qwen3-0.6b", {1024, 28, 16, 8, 128, 3072, 32000, 4096, 1000000.0}},
      {"gemma-2-2b", {2304, 26, 8, 4, 256, 9216, 32000, 4096, 10000.0}},
  };
  auto it = kPresets.find(name);
  if (it == kPresets.end()) return Error::invalid_argument("unknown preset '{}' (tiny, llama-3.2-1b, qwen3-0.6b, gemma-2-2b)", name);
  return it->second;
}

// xoshiro256** seeded by splitmix64: fast, reproducible everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (uint64_t& s : s_) {
      seed += 0x9e3779b97f4a7c15ull;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      s = z ^ (z >> 31);
    }
  }
  uint64_t next() {
    const uint64_t r = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return r;
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  float normal() {  // Box-Muller
    const double u1 = std::max(uniform(), 1e-300), u2 = uniform();
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

// A SentencePiece vocabulary: <unk> <s> </s>, <0x00>..<0xFF>, then pieces by score.
struct Vocab {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;  // 1 normal, 2 unknown, 3 control, 6 byte
};

Vocab make_vocab(int64_t n_vocab) {
  Vocab v;
  auto add = [&](std::string t, float score, int32_t type) {
    v.tokens.push_back(std::move(t));
    v.scores.push_back(score);
    v.types.push_back(type);
  };
  add("<unk>", 0.0f, 2);
  add("<s>", 0.0f, 3);
  add("</s>", 0.0f, 3);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    add(buf, 0.0f, 6);
  }
  const std::string sp = "\xE2\x96\x81";  // ▁
  std::vector<std::string> pieces;
  for (char c = 'a'; c <= 'z'; ++c) pieces.push_back(std::string(1, c));
  for (char c = 'A'; c <= 'Z'; ++c) pieces.push_back(std::string(1, c));
  for (char c : std::string("0123456789.,!?'\"-:;()")) pieces.push_back(std::string(1, c));
  pieces.push_back(sp);
  static const char* kWords[] = {"the", "and", "a", "to", "was", "he", "she", "it", "of", "in", "that", "her",
                                 "his", "they", "said", "with", "on", "for", "you", "had", "day", "one", "time",
                                 "upon", "once", "there", "little", "girl", "boy", "play", "happy", "big", "very",
                                 "mom", "dog", "cat", "friend", "tree", "ball", "park", "named", "lily", "tom"};
  for (const char* w : kWords) pieces.push_back(sp + w);
  for (const char* w : kWords) pieces.push_back(w);
  for (char a = 'a'; a <= 'z'; ++a)
    for (char b = 'a'; b <= 'z'; ++b) pieces.push_back(std::string{a, b});
  for (char a = 'a'; a <= 'z'; ++a)
    for (char b = 'a'; b <= 'z'; ++b) pieces.push_back(sp + std::string{a, b});
  size_t i = 0;
  while (static_cast<int64_t>(v.tokens.size()) < n_vocab) {
    std::string p;
    if (i < pieces.size()) {
      p = pieces[i];
    } else {  // unique filler pieces, least likely
      p = sp + "x" + std::to_string(i);
    }
    add(p, -static_cast<float>(i), 1);
    ++i;
  }
  return v;
}

}  // namespace

std::vector<std::string> synth_presets() { return {"tiny", "llama-3.2-1b", "qwen3-0.6b", "gemma-2-2b"}; }
std::vector<std::string> synth_types() { return {"f32", "f16", "q8_0", "q4_k_m"}; }

Status write_synthetic_gguf(const SynthOptions& o, const std::string& path) {
  if (o.arch != "llama" && o.arch != "qwen3" && o.arch != "gemma2")
    return Error::invalid_argument("unknown --arch '{}' (llama, qwen3, gemma2)", o.arch);
  bool type_ok = false;
  for (const auto& t : synth_types()) type_ok |= t == o.type;
  if (!type_ok) return Error::invalid_argument("unknown --type '{}' (f32, f16, q8_0, q4_k_m)", o.type);
  ASSIGN_OR_RETURN(Preset p, find_preset(o.preset));
  const std::string& a = o.arch;
  const bool gemma = a == "gemma2";

  formats::GgufWriter w;
  TRY(w.add_string("general.architecture", a));
  TRY(w.add_string("general.name", fmt::format("rlx-synth {} {} {} seed {}", a, o.preset, o.type, o.seed)));
  TRY(w.add_u32(a + ".context_length", static_cast<uint32_t>(p.n_ctx)));
  TRY(w.add_u32(a + ".embedding_length", static_cast<uint32_t>(p.n_embd)));
  TRY(w.add_u32(a + ".block_count", static_cast<uint32_t>(p.n_layer)));
  TRY(w.add_u32(a + ".feed_forward_length", static_cast<uint32_t>(p.n_ff)));
  TRY(w.add_u32(a + ".attention.head_count", static_cast<uint32_t>(p.n_head)));
  TRY(w.add_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(p.n_head_kv)));
  TRY(w.add_u32(a + ".attention.key_length", static_cast<uint32_t>(p.head_dim)));
  TRY(w.add_u32(a + ".attention.value_length", static_cast<uint32_t>(p.head_dim)));
  TRY(w.add_u32(a + ".rope.dimension_count", static_cast<uint32_t>(p.head_dim)));
  TRY(w.add_f32(a + ".rope.freq_base", static_cast<float>(p.rope_theta)));
  TRY(w.add_f32(a + ".attention.layer_norm_rms_epsilon", gemma ? 1e-6f : 1e-5f));
  if (gemma) {
    TRY(w.add_f32(a + ".attn_logit_softcapping", 50.0f));
    TRY(w.add_f32(a + ".final_logit_softcapping", 30.0f));
    TRY(w.add_u32(a + ".attention.sliding_window", 4096));
  }
  const Vocab v = make_vocab(p.n_vocab);
  TRY(w.add_string("tokenizer.ggml.model", "llama"));
  TRY(w.add_string_array("tokenizer.ggml.tokens", v.tokens));
  TRY(w.add_f32_array("tokenizer.ggml.scores", v.scores));
  TRY(w.add_i32_array("tokenizer.ggml.token_type", v.types));
  TRY(w.add_u32("tokenizer.ggml.bos_token_id", 1));
  TRY(w.add_u32("tokenizer.ggml.eos_token_id", 2));
  TRY(w.add_u32("tokenizer.ggml.unknown_token_id", 0));
  TRY(w.add_bool("tokenizer.ggml.add_bos_token", true));
  TRY(w.add_bool("tokenizer.ggml.add_eos_token", false));

  // Tensors, in the usual order; dims are GGUF "ne" (innermost first).
  struct T {
    std::string name;
    int64_t rows, cols;  // rows = 0: a vector of cols
    int64_t layer;
  };
  std::vector<T> tensors{{"token_embd.weight", p.n_vocab, p.n_embd, -1}};
  const int64_t q = p.n_head * p.head_dim, kv = p.n_head_kv * p.head_dim;
  for (int64_t il = 0; il < p.n_layer; ++il) {
    auto n = [il](const char* s) { return fmt::format("blk.{}.{}", il, s); };
    tensors.push_back({n("attn_norm.weight"), 0, p.n_embd, il});
    tensors.push_back({n("attn_q.weight"), q, p.n_embd, il});
    tensors.push_back({n("attn_k.weight"), kv, p.n_embd, il});
    tensors.push_back({n("attn_v.weight"), kv, p.n_embd, il});
    tensors.push_back({n("attn_output.weight"), p.n_embd, q, il});
    if (a == "qwen3") {
      tensors.push_back({n("attn_q_norm.weight"), 0, p.head_dim, il});
      tensors.push_back({n("attn_k_norm.weight"), 0, p.head_dim, il});
    }
    if (gemma) tensors.push_back({n("post_attention_norm.weight"), 0, p.n_embd, il});
    tensors.push_back({n("ffn_norm.weight"), 0, p.n_embd, il});
    tensors.push_back({n("ffn_gate.weight"), p.n_ff, p.n_embd, il});
    tensors.push_back({n("ffn_up.weight"), p.n_ff, p.n_embd, il});
    tensors.push_back({n("ffn_down.weight"), p.n_embd, p.n_ff, il});
    if (gemma) tensors.push_back({n("post_ffw_norm.weight"), 0, p.n_embd, il});
  }
  tensors.push_back({"output_norm.weight", 0, p.n_embd, -1});

  std::vector<float> values;
  for (size_t ti = 0; ti < tensors.size(); ++ti) {
    const T& t = tensors[ti];
    StableHasher h;
    h.u64(o.seed);
    h.str(t.name);
    Rng rng(h.digest());
    const bool is_norm = t.rows == 0;
    const int64_t count = is_norm ? t.cols : t.rows * t.cols;
    values.resize(static_cast<size_t>(count));
    for (float& x : values) x = is_norm ? 1.0f + 0.02f * rng.normal() : 0.02f * rng.normal();
    if (is_norm) {
      TRY(w.add_tensor_f32(t.name, GgmlType::F32, {t.cols}, values));
    } else {
      ASSIGN_OR_RETURN(GgmlType type, mix_weight_type(o.type, t.name, t.rows, t.cols, t.layer, p.n_layer,
                                                       /*tied_embeddings=*/true));
      TRY(w.add_tensor_f32(t.name, type, {t.cols, t.rows}, values));
    }
    if (o.progress) o.progress(0.9 * static_cast<double>(ti + 1) / static_cast<double>(tensors.size()));
  }
  const std::string tmp = path + ".tmp";
  TRY(w.write_file(tmp));
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Error::io("cannot move '{}' to '{}': {}", tmp, path, ec.message());
  if (o.progress) o.progress(1.0);
  return {};
}

}  // namespace rlx::models
