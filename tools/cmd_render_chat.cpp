// `rlx render-chat --template FILE --messages FILE.json [--add-generation-prompt]
// [--bos S] [--eos S] [--tools FILE.json] [--now "YYYY-MM-DD HH:MM"]` renders a chat
// template (Jinja, as transformers' apply_chat_template does) and prints the rendering to
// stdout exactly, nothing added. A template error (a parse error, or the template's own
// raise_exception) prints its message and exits 1. External checks rely on this interface.
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "rlx/models/jinja.h"

namespace rlx::cli {
namespace {

struct RenderChatArgs {
  std::string template_path, messages_path, tools_path, bos, eos, now;
  bool add_generation_prompt = false;
};

Expected<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error::not_found("cannot open '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Error::io("cannot read '{}'", path);
  return ss.str();
}

Expected<nlohmann::ordered_json> read_json(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, read_file(path));
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Error::parse("{}: not valid JSON", path);
  return j;
}

// "YYYY-MM-DD" or "YYYY-MM-DD HH:MM[:SS]" as a local time.
Expected<std::tm> parse_now(const std::string& s) {
  std::tm tm{};
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0;
  const int n = std::sscanf(s.c_str(), "%4d-%2d-%2d %2d:%2d:%2d", &y, &mo, &d, &h, &mi, &sec);
  if ((n != 3 && n != 5 && n != 6) || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60)
    return Error::invalid_argument("--now: '{}' is not a date (expected YYYY-MM-DD or \"YYYY-MM-DD HH:MM\")", s);
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = sec;
  tm.tm_isdst = -1;
  std::mktime(&tm);  // fills in the weekday and the day of the year
  return tm;
}

int run_render_chat(const RenderChatArgs& a) {
  auto source = read_file(a.template_path);
  if (!source) return report(source.error());
  auto messages_json = read_json(a.messages_path);
  if (!messages_json) return report(messages_json.error());
  // The messages file holds the list, or an object with "messages" (and "tools").
  const nlohmann::ordered_json* messages = &*messages_json;
  if (messages_json->is_object() && messages_json->contains("messages")) messages = &(*messages_json)["messages"];
  if (!messages->is_array())
    return report(Error::invalid_argument("{}: expected a JSON list of messages", a.messages_path));

  jinja::ChatInputs inputs;
  auto m = jinja::Value::from_json(*messages);
  if (!m) return report(m.error().with_context(a.messages_path));
  inputs.messages = std::move(*m);
  if (!a.tools_path.empty()) {
    auto tools_json = read_json(a.tools_path);
    if (!tools_json) return report(tools_json.error());
    auto t = jinja::Value::from_json(*tools_json);
    if (!t) return report(t.error().with_context(a.tools_path));
    inputs.tools = std::move(*t);
  } else if (messages_json->is_object() && messages_json->contains("tools")) {
    auto t = jinja::Value::from_json((*messages_json)["tools"]);
    if (!t) return report(t.error().with_context(a.messages_path));
    inputs.tools = std::move(*t);
  }
  inputs.add_generation_prompt = a.add_generation_prompt;
  inputs.bos_token = a.bos;
  inputs.eos_token = a.eos;

  jinja::RenderOptions options;
  if (!a.now.empty()) {
    auto tm = parse_now(a.now);
    if (!tm) return report(tm.error());
    options.clock = [t = *tm] { return t; };
  }
  // Template errors (parse errors and the template's own raise_exception) exit 1.
  auto tmpl = jinja::parse(*source);
  if (!tmpl) {
    report(tmpl.error().with_context(a.template_path));
    return 1;
  }
  auto text = jinja::render_chat(*tmpl, inputs, options);
  if (!text) {
    report(text.error());
    return 1;
  }
  std::fwrite(text->data(), 1, text->size(), stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace

void add_render_chat_command(CLI::App& app, Runner* run) {
  auto* cmd = app.add_subcommand("render-chat", "Render a chat template (Jinja) with messages, as transformers does");
  auto a = std::make_shared<RenderChatArgs>();
  cmd->add_option("--template", a->template_path, "the template (.jinja text)")->required();
  cmd->add_option("--messages", a->messages_path, "JSON list of messages ({\"role\": ..., \"content\": ...})")
      ->required();
  cmd->add_flag("--add-generation-prompt", a->add_generation_prompt, "end with the opening of the assistant turn");
  cmd->add_option("--bos", a->bos, "bos_token (default empty)");
  cmd->add_option("--eos", a->eos, "eos_token (default empty)");
  cmd->add_option("--tools", a->tools_path, "JSON list of tool schemas");
  cmd->add_option("--now", a->now, "the date strftime_now() sees, \"YYYY-MM-DD HH:MM\" (default: now)");
  cmd->callback([run, a] { *run = [a] { return run_render_chat(*a); }; });
}

}  // namespace rlx::cli
