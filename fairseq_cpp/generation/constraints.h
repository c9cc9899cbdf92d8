#pragma once
// Lexically constrained beam search (fairseq's LexicallyConstrainedBeamSearch and
// token_generation_constraints.py; Post & Vilar 2018, Hu et al. 2019): each output must contain
// every constraint, a sequence of target words. Each hypothesis carries a ConstraintState: how far
// it is through its sentence's constraints, either in the order given ("ordered": other words may
// come between constraints, not inside one) or in any order ("unordered": a trie of the
// constraints). A step's candidates are the 2K best, each hypothesis' best word and every word that
// would advance a hypothesis' constraints; they are grouped in banks by constraint words met, and
// the beam is dealt round-robin across the banks, fullest first, so that hypotheses that have met
// more of their constraints keep a place. </s> is allowed only to a hypothesis that met them all.
//
//   ConstraintState start = ConstraintState::start({{5, 6}, {9}}, /*ordered=*/true);
//   ConstraintState next = start.advance(5);  // next.bank() == 1, !next.finished()

#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/Tensor.h>

#include "fairseq_cpp/generation/search.h"

namespace fairseq_cpp::generation {

using Constraints = std::vector<std::vector<int64_t>>;  // one sentence's constraints: word sequences

class ConstraintState {
 public:
  // The state before any word of `constraints` (each sequence non-empty; none: finished at once).
  static ConstraintState start(const Constraints& constraints, bool ordered);

  // The state after the hypothesis appends `token`.
  ConstraintState advance(int64_t token) const;
  // The words that would take a constraint further (sorted).
  std::vector<int64_t> next_tokens() const;
  // Constraint words met so far (fairseq's bank).
  int64_t bank() const;
  // Whether every constraint is met.
  bool finished() const;

  struct Graph;  // the constraints, shared by every state of a sentence

 private:
  std::shared_ptr<const Graph> graph_;
  int64_t position_ = -1;           // ordered: the last constraint word met in the concatenation (-1 = none)
  int64_t node_ = 0;                // unordered: the trie node reached (0 = the root)
  std::vector<int32_t> completed_;  // unordered: per trie node, constraints completed there
  std::vector<int32_t> generated_;  // unordered: per trie node, visits on the current paths
};

struct ConstrainedCandidates {
  Candidates candidates;                             // (B, C) as beam_search_step's, C = min(2K, K * V - 1)
  std::vector<std::vector<ConstraintState>> states;  // [b][c]: the state after candidate c of sentence b
};

// One step of lexically constrained beam search. lprobs (B, K, V) this step's log-probabilities,
// cumulative (B, K) the hypotheses' scores (ignored at step 0, where hypothesis 0 is expanded);
// states[b][k] hypothesis k's state. With `block_eos`, </s> is -inf for hypotheses that have not
// met their constraints (in `lprobs`, which is modified). Candidates come in the order of the
// banks' round-robin, not by score.
ConstrainedCandidates constrained_beam_search_step(int64_t step, at::Tensor& lprobs, const at::Tensor& cumulative,
                                                   const std::vector<std::vector<ConstraintState>>& states, int64_t eos,
                                                   bool block_eos);

}  // namespace fairseq_cpp::generation
