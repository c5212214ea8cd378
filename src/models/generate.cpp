// generate(): prefill the prompt once, then one decode step per sampled token.
#include "rlx/models/generate.h"

#include <chrono>

namespace rlx::models {
namespace {

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

Expected<GenerateResult> generate(LanguageModel& model, const Tokenizer& tokenizer,
                                  const std::vector<int32_t>& prompt_tokens, const GenerateOptions& options,
                                  const std::function<void(const std::string&)>& on_text) {
  TRY(options.sampling.validate());
  if (prompt_tokens.empty()) return Error::invalid_argument("generate: the prompt has no tokens");
  if (options.max_tokens < 0) return Error::invalid_argument("generate: max_tokens must be >= 0");
  GenerateResult r;
  r.prompt_tokens = prompt_tokens;
  model.reset();
  Sampler sampler(options.sampling);
  StreamDecoder stream(tokenizer);
  std::vector<int32_t> history = prompt_tokens;

  auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(std::vector<float> logits, model.forward(prompt_tokens, /*all_rows=*/false));
  r.prefill_ms = ms_since(t0);

  auto t1 = std::chrono::steady_clock::now();
  std::string pending;  // text held back while it may still become a stop string
  for (int32_t step = 0; step < options.max_tokens; ++step) {
    const int32_t next = sampler.sample(logits, history);
    r.tokens.push_back(next);
    history.push_back(next);
    if (options.stop_at_eos && tokenizer.is_end_of_generation(next)) break;
    ASSIGN_OR_RETURN(std::string piece, stream.push(next));
    pending += piece;
    bool stopped = false;
    for (const std::string& s : options.stop) {
      const size_t at = pending.find(s);
      if (!s.empty() && at != std::string::npos) {
        pending.resize(at);
        stopped = true;
      }
    }
    // Emit what can no longer start a stop string.
    size_t keep = 0;
    for (const std::string& s : options.stop)
      for (size_t k = std::min(s.size() - (s.empty() ? 0 : 1), pending.size()); k > keep; --k)
        if (pending.compare(pending.size() - k, k, s, 0, k) == 0) {
          keep = k;
          break;
        }
    if (stopped) keep = 0;
    const std::string out = pending.substr(0, pending.size() - keep);
    pending.erase(0, out.size());
    r.text += out;
    if (on_text && !out.empty()) on_text(out);
    if (stopped) break;
    if (step + 1 == options.max_tokens) break;
    if (model.n_past() >= model.context_length()) break;
    ASSIGN_OR_RETURN(logits, model.forward(std::span<const int32_t>(&next, 1), false));
  }
  std::string tail = pending + stream.flush();
  r.text += tail;
  if (on_text && !tail.empty()) on_text(tail);
  r.decode_ms = ms_since(t1);
  return r;
}

}  // namespace rlx::models
