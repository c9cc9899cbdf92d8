#include "fairseq_cpp/distributed/process_group_gang.h"

#include <ATen/ATen.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "fairseq_cpp/core/logging.h"
#include "fairseq_cpp/core/torch_compat.h"
#include "fairseq_cpp/distributed/nccl_backend.h"
#include "fairseq_cpp/distributed/peer_beacon.h"

namespace fairseq_cpp::distributed {
namespace {

#if FSQ_C10D_HAS_BACKEND
using BackendBase = c10d::Backend;
#else
using BackendBase = c10d::ProcessGroup;
#endif

// How long a failed rank waits for the other ranks' beacons to answer.
constexpr double kProbeSeconds = 1.0;
// How much longer than the timeout joining a group may take: the last connections of a mesh.
constexpr double kJoinGraceSeconds = 2.0;

std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::min:
      return c10d::ReduceOp::MIN;
    case ReduceOp::max:
      return c10d::ReduceOp::MAX;
    case ReduceOp::product:
      return c10d::ReduceOp::PRODUCT;
    case ReduceOp::sum:
    case ReduceOp::mean:
      return c10d::ReduceOp::SUM;  // AVG is not portable: sum, then divide
  }
  return c10d::ReduceOp::SUM;
}

// One Gloo device per chosen interface; a route's source address when the route chose it.
std::vector<std::shared_ptr<::gloo::transport::Device>> gloo_devices(const SocketInterface& socket) {
  if (!socket.address.empty()) return {c10d::ProcessGroupGloo::createDeviceForHostname(socket.address)};
  std::vector<std::shared_ptr<::gloo::transport::Device>> devices;
  for (const auto& name : socket.interfaces) devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
  return devices;
}

class ProcessGroupGang : public Gang {
 public:
  ProcessGroupGang(c10::intrusive_ptr<c10d::Store> store, std::string name, int rank, int size,
                   const ProcessGroupOptions& options)
      : store_(std::move(store)), name_(std::move(name)), rank_(rank), size_(size), options_(options) {
    auto group_store = c10::make_intrusive<c10d::PrefixStore>(name_, store_);
    try {
      if (options_.backend == "nccl") {
        backend_ = make_nccl_backend(group_store, rank_, size_, to_ms(options_.timeout_seconds));
      } else {
        auto gloo = c10d::ProcessGroupGloo::Options::create(to_ms(options_.timeout_seconds));
        gloo->devices = gloo_devices(options_.socket);
        backend_ = join_gloo(group_store, gloo);
      }
    } catch (const c10::Error& e) {
      raise<GangError>("joining process group `{}` failed on rank {} of {}{}: {}", name_, rank_, size_, bound(),
                       core::torch_message(e.what_without_backtrace()));
    } catch (const std::exception& e) {  // Gloo's own IoException: a peer it cannot connect to
      raise<GangError>("joining process group `{}` failed on rank {} of {}{}: {}", name_, rank_, size_, bound(),
                       e.what());
    }
    if (options_.backend == "gloo" && size_ > 1) start_beacon();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  c10::Device device() const override { return options_.device; }

  void all_reduce(at::Tensor& tensor, ReduceOp op) override {
    check_device("all_reduce", tensor);
    std::vector<at::Tensor> tensors{tensor};
    c10d::AllreduceOptions opts;
    opts.reduceOp = to_c10d(op);
    run(fmt::format("all_reduce({})", reduce_op_name(op)), [&] { return backend_->allreduce(tensors, opts); });
    if (op == ReduceOp::mean) {
      if (at::isFloatingType(tensor.scalar_type())) {
        tensor.div_(size_);
      } else {
        tensor.copy_(tensor.div(size_, "trunc"));
      }
    }
  }

  at::Tensor all_gather(const at::Tensor& tensor) override {
    check_device("all_gather", tensor);
    at::Tensor input = tensor.contiguous();
    std::vector<at::Tensor> inputs{input};
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int i = 0; i < size_; ++i) outputs[0].push_back(at::empty_like(input));
    run("all_gather", [&] { return backend_->allgather(outputs, inputs); });
    return at::stack(outputs[0]);
  }

