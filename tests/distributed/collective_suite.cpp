#include "tests/distributed/collective_suite.h"

#include <ATen/ATen.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "fairseq_cpp/distributed/distributed_utils.h"

namespace fairseq_cpp::testing {
namespace {

using distributed::DictValue;
using distributed::Gang;
using distributed::ReduceOp;

struct Checker {
  std::vector<std::string> failures;
  int rank;
  void expect(bool ok, const std::string& what) {
    if (!ok) failures.push_back(fmt::format("rank {}: {}", rank, what));
  }
  // `got` (on any device) against `want` (on the CPU), compared on the CPU.
  void expect_tensor(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
    at::Tensor host = got.to(at::kCPU, at::kDouble);
    bool ok = got.sizes() == want.sizes() && got.scalar_type() == want.scalar_type() &&
              at::allclose(host, want.to(at::kDouble));
    expect(ok, fmt::format("{}: got {} want {}", what, host.reshape({-1}).toString(),
                           want.to(at::kDouble).reshape({-1}).toString()));
  }
  // A collective's result stays on the gang's device.
  void expect_on(const at::Tensor& t, const c10::Device& device, const std::string& what) {
    expect(t.device() == device, fmt::format("{}: on {}, not on the gang's {}", what, t.device().str(), device.str()));
  }
};

double f(int r) { return r + 1; }

// What every rank is checked against: closed forms over the contributions of all ranks (or, where
// simulated, n copies of this rank's).
struct Suite {
  Gang& gang;
  bool simulated;
  int n, r;
  at::TensorOptions opts;
  Checker c;
  double sum, prod, lo, hi, rank_sum;

  Suite(Gang& g, bool sim)
      : gang(g),
        simulated(sim),
        n(g.size()),
        r(g.rank()),
        opts(at::TensorOptions().device(g.device())),
        c{{}, g.rank()} {
    sum = simulated ? n * f(r) : n * (n + 1) / 2.0;
    prod = 1;
    for (int i = 0; i < n; ++i) prod *= simulated ? f(r) : f(i);
    lo = simulated ? f(r) : f(0);
    hi = simulated ? f(r) : f(n - 1);
    rank_sum = simulated ? n * r : n * (n - 1) / 2.0;
  }

  void all_reduce() {
    at::Tensor t = at::tensor({f(r), 2 * f(r)}, opts.dtype(at::kFloat));
    gang.all_reduce(t, ReduceOp::sum);
    c.expect_tensor(t, at::tensor({sum, 2 * sum}, at::kFloat), "all_reduce sum");

    t = at::tensor({f(r)}, opts.dtype(at::kDouble));
    gang.all_reduce(t, ReduceOp::mean);
    c.expect_tensor(t, at::tensor({sum / n}, at::kDouble), "all_reduce mean");

    t = at::tensor({static_cast<int64_t>(f(r))}, opts.dtype(at::kLong));
    gang.all_reduce(t, ReduceOp::mean);
    c.expect_tensor(t, at::tensor({static_cast<int64_t>(sum) / n}, at::kLong), "all_reduce mean (int, truncated)");

    t = at::tensor({f(r), -f(r)}, opts.dtype(at::kFloat));
    gang.all_reduce(t, ReduceOp::min);
    c.expect_tensor(t, at::tensor({lo, -hi}, at::kFloat), "all_reduce min");

    t = at::tensor({f(r), -f(r)}, opts.dtype(at::kFloat));
    gang.all_reduce(t, ReduceOp::max);
    c.expect_tensor(t, at::tensor({hi, -lo}, at::kFloat), "all_reduce max");

    t = at::tensor({f(r)}, opts.dtype(at::kDouble));
    gang.all_reduce(t, ReduceOp::product);
    c.expect_tensor(t, at::tensor({prod}, at::kDouble), "all_reduce product");
  }

  void gather_broadcast_and_flags() {
    at::Tensor gathered = gang.all_gather(at::tensor({static_cast<float>(r), 10.0f * r}, opts));
    std::vector<float> rows;
    for (int i = 0; i < n; ++i) {
      rows.push_back(simulated ? r : i);
      rows.push_back(10.0f * (simulated ? r : i));
    }
    c.expect_tensor(gathered, at::tensor(rows, at::kFloat).reshape({n, 2}), "all_gather");
    c.expect_on(gathered, gang.device(), "all_gather");

    int root = n - 1;
    at::Tensor t = at::tensor({100.0 * r + 7}, opts.dtype(at::kDouble));
    gang.broadcast(t, root);
    c.expect_tensor(t, at::tensor({100.0 * (simulated ? r : root) + 7}, at::kDouble), "broadcast");
    c.expect_on(t, gang.device(), "broadcast");

    gang.barrier();

    c.expect(distributed::any_flag(gang, r == n - 1) == (simulated ? r == n - 1 : true), "any_flag");
    c.expect(distributed::all_flag(gang, r == 0) == (simulated ? r == 0 : n == 1), "all_flag");
    c.expect(distributed::broadcast_flag(gang, r == root, root) == (simulated ? r == root : true), "broadcast_flag");
  }

