#pragma once
// The metrics behind make_scorer (scorer.h); each file implements one.

#include <memory>

#include "fairseq_cpp/scoring/scorer.h"

namespace fairseq_cpp::scoring {

std::unique_ptr<Scorer> make_bleu(const ScoringOptions& options);
std::unique_ptr<Scorer> make_chrf(const ScoringOptions& options, int word_order);
std::unique_ptr<Scorer> make_ter(const ScoringOptions& options);

}  // namespace fairseq_cpp::scoring
