// Helpers shared by the tokenizer unit tests.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "rlx/models/tokenizer.h"

namespace rlx::test {

inline const std::string kSp = "\xE2\x96\x81";  // ▁

/// make_tokenizer, with a test failure naming the error when it fails (then null).
inline std::unique_ptr<Tokenizer> make(const VocabSpec& spec) {
  auto t = make_tokenizer(spec);
  EXPECT_TRUE(t.has_value()) << (t ? "" : t.error().to_string());
  return t ? std::move(*t) : nullptr;
}

}  // namespace rlx::test
