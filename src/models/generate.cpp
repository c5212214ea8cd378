// generate(): prefill the prompt once, then one decode step per sampled token.
#include "rlx/models/generate.h"

#include <chrono>

#include "rlx/models/text_stream.h"

namespace rlx::models {
namespace {

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

Status check_options(const GenerateOptions& options) {
  TRY(options.sampling.validate());
  if (options.max_tokens < 0) return Error::invalid_argument("generate: max_tokens must be >= 0");
  return {};
}

}  // namespace

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::kLength: return "length";
    case StopReason::kEndOfText: return "end of text";
    case StopReason::kStopString: return "stop string";
    case StopReason::kContextFull: return "context full";
  }
  return "?";
}

Expected<GenerateResult> generate(LanguageModel& model, const Tokenizer& tokenizer,
                                  const std::vector<int32_t>& prompt_tokens, const GenerateOptions& options,
                                  const std::function<void(const std::string&)>& on_text) {
  TRY(check_options(options));
  if (prompt_tokens.empty()) return Error::invalid_argument("generate: the prompt has no tokens");
  GenerateResult r;
  r.prompt_tokens = prompt_tokens;
  model.reset();
  Sampler sampler(options.sampling);
  TextStream text(tokenizer, options.stop);
  std::vector<int32_t> history = prompt_tokens;

  // Without penalties the host needs no logits: the executable picks the token, greedy
  // or sampled with a draw from the sampler's RNG (one int copied back per step instead
  // of n_vocab floats). Sampling on the device needs top-k on (at most kMaxSampleTopK).
  const SamplingOptions& so = options.sampling;
  const bool greedy = so.temperature <= 0.0f;
  const bool on_device =
      !so.has_penalties() && (greedy || (so.top_k >= 1 && so.top_k <= ir::kMaxSampleTopK));
  auto pick = [&](std::span<const int32_t> tokens) -> Expected<int32_t> {
    if (greedy) return model.forward_greedy(tokens);
    return model.forward_sample(tokens, so.filter(), sampler.next_draw());
  };
  std::vector<float> logits;
  int32_t picked = 0;
  const double compiled_before = model.compile_stats().compile_ms;
  TRY(model.prepare_generation(static_cast<int64_t>(prompt_tokens.size()),
                               !on_device ? LanguageModel::Output::kLogits
                               : greedy   ? LanguageModel::Output::kGreedy
                                          : LanguageModel::Output::kSampled));
  r.compile_ms = model.compile_stats().compile_ms - compiled_before;
  auto t0 = std::chrono::steady_clock::now();
  if (on_device) {
    ASSIGN_OR_RETURN(picked, pick(prompt_tokens));
  } else {
    ASSIGN_OR_RETURN(logits, model.forward(prompt_tokens, /*all_rows=*/false));
  }
  r.prefill_ms = ms_since(t0);

  auto t1 = std::chrono::steady_clock::now();
  for (int32_t step = 0; step < options.max_tokens; ++step) {
    if (!on_device) TRY(check_logits_finite(logits, model.n_past() - 1));
    const int32_t next = on_device ? picked : sampler.sample(logits, history);
    r.tokens.push_back(next);
    history.push_back(next);
    if (options.stop_at_eos && tokenizer.is_end_of_generation(next)) {
      r.stop = StopReason::kEndOfText;
      break;
    }
    bool stopped = false;
    ASSIGN_OR_RETURN(std::string out, text.push(next, &stopped));
    r.text += out;
    if (on_text && !out.empty()) on_text(out);
    if (stopped) {
      r.stop = StopReason::kStopString;
      break;
    }
    if (step + 1 == options.max_tokens) break;
    if (model.n_past() >= model.context_length()) {
      r.stop = StopReason::kContextFull;
      break;
    }
    if (options.interrupt_check) TRY(options.interrupt_check());
    if (on_device) {
      ASSIGN_OR_RETURN(picked, pick(std::span<const int32_t>(&next, 1)));
    } else {
      ASSIGN_OR_RETURN(logits, model.forward(std::span<const int32_t>(&next, 1), false));
    }
  }
  std::string tail = text.finish();
  r.text += tail;
  if (on_text && !tail.empty()) on_text(tail);
  r.decode_ms = ms_since(t1);
  return r;
}

Expected<std::vector<GenerateResult>> generate_batch(LanguageModel& model, const Tokenizer& tokenizer,
                                                     const std::vector<std::vector<int32_t>>& prompts,
                                                     const GenerateOptions& options) {
  TRY(check_options(options));
  const size_t n = prompts.size();
  if (static_cast<int64_t>(n) != model.batch())
    return Error::invalid_argument("generate_batch: {} prompts for a model loaded with batch {}", n, model.batch());
  for (size_t b = 0; b < n; ++b)
    if (prompts[b].empty()) return Error::invalid_argument("generate_batch: prompt {} has no tokens", b);
  model.reset();
  std::vector<GenerateResult> rs(n);
  std::vector<Sampler> samplers(n, Sampler(options.sampling));
  std::vector<TextStream> texts;
  std::vector<std::vector<int32_t>> history = prompts;
  std::vector<bool> done(n, options.max_tokens == 0);
  for (size_t b = 0; b < n; ++b) {
    rs[b].prompt_tokens = prompts[b];
    texts.emplace_back(tokenizer, options.stop);
  }
  auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(std::vector<std::vector<float>> logits, model.forward_batch(prompts, /*all_rows=*/false));
  const double prefill_ms = ms_since(t0);
  auto t1 = std::chrono::steady_clock::now();
  std::vector<std::vector<int32_t>> feed(n);
  while (true) {
    bool any = false;
    for (size_t b = 0; b < n; ++b) {
      feed[b].clear();
      if (done[b]) continue;
      TRY(check_logits_finite(logits[b], model.n_past(static_cast<int64_t>(b)) - 1));
      const int32_t next = samplers[b].sample(logits[b], history[b]);
      rs[b].tokens.push_back(next);
      history[b].push_back(next);
      bool stopped = options.stop_at_eos && tokenizer.is_end_of_generation(next);
      if (stopped) {
        rs[b].stop = StopReason::kEndOfText;
      } else {
        ASSIGN_OR_RETURN(std::string out, texts[b].push(next, &stopped));
        rs[b].text += out;
        if (stopped) rs[b].stop = StopReason::kStopString;
      }
      // As generate(): the token limit (the default stop) before a full context.
      const bool at_limit = static_cast<int32_t>(rs[b].tokens.size()) >= options.max_tokens;
      const bool full = model.n_past(static_cast<int64_t>(b)) >= model.context_length();
      if (!stopped && !at_limit && full) rs[b].stop = StopReason::kContextFull;
      if (stopped || at_limit || full) {
        done[b] = true;
        continue;
      }
      feed[b].push_back(next);
      any = true;
    }
    if (!any) break;
    if (options.interrupt_check) TRY(options.interrupt_check());
    ASSIGN_OR_RETURN(logits, model.forward_batch(feed, false));
  }
  const double decode_ms = ms_since(t1);
  for (size_t b = 0; b < n; ++b) {
    rs[b].text += texts[b].finish();
    rs[b].prefill_ms = prefill_ms;
    rs[b].decode_ms = decode_ms;
  }
  return rs;
}

}  // namespace rlx::models
