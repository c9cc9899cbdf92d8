#pragma once
// One profile of a few training steps, as shares of their wall time (the GPU issue's "kernel share
// of GEMM, attention, optimizer, all-reduce, host gaps"), from LibTorch's Kineto profiler:
//
//   bench::StepProfile p = bench::profile_steps([&] { trainer.train_step({batch}); sync(); }, 2, options);
//   std::puts(bench::profile_summary(p).c_str());  // "GEMM 41.0%, attention 9.3%, ..."
//
// On CUDA the shares are of device time: each kernel, memcpy and memset inside a step, overlapping
// ones splitting their common time evenly; host gaps are the step's wall time with nothing on the
// device. On the CPU they are of the ops' self time on every thread; host gaps are the wall time
// outside any op. Either way the six shares add up to the wall time.
//
// Which share an op's time or a kernel goes to:
//   all-reduce  collectives: names with c10d, nccl, gloo, allreduce / all_reduce (kernels: nccl);
//   optimizer   ops with an input of exactly the optimizer's flat buffer (one element per parameter,
//               StepProfileOptions::flat_numel): zero_grad, the gradient's division by the sample
//               size, the clipping norm, the Adam update, and whatever runs inside them;
//   attention   scaled_dot_product / *attention* / fmha / softmax (not log_softmax) ops and backward
//               nodes, and whatever runs inside them (the fused kernel, its mask handling);
//   GEMM        matmul, mm, addmm, bmm, baddbmm, linear, addmv, einsum, _scaled_mm (and in-place
//               variants) and their backward nodes, by their own time only: a cast or a bias sum
//               inside a linear is "other";
//   other       every other op or kernel (elementwise, normalization, the loss, copies).
// A kernel takes its launching op's share (the innermost op, through the profiler's correlation
// id) when that is all-reduce, optimizer, attention or GEMM; otherwise its name decides: nccl ->
// all-reduce; fmha, flash, attention, softmax -> attention; gemm, cutlass, xmma, cublas, nvjet,
// wgmma -> GEMM; anything else (and memcpy, memset) -> other.
//
// Needs LibTorch 2.x (the Kineto profiler's C++ API); kStepProfileSupported says whether it is built.

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <fmt/core.h>
#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/core/torch_compat.h"

#if FSQ_TORCH_AT_LEAST(2, 0)
#include <ATen/record_function.h>
#include <kineto/ActivityType.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#endif

