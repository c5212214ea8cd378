// libFuzzer target for the Jinja renderer (chat templates): arbitrary bytes are parsed
// as a template and, when they parse, rendered with a chat conversation (messages with
// tool calls, tools, bos/eos) under small budgets. Checks: no crash, no leak, no hang
// (every loop is bounded by the budgets), errors carry a message, and rendering is
// deterministic: one input in four (picked by a hash of its bytes, so the same input
// always gets the same checks) is rendered a second time and must give the same result.
// Rendering dominates the time of an input; checking a quarter of them keeps the
// determinism check and gives the renderer itself most of a long run's inputs.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "rlx/models/jinja.h"

namespace {

constexpr const char* kConversation = R"JSON({
  "messages": [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hi \u00e9\u732b \"q\" <t>\n  x"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "abcdefghi", "type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
    {"role": "tool", "tool_call_id": "abcdefghi", "content": "{\"temp\": 21.5}"},
    {"role": "assistant", "content": "<think>x</think>Sunny."}
  ],
  "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City"},
      "days": {"type": ["integer", "null"]}}, "required": ["city"]}}}],
  "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "nums": [3, 1.5, -2, true]
})JSON";

const rlx::jinja::Value& variables() {
  static const rlx::jinja::Value vars = [] {
    auto v = rlx::jinja::Value::from_json(nlohmann::ordered_json::parse(kConversation));
    if (!v) std::abort();  // the built-in conversation is valid: a failure is a bug
    return *v;
  }();
  return vars;
}

std::tm fixed_clock() {
  std::tm tm{};
  tm.tm_year = 126;
  tm.tm_mon = 10;
  tm.tm_mday = 27;
  tm.tm_hour = 12;
  return tm;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  rlx::jinja::ParseOptions po;
  po.max_source_bytes = 1 << 16;
  auto t = rlx::jinja::parse(source, po);
  if (!t) {
    if (t.error().message().empty()) std::abort();
    return 0;
  }
  rlx::jinja::RenderOptions ro;
  ro.max_steps = 200'000;
  ro.max_output_bytes = 1 << 20;
  ro.max_depth = 200;
  ro.clock = fixed_clock;
  const auto first = t->render(variables(), ro);
  if (first ? first->size() > ro.max_output_bytes : first.error().message().empty()) std::abort();
  uint32_t hash = 2166136261u;  // FNV-1a of the input
  for (size_t i = 0; i < size; ++i) hash = (hash ^ data[i]) * 16777619u;
  if (hash % 4 != 0) return 0;
  const auto second = t->render(variables(), ro);
  if (first.has_value() != second.has_value()) std::abort();
  if (first ? *first != *second : first.error().message() != second.error().message()) std::abort();
  return 0;
}
