#include "fairseq_cpp/generation/constraints.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <utility>

#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::generation {

struct ConstraintState::Graph {
  bool ordered = true;
  // ordered: the constraints one after another, and whether each word ends its constraint
  std::vector<int64_t> sequence;
  std::vector<bool> endpoints;
  // unordered: a trie of the constraints; node 0 is the root
  struct Node {
    int64_t parent = -1;
    int32_t terminal = 0;         // constraints that end here (a constraint given twice counts twice)
    int32_t num_constraints = 0;  // constraints that end here or below
    std::map<int64_t, int64_t> children;
  };
  std::vector<Node> nodes;
};

ConstraintState ConstraintState::start(const Constraints& constraints, bool ordered) {
  auto graph = std::make_shared<Graph>();
  graph->ordered = ordered;
  graph->nodes.emplace_back();
  for (const auto& c : constraints) {
    if (c.empty()) raise<UserError>("a constraint must hold at least one word");
    for (size_t i = 0; i < c.size(); ++i) {
      graph->sequence.push_back(c[i]);
      graph->endpoints.push_back(i + 1 == c.size());
    }
    int64_t node = 0;
    for (int64_t token : c) {
      auto found = graph->nodes[static_cast<size_t>(node)].children.find(token);
      if (found == graph->nodes[static_cast<size_t>(node)].children.end()) {
        graph->nodes.emplace_back();
        graph->nodes.back().parent = node;
        found = graph->nodes[static_cast<size_t>(node)].children.emplace(token, graph->nodes.size() - 1).first;
      }
      node = found->second;
    }
    ++graph->nodes[static_cast<size_t>(node)].terminal;
    for (int64_t n = node; n >= 0; n = graph->nodes[static_cast<size_t>(n)].parent)
      ++graph->nodes[static_cast<size_t>(n)].num_constraints;
  }
  ConstraintState state;
  state.completed_.assign(graph->nodes.size(), 0);
  state.generated_.assign(graph->nodes.size(), 0);
  state.graph_ = std::move(graph);
  return state;
}

int64_t ConstraintState::bank() const {
  if (graph_->ordered) return position_ + 1;
  return std::accumulate(generated_.begin(), generated_.end(), int64_t{0});
}

bool ConstraintState::finished() const {
  if (graph_->ordered) return position_ + 1 == static_cast<int64_t>(graph_->sequence.size());
  const auto& here = graph_->nodes[static_cast<size_t>(node_)];
  const int64_t in_final = here.terminal > 0 && completed_[static_cast<size_t>(node_)] < here.terminal ? 1 : 0;
  const int64_t completed = std::accumulate(completed_.begin(), completed_.end(), int64_t{0}) + in_final;
  return graph_->nodes[0].num_constraints == completed;
}

std::vector<int64_t> ConstraintState::next_tokens() const {
  std::set<int64_t> out;
  if (graph_->ordered) {
    if (position_ > 0) out.insert(graph_->sequence[0]);  // fairseq: a restart from the second word on
    if (!finished()) out.insert(graph_->sequence[static_cast<size_t>(position_ + 1)]);
  } else {
    for (const auto& [token, child] : graph_->nodes[0].children) out.insert(token);
    if (node_ != 0)
      for (const auto& [token, child] : graph_->nodes[static_cast<size_t>(node_)].children) out.insert(token);
  }
  return {out.begin(), out.end()};
}

ConstraintState ConstraintState::advance(int64_t token) const {
  ConstraintState next = *this;
  const Graph& g = *graph_;
  if (g.ordered) {
    const auto n = static_cast<int64_t>(g.sequence.size());
    if (finished()) return next;  // anything goes
    if (g.sequence[static_cast<size_t>(position_ + 1)] == token) {
      ++next.position_;
    } else if (position_ < 0 || g.endpoints[static_cast<size_t>(position_)]) {
      // between constraints: any word (fairseq reads endpoints[-1], the last one, at the start)
    } else {
      next.position_ = n > 0 && token == g.sequence[0] ? 0 : -1;  // inside one: start over
    }
    return next;
  }
  auto move_to = [&](int64_t node) {
    next.node_ = node;
    if (node != 0) ++next.generated_[static_cast<size_t>(node)];
  };
  auto open = [&](int64_t child) {
    return generated_[static_cast<size_t>(child)] < g.nodes[static_cast<size_t>(child)].num_constraints;
  };
  // Off the trie: a constraint that the path so far ends (its longest) counts as completed, and the
  // visits of the path are taken back up to it.
  auto rewind = [&] {
    for (int64_t n = node_; n != 0; n = g.nodes[static_cast<size_t>(n)].parent) {
      const auto& node = g.nodes[static_cast<size_t>(n)];
      if (node.terminal > 0 && completed_[static_cast<size_t>(n)] < node.terminal) {
        ++next.completed_[static_cast<size_t>(n)];
        return;
      }
      --next.generated_[static_cast<size_t>(n)];
    }
  };
  const auto& here = g.nodes[static_cast<size_t>(node_)].children;
  if (auto child = here.find(token); child != here.end() && open(child->second)) {
    move_to(child->second);
    return next;
  }
  const auto& root = g.nodes[0].children;
  auto child = root.find(token);
  move_to(child != root.end() && open(child->second) ? child->second : 0);
  rewind();
  return next;
}

