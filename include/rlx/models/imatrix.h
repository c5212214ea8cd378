// Importance matrices (llama.cpp's imatrix): for each weight matrix of a model, the sum
// over the tokens of a calibration text of every input column's x², from which the
// quantizers weigh each column's rounding error (formats::quantize_row_weighted).
// compute_imatrix runs the model and collects them; the files are llama.cpp's: the GGUF
// form `llama-imatrix` writes today (tensors <weight>.in_sum2 and <weight>.counts), and
// its older binary .dat form for reading.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rlx/base/status.h"
#include "rlx/runtime/device.h"

namespace rlx::models {

/// One weight's statistics: per input column, the sum of x² over the tokens counted.
/// A stacked mixture-of-experts weight has one such matrix per expert (llama.cpp's files
/// keep them apart); a dense weight has one.
struct ImatrixEntry {
  std::vector<double> sum_sq;   ///< matrices x columns, matrix-major
  std::vector<int64_t> counts;  ///< tokens per matrix
  int64_t columns() const { return counts.empty() ? 0 : static_cast<int64_t>(sum_sq.size() / counts.size()); }
};

struct Imatrix {
  /// By weight name as GGUF spells it ("blk.0.attn_q.weight").
  std::map<std::string, ImatrixEntry, std::less<>> entries;
  int64_t chunk_count = 0;            ///< chunks of text the sums cover
  int64_t chunk_size = 0;             ///< tokens per chunk
  std::vector<std::string> datasets;  ///< the calibration text(s), for the record

  /// The mean x² of each input column of `weight`'s matrix `matrix` (an expert of a
  /// stacked weight; 0 for a dense one): the importance the quantizers take. Empty when
  /// the weight has no entry, no such matrix, or no tokens.
  std::vector<float> importance(std::string_view weight, int64_t matrix = 0) const;
  /// Adds `other`'s sums and counts (same columns per weight; a weight of either side only
  /// is kept), its chunks and datasets; an error names a weight whose widths differ.
  Status merge(const Imatrix& other);
};

struct ImatrixOptions {
  int64_t chunk = 512;     ///< tokens per run (each run starts from an empty context)
  int64_t max_chunks = 0;  ///< 0: every whole chunk of the text
  int threads = 0;         ///< CPU threads (0: default)
  Device device = Device::cpu();
  std::string dataset;  ///< recorded in the file (the text's name)
  /// After each chunk: (chunks done, chunks in all, perplexity of the chunks so far over
  /// the second half of each, as llama.cpp's imatrix prints it).
  std::function<void(int64_t, int64_t, double)> progress;
};

/// Runs the decoder at `model_path` (a GGUF file or a Hugging Face folder) over `tokens`
/// (already tokenized; the caller decides on BOS) cut into chunks of options.chunk, each
/// chunk's first token replaced by `bos` when bos >= 0, and sums x² of the input of every
/// linear product whose weight is a model parameter (attention, FFN, delta-net and router
/// projections, the LM head). A mixture of experts' stacked expert matrices are not
/// covered (their rows see only routed tokens). Errors: fewer tokens than one chunk, an
/// encoder, a model that does not load.
Expected<Imatrix> compute_imatrix(const std::string& model_path, std::span<const int32_t> tokens, int32_t bos,
                                  const ImatrixOptions& options);

/// Writes llama.cpp's imatrix GGUF: general.type "imatrix", imatrix.datasets,
/// imatrix.chunk_count, imatrix.chunk_size, and per weight the f32 tensors
/// <weight>.in_sum2 [columns, matrices] and <weight>.counts [1, matrices].
Status write_imatrix(const Imatrix& imatrix, const std::string& path);

/// Reads an imatrix in either llama.cpp form: GGUF (as write_imatrix writes it, with
/// [columns, matrices] tensors for stacked experts) or the older binary .dat (entries of
/// name, calls and per-column mean x² times calls). Errors name the file and the entry
/// that is malformed.
Expected<Imatrix> read_imatrix(const std::string& path);

}  // namespace rlx::models
