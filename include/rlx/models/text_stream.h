// Generated tokens to final text: a StreamDecoder (complete UTF-8 characters only) plus
// stop strings, held back while the text may still turn into one. Shared by generate()
// and the server's scheduler, so both stop at the same place.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rlx/base/status.h"
#include "rlx/models/tokenizer.h"

namespace rlx::models {

class TextStream {
 public:
  /// `tokenizer` must outlive the stream; empty stop strings are ignored.
  TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop);

  /// Text made final by `token`; sets *stopped when a stop string appeared (the text
  /// before it is returned, the stop string never). An id past the tokenizer's last
  /// token (a model with padded output rows) adds no text; a negative id is an error.
  Expected<std::string> push(int32_t token, bool* stopped);
  /// What is left once generation ends without a stop string (held-back text and an
  /// incomplete UTF-8 tail as U+FFFD).
  std::string finish();

 private:
  StreamDecoder stream_;
  int32_t n_tokens_ = 0;  ///< the tokenizer's tokens (ids past them have no text)
  std::vector<std::string> stop_;
  std::string pending_;
};

}  // namespace rlx::models
