// libFuzzer target for the Hugging Face config.json readers (hf_config.cpp, rope_config.cpp,
// media_config.cpp): arbitrary bytes are written to a config.json in a private temp
// folder and read by config_from_hf, media_config_from_hf, sam_config_from_hf and
// hf_model_type, which take a path. Any input must give a config or an error; an accepted config must validate.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "fuzz_temp_dir.h"
#include "rlx/models/media_encoder.h"
#include "rlx/models/model_config.h"
#include "rlx/models/sam.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const rlx::fuzz::TempDir dir("rlx_fuzz_hf_config");
  const std::string file = (dir.path / "config.json").string();
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out) std::abort();
  }
  if (rlx::Expected<rlx::models::ModelConfig> c = rlx::models::config_from_hf(file); c.has_value()) {
    if (!c->validate().ok()) __builtin_trap();
    volatile size_t sink = c->summary().size();
    (void)sink;
  }
  if (rlx::Expected<rlx::models::MediaConfig> m = rlx::models::media_config_from_hf(file); m.has_value()) {
    if (!m->validate().ok()) __builtin_trap();
    volatile int64_t sink = m->frames(16000);  // one second of 16 kHz audio through the conv stack
    (void)sink;
  }
  if (rlx::Expected<rlx::models::SamConfig> sam = rlx::models::sam_config_from_hf(file); sam.has_value()) {
    if (!sam->validate().ok()) __builtin_trap();
    volatile int64_t sink = sam->grid() * sam->mask_side();
    (void)sink;
  }
  if (rlx::Expected<std::string> type = rlx::models::hf_model_type(dir.path.string()); type.has_value()) {
    volatile size_t sink = type->size();
    (void)sink;
  }
  return 0;
}