  // {0, n-1}, then {1, ..., n-1}; every rank calls both in the same order.
  void sub_gangs() {
    std::vector<int> ends = n > 1 ? std::vector<int>{0, n - 1} : std::vector<int>{0};
    auto sub = gang.create_gang(ends);
    bool member = r == 0 || r == n - 1;
    c.expect((sub != nullptr) == member, "create_gang membership");
    if (sub) {
      c.expect(sub->size() == static_cast<int>(ends.size()), "sub-gang size");
      c.expect(sub->rank() == (r == 0 ? 0 : static_cast<int>(ends.size()) - 1), "sub-gang rank");
      at::Tensor s = at::tensor({f(r)}, opts.dtype(at::kDouble));
      sub->all_reduce(s, ReduceOp::sum);
      double want = simulated ? ends.size() * f(r) : (n > 1 ? f(0) + f(n - 1) : f(0));
      c.expect_tensor(s, at::tensor({want}, at::kDouble), "sub-gang all_reduce");
    }
    if (n > 2) {
      std::vector<int> tail;
      for (int i = 1; i < n; ++i) tail.push_back(i);
      auto rest = gang.create_gang(tail);
      c.expect((rest != nullptr) == (r >= 1), "second create_gang membership");
      if (rest) {
        at::Tensor s = at::tensor({f(r)}, opts.dtype(at::kDouble));
        rest->all_reduce(s, ReduceOp::max);
        c.expect_tensor(s, at::tensor({simulated ? f(r) : f(n - 1)}, at::kDouble), "second sub-gang max");
      }
    }
  }

  // distributed_utils: all_gather_list and broadcast_object.
  void objects() {
    auto list = distributed::all_gather_list(gang, {{"rank", r}, {"name", fmt::format("worker-{}", r)}}, 1024);
    c.expect(static_cast<int>(list.size()) == n, "all_gather_list size");
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      int who = simulated ? r : i;
      c.expect(list[i]["rank"] == who && list[i]["name"] == fmt::format("worker-{}", who),
               fmt::format("all_gather_list entry {} is {}", i, list[i].dump()));
    }

    auto obj = distributed::broadcast_object(gang, {{"from", r}, {"payload", std::vector<int>(100, r)}}, 0);
    int from = simulated ? r : 0;
    c.expect(obj["from"] == from && obj["payload"].size() == 100 && obj["payload"][99] == from,
             "broadcast_object " + obj.dump().substr(0, 40));
  }

  void all_reduce_dict() {
    std::map<std::string, DictValue> values{
        {"loss", f(r)},
        {"ntokens", static_cast<int64_t>(r)},
        {"matrix", at::tensor({static_cast<float>(r), 1.0f, 2.0f, 3.0f}).reshape({2, 2})},
        {"count", at::tensor({static_cast<int64_t>(r) * 2})},
        {"on_device", at::tensor({f(r), -f(r)}, opts.dtype(at::kFloat))},  // the gang's device: its own buffer
    };
    auto sums = distributed::all_reduce_dict(gang, values);
    c.expect(std::get<double>(sums.at("loss")) == sum, "all_reduce_dict double");
    c.expect(std::get<int64_t>(sums.at("ntokens")) == static_cast<int64_t>(rank_sum), "all_reduce_dict int64");
    const at::Tensor& m = std::get<at::Tensor>(sums.at("matrix"));
    c.expect_tensor(m, at::tensor({static_cast<float>(rank_sum), 1.0f * n, 2.0f * n, 3.0f * n}).reshape({2, 2}),
                    "all_reduce_dict tensor (float32, 2x2)");
    c.expect(m.device().is_cpu(), "all_reduce_dict keeps the host tensor on the host");
    c.expect_tensor(std::get<at::Tensor>(sums.at("count")), at::tensor({static_cast<int64_t>(2 * rank_sum)}),
                    "all_reduce_dict tensor (int64)");
    const at::Tensor& d = std::get<at::Tensor>(sums.at("on_device"));
    c.expect_tensor(d, at::tensor({sum, -sum}, at::kFloat), "all_reduce_dict tensor on the gang's device");
    c.expect_on(d, gang.device(), "all_reduce_dict tensor on the gang's device");
  }
};

}  // namespace

// Each part's collectives in the same order on every rank.
std::vector<std::string> run_collective_suite(Gang& gang, bool simulated) {
  Suite suite(gang, simulated);
  suite.all_reduce();
  suite.gather_broadcast_and_flags();
  suite.sub_gangs();
  suite.objects();
  suite.all_reduce_dict();
  return suite.c.failures;
}

}  // namespace fairseq_cpp::testing