  void broadcast(at::Tensor& tensor, int root) override {
    check_device("broadcast", tensor);
    if (root < 0 || root >= size_) raise<UserError>("broadcast: root {} is not in this gang of {} ranks.", root, size_);
    std::vector<at::Tensor> tensors{tensor};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    run(fmt::format("broadcast(root {})", root), [&] { return backend_->broadcast(tensors, opts); });
  }

  void barrier() override {
    // A one-element all-reduce is a barrier on every backend (NCCL's barrier guesses the device).
    at::Tensor t = at::zeros({1}, at::TensorOptions().device(options_.device));
    std::vector<at::Tensor> tensors{t};
    run("barrier", [&] { return backend_->allreduce(tensors); });
  }

  std::unique_ptr<PendingCollective> start_all_sum(at::Tensor& tensor, const std::string& what) override {
    check_device("all_reduce", tensor);
    std::vector<at::Tensor> tensors{tensor};
    c10::intrusive_ptr<c10d::Work> work;
    note_started(what);
    try {
      work = started([&] { return backend_->allreduce(tensors, c10d::AllreduceOptions{}); });
    } catch (const c10::Error& e) {
      fail(what, core::torch_message(e.what_without_backtrace()));
    }
    return std::make_unique<Pending>(*this, std::move(work), what);
  }

  std::shared_ptr<Gang> create_gang(const std::vector<int>& ranks) override {
    check_gang_ranks(ranks, size_);
    std::string name = fmt::format("{}/{}", name_, next_group_++);  // same on every rank: all call in order
    auto it = std::find(ranks.begin(), ranks.end(), rank_);
    if (it == ranks.end()) return nullptr;
    return std::make_shared<ProcessGroupGang>(store_, name, static_cast<int>(it - ranks.begin()),
                                              static_cast<int>(ranks.size()), options_);
  }

 private:
  void check_device(const char* op, const at::Tensor& tensor) const {
    if (tensor.device() != options_.device)
      raise<UserError>("{}: the tensor is on {}, but this gang's tensors live on {}.", op, tensor.device().str(),
                       options_.device.str());
  }

  // " (Gloo on interface=fsqv1 (...))": where this rank listens, when a join fails.
  std::string bound() const {
    return options_.backend != "gloo" || options_.socket.empty() ? "" : " (Gloo on " + options_.socket.describe() + ")";
  }

