// TextStream: streamed token text with stop strings (see rlx/models/text_stream.h).
#include "rlx/models/text_stream.h"

#include <algorithm>

namespace rlx::models {

TextStream::TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop)
    : stream_(tokenizer), n_tokens_(tokenizer.n_tokens()) {
  for (std::string& s : stop)
    if (!s.empty()) stop_.push_back(std::move(s));
}

Expected<std::string> TextStream::push(int32_t token, bool* stopped) {
  // A model may have more output rows than its tokenizer has tokens (Hugging Face
  // checkpoints pad the embedding, e.g. 151,936 rows for 151,665 tokens): such an id,
  // if ever picked, has no text.
  std::string piece;
  if (token < n_tokens_) {  // (a negative id goes on to the decoder's error)
    ASSIGN_OR_RETURN(piece, stream_.push(token));
  }
  pending_ += piece;
  *stopped = false;
  for (const std::string& s : stop_) {
    const size_t at = pending_.find(s);
    if (at != std::string::npos) {
      pending_.resize(at);
      *stopped = true;
    }
  }
  // Emit what can no longer start a stop string.
  size_t keep = 0;
  if (!*stopped)
    for (const std::string& s : stop_)
      for (size_t k = std::min(s.size() - 1, pending_.size()); k > keep; --k)
        if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
          keep = k;
          break;
        }
  std::string out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, out.size());
  return out;
}

std::string TextStream::finish() {
  std::string tail = pending_ + stream_.flush();
  pending_.clear();
  return tail;
}

}  // namespace rlx::models
