// `rlx embed --bench`: encoder throughput (texts/s, tokens/s, GFLOP/s) per sequence
// length and batch size, next to the machine's compute limit measured in the same
// process (CPU: the f32 FMA peak of machine_limits.h; CUDA: large f32 matmuls run
// through the same backend on device-resident operands, i.e. cuBLAS).
#pragma once

#include <cstdint>
#include <vector>

#include "rlx/models/encoder.h"

namespace rlx::cli {

struct EmbedBenchOptions {
  std::vector<int64_t> seqs{32, 128, 512};
  std::vector<int64_t> batches{1, 32};
  Device device = Device::cpu();
  int threads = 0;
  double min_seconds = 1.0;  ///< timed runs per case last at least this long (after one warm-up run)
  bool json = false;         ///< one JSON object on stdout instead of the table
};

/// Forward FLOPs of one sequence of `len` tokens (projections, FFN and attention).
double encoder_flops(const models::ModelConfig& c, int64_t len);

/// Runs every (seq, batch) case on random token ids and prints the results; returns the exit code.
int run_embed_bench(models::EncoderModel& model, const EmbedBenchOptions& options);

}  // namespace rlx::cli