namespace fairseq_cpp::bench {

inline constexpr bool kStepProfileSupported = FSQ_TORCH_AT_LEAST(2, 0);

// The shares, in the order they are printed.
enum class Share { kGemm, kAttention, kOptimizer, kAllReduce, kOther, kHostGaps };
inline constexpr int kShares = 6;
inline constexpr std::array<const char*, kShares> kShareNames{"GEMM",       "attention", "optimizer",
                                                              "all-reduce", "other",     "host gaps"};

struct StepProfileOptions {
  int64_t flat_numel = 0;  // length of the optimizer's flat buffers (its parameters' count); 0 = no optimizer share
  bool cuda = false;       // shares of CUDA device time (else of the CPU ops' time)
};

struct StepProfile {
  struct Entry {
    Share share = Share::kOther;
    std::string op;      // the op (CPU), or the kernel's launcher (CUDA: op(dtypes) in node; empty if none)
    std::string kernel;  // CUDA: the kernel, memcpy or memset; CPU: the op as op(dtypes) in node
    double ms = 0;       // per step
    double calls = 0;    // per step
  };
  bool cuda = false;
  int steps = 0;
  double wall_ms = 0;                // per step
  double host_ops_ms = 0;            // per step: time the launching thread spent inside ops (CUDA)
  int64_t activities = 0;            // ops' self intervals (CPU) or kernels, memcpys, memsets (CUDA) in the steps
  std::array<double, kShares> ms{};  // per step; adds up to wall_ms
  std::vector<Entry> entries;        // descending ms
  double share(Share s) const { return wall_ms > 0 ? 100 * ms[static_cast<int>(s)] / wall_ms : 0; }
};

namespace detail {

inline std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

inline bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// The name the profiler gives an autograd node's run: this prefix, then the node ("MmBackward0").
inline const std::string kNodePrefix = "autograd::engine::evaluate_function: ";

inline bool softmax_not_log(const std::string& n) {
  return contains(n, "softmax") && !contains(n, "log_softmax") && !contains(n, "logsoftmax");
}

}  // namespace detail

// The share an op's name puts it in by itself (see the header): all-reduce, attention, GEMM or other.
inline Share op_share(const std::string& name) {
  using detail::kNodePrefix;
  std::string n = detail::lower(name.rfind(kNodePrefix, 0) == 0 ? name.substr(kNodePrefix.size()) : name);
  using detail::contains;
  if (contains(n, "c10d") || contains(n, "nccl") || contains(n, "gloo") || contains(n, "allreduce") ||
      contains(n, "all_reduce"))
    return Share::kAllReduce;
  if (contains(n, "attention") || contains(n, "scaled_dot_product") || contains(n, "scaleddotproduct") ||
      contains(n, "fmha") || detail::softmax_not_log(n))
    return Share::kAttention;
  static const std::regex kGemmOp(
      "aten::((mm|addmm|bmm|baddbmm|addbmm|matmul|addmv|mv)_?|linear|dot|vdot|einsum|_addmm_activation|_scaled_mm|"
      "linear_backward|matmul_backward|mkldnn_linear|_mkldnn_linear)");
  static const std::regex kGemmNode("(mm|addmm|bmm|baddbmm|addbmm|matmul|linear|addmv|mv|dot|einsum)backward[0-9]*");
  if (std::regex_match(n, kGemmOp) || std::regex_match(n, kGemmNode)) return Share::kGemm;
  return Share::kOther;
}

// The share a CUDA kernel's name puts it in by itself (see the header).
inline Share kernel_share(const std::string& name) {
  const std::string n = detail::lower(name);
  using detail::contains;
  if (contains(n, "nccl")) return Share::kAllReduce;
  if (contains(n, "fmha") || contains(n, "flash") || contains(n, "attention") || detail::softmax_not_log(n))
    return Share::kAttention;
  if (contains(n, "gemm") || contains(n, "cutlass") || contains(n, "xmma") || contains(n, "cublas") ||
      contains(n, "nvjet") || contains(n, "wgmma"))
    return Share::kGemm;
  return Share::kOther;
}

// A kernel's share from its name and its launching op's share (kOther when none was found).
inline Share launched_kernel_share(const std::string& kernel, Share op) {
  const Share by_name = kernel_share(kernel);
  if (by_name == Share::kAllReduce || op == Share::kOther) return by_name;
  return op;
}

// "void at::native::elementwise_kernel<128, 2, ...>(...)" -> "at::native::elementwise_kernel".
inline std::string short_kernel_name(const std::string& name) {
  std::string s = name.rfind("void ", 0) == 0 ? name.substr(5) : name;
  const size_t cut = s.find_first_of("<(");
  if (cut != std::string::npos && cut > 0) s = s.substr(0, cut);
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

#if FSQ_TORCH_AT_LEAST(2, 0)

inline constexpr const char* kStepScope = "fsq::train_step";

namespace detail {

using ProfilerResult = torch::autograd::profiler::ProfilerResult;

struct Span {
  uint64_t start, end;
};

// One CPU op the profiler recorded, placed in its thread's nesting.
struct Op {
  uint64_t start, end, thread;
  std::string name;
  Share own;
  std::string dtypes;  // its inputs' ("Float,BFloat16"; empty where a Scalar or none)
  int parent = -1;
  std::vector<int> children;
  Share share = Share::kOther;  // own, or its scope's (all-reduce, optimizer, attention) inherited
};

// What the profiler saw: the steps' windows and the CPU ops.
struct Recording {
  std::vector<Span> windows;  // the timed steps, in order
  uint64_t step_thread = 0;   // the thread that ran the steps
  std::vector<Op> ops;
  std::unordered_map<uint64_t, int> op_of_correlation;
  std::map<uint64_t, std::vector<int>> ops_of_thread;
  // The window holding time `t`, or nullptr.
  const Span* window_of(uint64_t t) const {
    for (const Span& w : windows)
      if (t >= w.start && t < w.end) return &w;
    return nullptr;
  }
};

// A stretch of a step's time and the share, op and kernel it goes to.
struct Activity {
  uint64_t start, end;
  Share share;
  std::string op, kernel;
  int calls;  // 1 for an op's first self interval or a kernel, else 0
};

inline bool is(uint8_t type, libkineto::ActivityType t) { return type == static_cast<uint8_t>(t); }

// The steps' windows and the CPU ops with their own shares (optimizer: an input of exactly the
// flat buffer's length).
inline Recording recorded_ops(const ProfilerResult& result, const StepProfileOptions& options) {
  Recording r;
  for (const auto& e : result.events()) {
    if (e.isAsync() || e.isHiddenEvent() || e.deviceType() != c10::DeviceType::CPU) continue;
    const uint8_t type = e.activityType();
    if (!is(type, libkineto::ActivityType::CPU_OP) && !is(type, libkineto::ActivityType::USER_ANNOTATION)) continue;
    const std::string name = e.name();
    if (name == kStepScope) {
      r.windows.push_back({e.startNs(), e.endNs()});
      r.step_thread = e.startThreadId();
      continue;
    }
    Share own = op_share(name);
    if (own == Share::kOther && options.flat_numel > 0 && e.hasShapes()) {
      for (const auto& shape : e.shapes())
        if (shape.size() == 1 && shape[0] == options.flat_numel) own = Share::kOptimizer;
    }
    r.ops_of_thread[e.startThreadId()].push_back(static_cast<int>(r.ops.size()));
    r.op_of_correlation[e.correlationId()] = static_cast<int>(r.ops.size());
    std::string dtypes;
    if (e.hasTypes())
      for (const std::string& t : e.dtypes()) dtypes += (dtypes.empty() ? "" : ",") + t;
    r.ops.push_back({e.startNs(), std::max(e.startNs(), e.endNs()), e.startThreadId(), name, own, dtypes});
  }
  std::sort(r.windows.begin(), r.windows.end(), [](const Span& a, const Span& b) { return a.start < b.start; });
  return r;
}

// Nesting per thread (start ascending, enclosing first), and the shares scopes hand down.
inline void nest_ops(Recording& r) {
  std::vector<Op>& ops = r.ops;
  for (auto& [thread, ids] : r.ops_of_thread) {
    std::sort(ids.begin(), ids.end(),
              [&](int a, int b) { return std::tie(ops[a].start, ops[b].end) < std::tie(ops[b].start, ops[a].end); });
    std::vector<int> stack;
    for (int id : ids) {
      Op& op = ops[id];
      while (!stack.empty() && ops[stack.back()].end <= op.start) stack.pop_back();
      if (!stack.empty()) {
        op.parent = stack.back();
        op.end = std::min(op.end, ops[op.parent].end);
        ops[op.parent].children.push_back(id);
      }
      const Share inherited = op.parent >= 0 ? ops[op.parent].share : Share::kOther;
      op.share = inherited == Share::kAllReduce || inherited == Share::kOptimizer || inherited == Share::kAttention
                     ? inherited
                     : op.own;
      stack.push_back(id);
    }
  }
}

// `activity` cut to the window it starts in, onto `out`; dropped when it starts outside the steps.
inline void add_in_window(const Recording& r, Activity activity, std::vector<Activity>& out) {
  const Span* w = r.window_of(activity.start);
  if (w == nullptr) return;
  activity.end = std::max(activity.start, std::min(activity.end, w->end));
  out.push_back(std::move(activity));
}

// A kernel's launcher: the op, its inputs' dtypes and the autograd node it ran in, as
// "aten::add_(float,c10::BFloat16,Scalar) in AccumulateGrad" (the node tells a gradient's
// accumulation from the forward's own add_, the dtypes a cast from a copy).
inline std::string launcher_label(const std::vector<Op>& all, const Op& op) {
  std::string label = op.name + (op.dtypes.empty() ? "" : "(" + op.dtypes + ")");
  for (int p = op.parent; p >= 0; p = all[p].parent)
    if (all[p].name.rfind(kNodePrefix, 0) == 0) return label + " in " + all[p].name.substr(kNodePrefix.size());
  return label;
}

// CUDA: the steps' kernels, memcpys and memsets, each with its launcher's share where that decides.
inline std::vector<Activity> device_activities(const ProfilerResult& result, const Recording& r) {
  std::vector<Activity> out;
  for (const auto& e : result.events()) {
    const uint8_t type = e.activityType();
    if (!is(type, libkineto::ActivityType::CONCURRENT_KERNEL) && !is(type, libkineto::ActivityType::GPU_MEMCPY) &&
        !is(type, libkineto::ActivityType::GPU_MEMSET))
      continue;
    const std::string kernel = e.name();
    const auto launcher = r.op_of_correlation.find(e.linkedCorrelationId());
    const Op* op = launcher == r.op_of_correlation.end() ? nullptr : &r.ops[launcher->second];
    const Share share = is(type, libkineto::ActivityType::CONCURRENT_KERNEL)
                            ? launched_kernel_share(kernel, op != nullptr ? op->share : Share::kOther)
                            : (op != nullptr && op->share != Share::kGemm ? op->share : Share::kOther);
    add_in_window(
        r,
        {e.startNs(), e.endNs(), share, op != nullptr ? launcher_label(r.ops, *op) : "", short_kernel_name(kernel), 1},
        out);
  }
  return out;
}

// CUDA: the stepping thread's time inside top-level ops, in ms over all steps.
inline double host_ops_ms(const Recording& r) {
  double ms = 0;
  for (const Op& op : r.ops) {
    if (op.parent >= 0 || op.thread != r.step_thread) continue;
    const Span* w = r.window_of(op.start);
    if (w != nullptr) ms += static_cast<double>(std::min(op.end, w->end) - op.start) / 1e6;
  }
  return ms;
}

// CPU: each op's self time, the stretches between its children; labelled with its dtypes and
// autograd node (a cast apart from a layout copy, a bias gradient's sum apart from the loss's).
inline std::vector<Activity> cpu_activities(const Recording& r) {
  std::vector<Activity> out;
  for (const Op& op : r.ops) {
    const std::string label = launcher_label(r.ops, op);
    uint64_t at = op.start;
    int calls = 1;
    for (int c : op.children) {
      add_in_window(r, {at, std::max(at, r.ops[c].start), op.share, op.name, label, calls}, out);
      at = std::max(at, r.ops[c].end);
      calls = 0;
    }
    add_in_window(r, {at, std::max(at, op.end), op.share, op.name, label, calls}, out);
  }
  return out;
}

// Each activity's part of the busy time, overlapping ones splitting their common time evenly (so
// the parts add up to the busy time), and the busy time itself, in ns.
inline std::vector<double> split_overlaps(const std::vector<Activity>& activities, double& busy_ns) {
  std::vector<std::tuple<uint64_t, int, int>> edges;  // (time, +1 start / -1 end, activity)
  for (size_t i = 0; i < activities.size(); ++i) {
    if (activities[i].end == activities[i].start) continue;
    edges.emplace_back(activities[i].start, 1, static_cast<int>(i));
    edges.emplace_back(activities[i].end, -1, static_cast<int>(i));
  }
  std::sort(edges.begin(), edges.end());
  std::vector<double> attributed(activities.size(), 0.0);
  std::vector<int> active;
  busy_ns = 0;
  uint64_t last = 0;
  for (const auto& [t, kind, i] : edges) {
    if (!active.empty() && t > last) {
      const double dt = static_cast<double>(t - last);
      busy_ns += dt;
      for (int a : active) attributed[a] += dt / static_cast<double>(active.size());
    }
    last = t;
    if (kind > 0) {
      active.push_back(i);
    } else {
      active.erase(std::find(active.begin(), active.end(), i));
    }
  }
  return attributed;
}

// The shares and entries per step from the activities and the windows' wall time.
inline void fill_shares(const std::vector<Activity>& activities, const std::vector<Span>& windows, StepProfile& out) {
  double busy_ns = 0;
  const std::vector<double> attributed = split_overlaps(activities, busy_ns);
  double wall_ns = 0;
  for (const Span& w : windows) wall_ns += static_cast<double>(w.end - w.start);
  const double per_step = out.steps > 0 ? 1e6 * out.steps : 1;  // ns -> ms per step
  out.activities = static_cast<int64_t>(activities.size());
  out.wall_ms = wall_ns / per_step;
  std::map<std::tuple<int, std::string, std::string>, StepProfile::Entry> entries;
  for (size_t i = 0; i < activities.size(); ++i) {
    const Activity& a = activities[i];
    out.ms[static_cast<int>(a.share)] += attributed[i] / per_step;
    StepProfile::Entry& entry = entries[{static_cast<int>(a.share), a.op, a.kernel}];
    entry.share = a.share;
    entry.op = a.op;
    entry.kernel = a.kernel;
    entry.ms += attributed[i] / per_step;
    entry.calls += static_cast<double>(a.calls) / std::max(out.steps, 1);
  }
  out.ms[static_cast<int>(Share::kHostGaps)] = std::max(0.0, wall_ns - busy_ns) / per_step;
  for (auto& [key, entry] : entries) out.entries.push_back(std::move(entry));
  std::sort(out.entries.begin(), out.entries.end(),
            [](const StepProfile::Entry& a, const StepProfile::Entry& b) { return a.ms > b.ms; });
}

}  // namespace detail

// Runs `step` once under the profiler unrecorded (the profiler's own first-use costs), then
// `steps` times, each inside a "fsq::train_step" range, and cuts those ranges' wall time into the
// shares. `step` must return with the device idle (synchronize inside it).
inline StepProfile profile_steps(const std::function<void()>& step, int steps, const StepProfileOptions& options) {
  namespace prof = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  using torch::profiler::impl::ProfilerConfig;
  using torch::profiler::impl::ProfilerState;
  std::set<ActivityType> activities{ActivityType::CPU};
  if (options.cuda) activities.insert(ActivityType::CUDA);
  const ProfilerConfig config(ProfilerState::KINETO, /*report_input_shapes=*/true);
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities);
  step();
  for (int i = 0; i < steps; ++i) {
    RECORD_USER_SCOPE(kStepScope);
    step();
  }
  const std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();

  detail::Recording recording = detail::recorded_ops(*result, options);
  detail::nest_ops(recording);
  StepProfile out;
  out.cuda = options.cuda;
  out.steps = static_cast<int>(recording.windows.size());
  if (options.cuda) out.host_ops_ms = detail::host_ops_ms(recording) / std::max(out.steps, 1);
  detail::fill_shares(options.cuda ? detail::device_activities(*result, recording) : detail::cpu_activities(recording),
                      recording.windows, out);
  return out;
}

#endif

// The largest share after GEMM and its three largest ops (CPU) or kernels (CUDA), as a pointer to
// the next thing to look at: "other 21.0%: aten::add_ 4.1%, ...".
inline std::string profile_pointer(const StepProfile& p) {
  int top = static_cast<int>(Share::kAttention);
  for (int s = top; s < kShares; ++s)
    if (p.ms[s] > p.ms[top]) top = s;
  std::string out = fmt::format("{} {:.1f}%", kShareNames[top], p.share(static_cast<Share>(top)));
  if (static_cast<Share>(top) == Share::kHostGaps)
    return out + (p.cuda ? fmt::format(" (device idle; the host was inside ops {:.0f}% of the step)",
                                       p.wall_ms > 0 ? 100 * p.host_ops_ms / p.wall_ms : 0.0)
                         : " (time outside any op)");
  // Entries of that share by op (CPU) or kernel (CUDA).
  std::map<std::string, double> by_name;
  for (const auto& e : p.entries)
    if (static_cast<int>(e.share) == top) by_name[p.cuda ? e.kernel : e.op] += e.ms;
  std::vector<std::pair<double, std::string>> sorted;
  for (const auto& [name, ms] : by_name) sorted.emplace_back(ms, name);
  std::sort(sorted.rbegin(), sorted.rend());
  for (size_t i = 0; i < sorted.size() && i < 3; ++i)
    out += fmt::format("{}{} {:.1f}%", i == 0 ? ": " : ", ", sorted[i].second,
                       p.wall_ms > 0 ? 100 * sorted[i].first / p.wall_ms : 0.0);
  return out;
}

// "GEMM 41.0%, attention 9.3%, optimizer 2.1%, all-reduce 0.0%, other 30.2%, host gaps 17.4% of
// 254.1 ms (CPU ops, 2 steps); largest after GEMM: other 30.2%: aten::add_ 4.1%, ..."
inline std::string profile_summary(const StepProfile& p) {
  std::string out;
  for (int s = 0; s < kShares; ++s)
    out += fmt::format("{}{} {:.1f}%", s == 0 ? "" : ", ", kShareNames[s], p.share(static_cast<Share>(s)));
  return out + fmt::format(" of {:.1f} ms ({}, {} step{}); largest after GEMM: {}", p.wall_ms,
                           p.cuda ? "CUDA kernels" : "CPU ops", p.steps, p.steps == 1 ? "" : "s", profile_pointer(p));
}

// The shares, then the largest `rows` entries (ms and calls per step), as a plain-text table.
inline std::string profile_table(const StepProfile& p, size_t rows = 40) {
  std::string out = fmt::format("{:<10} {:>10} {:>7}\n", "share", "ms/step", "%");
  for (int s = 0; s < kShares; ++s)
    out += fmt::format("{:<10} {:>10.3f} {:>6.1f}%\n", kShareNames[s], p.ms[s], p.share(static_cast<Share>(s)));
  out += fmt::format("{:<10} {:>10.3f} {:>6.1f}%\n", "step", p.wall_ms, p.wall_ms > 0 ? 100.0 : 0.0);
  if (p.cuda)
    out += fmt::format("(the launching thread was inside ops for {:.3f} ms per step, {:.1f}%)\n", p.host_ops_ms,
                       p.wall_ms > 0 ? 100 * p.host_ops_ms / p.wall_ms : 0.0);
  out += fmt::format("\n{:<10} {:>10} {:>6} {:>8}  {}\n", "share", "ms/step", "%", "calls",
                     p.cuda ? "kernel [op]" : "op(dtypes) in node");
  for (size_t i = 0; i < p.entries.size() && i < rows; ++i) {
    const auto& e = p.entries[i];
    out += fmt::format("{:<10} {:>10.3f} {:>5.1f}% {:>8.1f}  {}\n", kShareNames[static_cast<int>(e.share)], e.ms,
                       p.wall_ms > 0 ? 100 * e.ms / p.wall_ms : 0.0, e.calls,
                       p.cuda ? fmt::format("{} [{}]", e.kernel, e.op.empty() ? "-" : e.op) : e.kernel);
  }
  return out;
}

}  // namespace fairseq_cpp::bench