  // This rank's beacon on its Gloo address, and every rank's endpoint (one all_gather, on every
  // rank: a rank without a beacon sends an empty endpoint, and its peers name no lost ranks).
  void start_beacon() {
    std::string address = options_.socket.listen_address();
    try {
      if (!address.empty()) beacon_ = std::make_unique<PeerBeacon>(address);
    } catch (const Error& e) {
      log::warning("distributed", "{}; a failed collective will not name the lost ranks", e.what());
    }
    constexpr int64_t kWidth = 64;  // "ADDRESS PORT": an IPv6 address's text is at most 45 bytes
    std::string mine = beacon_ ? beacon_->endpoint().substr(0, kWidth - 1) : "";
    at::Tensor input = at::zeros({kWidth}, at::kByte);
    std::copy(mine.begin(), mine.end(), input.data_ptr<uint8_t>());
    std::vector<at::Tensor> inputs{input};
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int i = 0; i < size_; ++i) outputs[0].push_back(at::zeros({kWidth}, at::kByte));
    run("all_gather(peer beacons)", [&] { return backend_->allgather(outputs, inputs); });
    for (const auto& t : outputs[0]) endpoints_.emplace_back(reinterpret_cast<const char*>(t.data_ptr<uint8_t>()));
  }

  // A ProcessGroupGloo of every rank, or GangError after the timeout (plus kJoinGraceSeconds). Gloo
  // retries a connection it cannot make for about five times its timeout, so the join runs on a
  // thread of its own that is left behind when it is late: the error ends the program anyway.
  c10::intrusive_ptr<BackendBase> join_gloo(const c10::intrusive_ptr<c10d::Store>& store,
                                            const c10::intrusive_ptr<c10d::ProcessGroupGloo::Options>& options) {
    using Joined = c10::intrusive_ptr<BackendBase>;
    auto join = std::make_shared<std::packaged_task<Joined()>>(
        [store, options, rank = rank_, size = size_]() -> Joined {
          return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
        });
    std::future<Joined> joined = join->get_future();
    std::thread([join] { (*join)(); }).detach();
    const double seconds = options_.timeout_seconds + kJoinGraceSeconds;
    if (joined.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready)
      throw std::runtime_error(fmt::format("no connection to every rank within {:g} s (distributed_training.timeout "
                                           "{:g} s); each rank must reach the others at the address it binds",
                                           seconds, options_.timeout_seconds));
    return joined.get();
  }

  // "; ranks 2, 3 are gone (...)": the lost peers, as their beacons tell (before the gang has
  // formed: nothing).
  std::string lost_peers() {
    if (!beacon_ || static_cast<int>(endpoints_.size()) != size_) return "";
    std::string lost = beacon_->lost_peers(rank_, endpoints_, kProbeSeconds);
    return lost.empty() ? "" : "; " + lost;
  }

  // Starts a collective (`start` returns its work) and waits for it, within the gang's timeout.
  template <typename Start>
  void run(const std::string& op, Start&& start) {
    note_started(op);
    finish(op, [&] { return started(start); });
  }

  // `start()`, which starts a collective and returns its work. c10d's flight recorder (LibTorch
  // 2.x, one per process) adds a process group to a map when it records the group's first
  // collective, outside its lock (pytorch/pytorch#179313): two threads starting collectives of
  // different groups at once (ranks as threads; bucket hooks on the autograd engine's device
  // thread beside another gang) corrupted the map or crashed. Gloo's start only enqueues, so this
  // process's Gloo gangs start theirs one at a time. NCCL's is left alone: its first collective
  // waits for its peers, and its ranks are processes of their own.
  template <typename Start>
  auto started(Start&& start) -> decltype(start()) {
    if (options_.backend != "gloo") return start();
    static std::mutex starting;
    std::lock_guard<std::mutex> lock(starting);
    return start();
  }

  // One more collective started, for the peers that ask where this rank stands after a failure.
  void note_started(const std::string& op) {
    const int64_t started = ++started_;
    if (beacon_) beacon_->set_position(started, op + CollectiveScope::describe());
  }

  template <typename Start>
  void finish(const std::string& op, Start&& start) {
    std::string message;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      auto work = start();
      work->wait(to_ms(options_.timeout_seconds));
      return;
    } catch (const c10::Error& e) {
      message = core::torch_message(e.what_without_backtrace());
    } catch (const std::exception& e) {
      message = e.what();
    }
    // A wait well past the timeout is the backend's (a Gloo collective on CUDA tensors reported its
    // timeout minutes late on an H100): say so, so that the time is not taken for the timeout's.
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (waited > options_.timeout_seconds + 1.0)
      message +=
          fmt::format(" (this rank waited {:.1f} s for it, past the {:g} s timeout)", waited, options_.timeout_seconds);
    fail(op, message);
  }

  [[noreturn]] void fail(const std::string& op, const std::string& message) {
    std::string lost = lost_peers();
    raise<GangError>("{}{} failed on rank {} of {} (group `{}`): {}{}", op, CollectiveScope::describe(), rank_, size_,
                     name_, message, lost);
  }

  // An all-reduce in flight; its wait() fails as run() does, within the gang's timeout.
  class Pending : public PendingCollective {
   public:
    Pending(ProcessGroupGang& gang, c10::intrusive_ptr<c10d::Work> work, std::string what)
        : gang_(gang), work_(std::move(work)), what_(std::move(what)) {}
    void wait() override {
      if (!work_) return;
      auto work = std::move(work_);
      gang_.finish(what_, [&] { return work; });
    }
    bool done() override { return !work_ || work_->isCompleted(); }

   private:
    ProcessGroupGang& gang_;
    c10::intrusive_ptr<c10d::Work> work_;
    std::string what_;
  };

  c10::intrusive_ptr<c10d::Store> store_;  // the job's TCPStore; sub-gangs use prefixes of it
  std::string name_;
  int rank_;
  int size_;
  ProcessGroupOptions options_;
  c10::intrusive_ptr<BackendBase> backend_;
  std::unique_ptr<PeerBeacon> beacon_;  // Gloo only: tells which peers are lost after a failure
  std::vector<std::string> endpoints_;  // every rank's beacon, "ADDRESS PORT"
  std::atomic<int64_t> started_{0};     // collectives started (on any thread: buckets start in hooks)
  int next_group_ = 0;
};

}  // namespace

