#pragma once
// Beam search over a list of batches on every CPU core.
//
// One decoding step of one batch is a chain of small operations (a few hundred rows by a 256-wide
// model): split over two intra-op threads, each GEMM and each softmax pays a hand-over between
// threads, and most other operations run on one core while the other waits. search_batches
// instead gives each of `workers` threads its own share of the sentences, searched with one
// intra-op thread and one BLAS thread: a batch's rows are dealt out in turn to `workers` parts
// (beam search treats every sentence on its own, so the hypotheses are those of the whole batch),
// the parts of all batches form one queue, and the caller receives each batch's hypotheses, in
// batch order, as soon as its parts are done. Sampling keeps whole batches (its random stream
// is drawn per batch), and so does match_source_len (the batch's longest source bounds every
// output); one worker, fewer parts than workers, or a model off the CPU: the batches one by one on
// all intra-op threads.
//
//   search_batches(generator, model, batches, /*workers=*/2, [&](size_t i, Hypotheses&& h) { ... });

#include <cstddef>
#include <functional>
#include <vector>

#include <ATen/Tensor.h>

#include "fairseq_cpp/generation/sequence_generator.h"

namespace fairseq_cpp::generation {

struct SearchBatch {
  at::Tensor src_tokens;     // (B, S) as collated
  at::Tensor src_lengths;    // (B)
  at::Tensor prefix_tokens;  // (B, P) or undefined
  std::vector<Constraints> constraints;  // per sentence (lexically constrained search), or empty
};

using Hypotheses = std::vector<std::vector<Hypothesis>>;  // per sentence, best first

// Calls `done(i, hypotheses of batches[i])` on the calling thread for i = 0, 1, ... in order. An
// exception in a worker or in `done` stops the workers and is rethrown here.
void search_batches(const SequenceGenerator& generator, models::EncoderDecoderModel& model,
                    const std::vector<SearchBatch>& batches, int workers,
                    const std::function<void(size_t, Hypotheses&&)>& done);

}  // namespace fairseq_cpp::generation