namespace {

struct Candidate {
  float score;
  int64_t token, beam;
  ConstraintState state;
  int64_t bank = 0, rank_in_bank = 0;
};

// A score for sorting: NaN as -inf.
float sortable(float s) { return std::isnan(s) ? -std::numeric_limits<float>::infinity() : s; }

// Sentence b's candidates: sorted by bank (most constraint words met first), then score, equal
// scores by hypothesis and word (topk's order of ties differs between the CPU and CUDA, and a tie
// at the beam's edge decided which hypothesis ended); without repeats of a (hypothesis, word);
// dealt round-robin over the banks; the first `keep`.
std::vector<Candidate> arrange(std::vector<Candidate> all, size_t keep) {
  for (auto& c : all) c.bank = c.state.bank();
  std::stable_sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    if (a.bank != b.bank) return a.bank > b.bank;
    const float x = sortable(a.score), y = sortable(b.score);
    if (x != y) return x > y;
    return a.beam != b.beam ? a.beam < b.beam : a.token < b.token;
  });
  std::vector<Candidate> unique;
  std::set<std::pair<int64_t, int64_t>> seen;
  for (auto& c : all)
    if (seen.emplace(c.beam, c.token).second) unique.push_back(std::move(c));
  for (size_t i = 0; i < unique.size(); ++i)
    unique[i].rank_in_bank = i > 0 && unique[i - 1].bank == unique[i].bank ? unique[i - 1].rank_in_bank + 1 : 0;
  std::stable_sort(unique.begin(), unique.end(), [](const Candidate& a, const Candidate& b) {
    return a.rank_in_bank != b.rank_in_bank ? a.rank_in_bank < b.rank_in_bank : a.bank > b.bank;
  });
  if (unique.size() > keep) unique.erase(unique.begin() + static_cast<std::ptrdiff_t>(keep), unique.end());
  return unique;
}

}  // namespace

ConstrainedCandidates constrained_beam_search_step(int64_t step, at::Tensor& lprobs, const at::Tensor& cumulative,
                                                   const std::vector<std::vector<ConstraintState>>& states, int64_t eos,
                                                   bool block_eos) {
  const int64_t B = lprobs.size(0), K = lprobs.size(1), V = lprobs.size(2);
  if (block_eos && step > 0) {
    at::Tensor open = torch::zeros({B, K}, torch::kBool);
    auto is_open = open.accessor<bool, 2>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t k = 0; k < K; ++k)
        is_open[b][k] = !states[static_cast<size_t>(b)][static_cast<size_t>(k)].finished();
    lprobs.select(2, eos).masked_fill_(open.to(lprobs.device()), -std::numeric_limits<float>::infinity());
  }
  const Candidates top = beam_search_step(step, lprobs, cumulative);
  const int64_t C = top.scores.size(1);
  // The step's scores on the CPU: the hypotheses' (step 0: the first's) cumulative log-probabilities.
  at::Tensor total = step == 0 ? lprobs.narrow(1, 0, 1) : lprobs + cumulative.unsqueeze(-1);
  total = total.to(torch::kCPU, torch::kFloat32).contiguous();
  const at::Tensor top_scores = top.scores.to(torch::kCPU).contiguous(), top_tokens = top.tokens.to(torch::kCPU),
                   top_beams = top.beams.to(torch::kCPU), best_words = total.argmax(2);  // (B, K or 1)
  const auto score_of = top_scores.accessor<float, 2>();
  const auto token_of = top_tokens.accessor<int64_t, 2>(), beam_of = top_beams.accessor<int64_t, 2>();
  const auto best = best_words.accessor<int64_t, 2>();
  const int64_t rows = total.size(1);
  ConstrainedCandidates out;
  at::Tensor scores = torch::empty({B, C}, torch::kFloat32), tokens = torch::empty({B, C}, torch::kInt64),
             beams = torch::empty({B, C}, torch::kInt64);
  auto out_score = scores.accessor<float, 2>();
  auto out_token = tokens.accessor<int64_t, 2>(), out_beam = beams.accessor<int64_t, 2>();
  for (int64_t b = 0; b < B; ++b) {
    const auto& mine = states[static_cast<size_t>(b)];
    const float* row = total.data_ptr<float>() + b * rows * V;
    std::vector<Candidate> all;
    auto add = [&](float score, int64_t token, int64_t beam) {
      all.push_back({score, token, beam, mine[static_cast<size_t>(beam)].advance(token)});
    };
    for (int64_t c = 0; c < C; ++c) add(score_of[b][c], token_of[b][c], beam_of[b][c]);
    for (int64_t k = 0; k < rows; ++k) {
      if (step > 0) add(row[k * V + best[b][k]], best[b][k], k);
      for (int64_t t : mine[static_cast<size_t>(k)].next_tokens())
        if (t >= 0 && t < V) add(row[k * V + t], t, k);
    }
    std::vector<Candidate> kept = arrange(std::move(all), static_cast<size_t>(C));
    if (static_cast<int64_t>(kept.size()) < C)  // the top C alone are C distinct (hypothesis, word) pairs
      raise<OperationalError>("constrained beam search: {} candidates for {} places", kept.size(), C);
    std::vector<ConstraintState> next;
    for (size_t c = 0; c < kept.size(); ++c) {
      out_score[b][static_cast<int64_t>(c)] = kept[c].score;
      out_token[b][static_cast<int64_t>(c)] = kept[c].token;
      out_beam[b][static_cast<int64_t>(c)] = kept[c].beam;
      next.push_back(kept[c].state);
    }
    out.states.push_back(std::move(next));
  }
  out.candidates = {scores.to(lprobs.device()), tokens.to(lprobs.device()), beams.to(lprobs.device())};
  return out;
}

}  // namespace fairseq_cpp::generation