std::shared_ptr<Gang> make_process_group_gang(const ProcessGroupOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size)
    raise<UserError>("rank {} is not a valid rank of a gang of {} processes.", options.rank, options.world_size);
  if (options.master_port < 1 || options.master_port > 65535)
    raise<UserError>("master port must be in 1-65535, but is {} instead.", options.master_port);
  if (!(options.timeout_seconds > 0))
    raise<UserError>("`distributed_training.timeout` must be greater than 0, but is {} instead.",
                     options.timeout_seconds);
  std::string backend = options.backend.empty() ? (options.device.is_cuda() ? "nccl" : "gloo") : options.backend;
  if (backend == "nccl" && !options.device.is_cuda())
    raise<UserError>("backend nccl cannot run on {}: use gloo for the CPU (gloo or nccl for CUDA).",
                     options.device.str());
  ProcessGroupOptions resolved = options;
  resolved.backend = backend;
  // "cuda" is the current CUDA device; tensors made there say cuda:N, and each collective checks
  // its tensor's device against the gang's exactly.
  if (resolved.device.is_cuda() && !resolved.device.has_index())
    resolved.device = c10::Device(c10::kCUDA, c10::impl::VirtualGuardImpl(c10::kCUDA).getDevice().index());
  if (resolved.socket.empty())
    resolved.socket = choose_socket_interface(options.master_addr, "", gloo_socket_ifname_env());
  // NCCL's own sockets (its bootstrap, and its transport between hosts without InfiniBand) on the
  // same interface as Gloo's would be, unless the user chose with NCCL_SOCKET_IFNAME.
  if (backend == "nccl" && !resolved.socket.empty()) {
    std::string names;
    for (const auto& name : resolved.socket.interfaces) names += (names.empty() ? "" : ",") + name;
    if (setenv("NCCL_SOCKET_IFNAME", names.c_str(), /*overwrite=*/0) != 0)
      raise<OperationalError>("cannot set NCCL_SOCKET_IFNAME: {}", std::strerror(errno));
  }
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<uint16_t>(options.master_port);
  store_options.isServer = options.rank == 0 && !options.store_served_elsewhere;
  store_options.numWorkers = options.world_size;
  store_options.waitWorkers = !options.store_served_elsewhere;
  store_options.timeout = to_ms(options.timeout_seconds);
  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(options.master_addr, store_options);
    if (options.store_served_elsewhere) {
      // torchrun's agent keeps its store across restarts of the group, with the keys of the
      // previous start still in it. Each rank counts its own starts; every rank of one start gets
      // the same count, so the count names a fresh prefix for this start's rendezvous.
      std::string job = fmt::format("fairseq_cpp/{}", options.store_namespace);
      int64_t start = store->add(fmt::format("{}/starts/rank{}", job, options.rank), 1);
      store = c10::make_intrusive<c10d::PrefixStore>(fmt::format("{}/start{}", job, start), store);
      if (options.rank == 0)
        log::info("distributed", "rendezvous in the launcher's store at {}:{}, start {} of this job",
                 options.master_addr, options.master_port, start);
    }
  } catch (const std::exception& e) {
    raise<GangError>("rendezvous at {}:{} failed on rank {} of {} (timeout {} s): {}", options.master_addr,
                     options.master_port, options.rank, options.world_size, options.timeout_seconds,
                     core::torch_message(e.what()));
  }
  return std::make_shared<ProcessGroupGang>(store, "default", options.rank, options.world_size, resolved);
}

}  // namespace fairseq_cpp::distributed
