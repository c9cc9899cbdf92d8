#include "fairseq_cpp/distributed/gang.h"

#include <string>
#include <vector>

#include <ATen/ATen.h>

#include <algorithm>

namespace fairseq_cpp::distributed {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::mean:
      return "mean";
    case ReduceOp::min:
      return "min";
    case ReduceOp::max:
      return "max";
    case ReduceOp::product:
      return "product";
  }
  return "?";
}

bool broadcast_flag(Gang& gang, bool flag, int root) {
  at::Tensor t = at::full({1}, flag ? 1 : 0, at::TensorOptions().dtype(at::kInt).device(gang.device()));
  gang.broadcast(t, root);
  return t.item<int>() != 0;
}

bool any_flag(Gang& gang, bool flag) {
  at::Tensor t = at::full({1}, flag ? 1 : 0, at::TensorOptions().dtype(at::kInt).device(gang.device()));
  gang.all_reduce(t, ReduceOp::max);
  return t.item<int>() != 0;
}

bool all_flag(Gang& gang, bool flag) {
  at::Tensor t = at::full({1}, flag ? 1 : 0, at::TensorOptions().dtype(at::kInt).device(gang.device()));
  gang.all_reduce(t, ReduceOp::min);
  return t.item<int>() != 0;
}

void check_gang_ranks(const std::vector<int>& ranks, int size) {
  if (ranks.empty()) raise<UserError>("create_gang: the list of ranks is empty.");
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= size)
      raise<UserError>("create_gang: rank {} is not in this gang of {} ranks.", ranks[i], size);
    if (i > 0 && ranks[i] <= ranks[i - 1])
      raise<UserError>("create_gang: ranks must be increasing, but {} follows {}.", ranks[i], ranks[i - 1]);
  }
}

namespace {
thread_local std::vector<std::string> t_scopes;  // innermost last
}  // namespace

CollectiveScope::CollectiveScope(std::string what) { t_scopes.push_back(std::move(what)); }

CollectiveScope::~CollectiveScope() { t_scopes.pop_back(); }

std::string CollectiveScope::describe() {
  if (t_scopes.empty()) return "";
  std::string out = " (";
  for (size_t i = t_scopes.size(); i-- > 0;) out += t_scopes[i] + (i > 0 ? "; " : ")");
  return out;
}

namespace {
class DoneCollective : public PendingCollective {
 public:
  void wait() override {}
  bool done() override { return true; }
};
}  // namespace

std::unique_ptr<PendingCollective> Gang::start_all_sum(at::Tensor& tensor, const std::string&) {
  all_reduce(tensor, ReduceOp::sum);
  return std::make_unique<DoneCollective>();
}

FakeGang::FakeGang(int size, int rank, c10::Device device) : size_(size), rank_(rank), device_(device) {
  if (size < 1 || rank < 0 || rank >= size)
    raise<UserError>("FakeGang: rank {} of size {} is not a valid position.", rank, size);
}

void FakeGang::all_reduce(at::Tensor& tensor, ReduceOp op) {
  // Every simulated rank holds the same tensor as this one.
  switch (op) {
    case ReduceOp::sum:
      tensor.mul_(size_);
      break;
    case ReduceOp::product:
      tensor.copy_(tensor.pow(size_));
      break;
    case ReduceOp::mean:
    case ReduceOp::min:
    case ReduceOp::max:
      break;
  }
}

at::Tensor FakeGang::all_gather(const at::Tensor& tensor) { return at::stack(std::vector<at::Tensor>(size_, tensor)); }

void FakeGang::broadcast(at::Tensor&, int root) {
  if (root < 0 || root >= size_) raise<UserError>("broadcast: root {} is not in this gang of {} ranks.", root, size_);
}

std::shared_ptr<Gang> FakeGang::create_gang(const std::vector<int>& ranks) {
  check_gang_ranks(ranks, size_);
  auto it = std::find(ranks.begin(), ranks.end(), rank_);
  if (it == ranks.end()) return nullptr;
  return std::make_shared<FakeGang>(static_cast<int>(ranks.size()), static_cast<int>(it - ranks.begin()), device_);
}

}  // namespace fairseq_cpp::distributed
