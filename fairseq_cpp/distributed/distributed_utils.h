#pragma once
// fairseq's distributed_utils names on top of a Gang. Values that travel between ranks are JSON
// values encoded as CBOR: no pickle, nothing executes on decode.
//
//   auto logs = all_gather_list(gang, {{"loss", 2.1}, {"oom", 0}}, 16384);  // one entry per rank
//   auto sums = all_reduce_dict(gang, {{"ntokens", 3454.0}, {"loss", loss_tensor}});

#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "fairseq_cpp/distributed/gang.h"
#include "fairseq_cpp/distributed/network.h"
#include "fairseq_cpp/distributed/topology.h"

namespace fairseq_cpp::distributed {

// Where this process stands (fairseq's infer_init_method): the topology resolver.
inline Topology infer_init_method(const TopologyInputs& inputs) { return resolve_topology(inputs); }

// Joins the job's process group (Gloo on the CPU, NCCL on CUDA) with `timeout_seconds` for the
// rendezvous and every collective; a FakeGang of size 1 for a single process. Not for a
// topology that spawns (launch() does that). Gloo binds `socket`; empty = the interface of the
// route to the master, or GLOO_SOCKET_IFNAME's.
std::shared_ptr<Gang> distributed_init(const Topology& topology, double timeout_seconds,
                                       const std::string& backend = "", const SocketInterface& socket = {});

inline bool is_master(const Gang& gang) { return gang.rank() == 0; }
inline int get_rank(const Gang& gang) { return gang.rank(); }
inline int get_world_size(const Gang& gang) { return gang.size(); }
inline void all_reduce(Gang& gang, at::Tensor& tensor, ReduceOp op = ReduceOp::sum) { gang.all_reduce(tensor, op); }

// One value from every rank, in rank order. The encoded sizes travel first, so when any rank's
// value is over `max_size` bytes every rank throws the same UserError (no rank hangs).
std::vector<nlohmann::json> all_gather_list(Gang& gang, const nlohmann::json& value, int64_t max_size = 16384);

// `value` of rank `root` on every rank.
nlohmann::json broadcast_object(Gang& gang, const nlohmann::json& value, int root = 0);

// Rank 0's `message` on every rank (`what` names the broadcast in its error, as a CollectiveScope).
std::string broadcast_message(Gang& gang, const std::string& message, const std::string& what);

// Runs `action` on rank 0 alone, then every rank learns its outcome: when it threw, every rank
// throws (rank 0 what it threw if that was no `Error`, else an `Error` with its message; the
// others an `Error` with `others_prefix` before the message), so no rank goes on, or waits, while
// rank 0 stopped. `what` names the broadcast of the outcome.
//   rank0_acts<UserError>(gang, "the run lock", [&] { lock.emplace(save_dir); });
template <class Error, class Action>
void rank0_acts(Gang& gang, const std::string& what, Action&& action, const std::string& others_prefix = "") {
  std::string failed;
  std::exception_ptr other;  // rank 0's exception when it was no `Error`
  if (gang.rank() == 0) {
    try {
      action();
    } catch (const Error& e) {
      failed = e.what();
    } catch (const std::exception& e) {
      failed = e.what();
      other = std::current_exception();
    }
  }
  failed = broadcast_message(gang, failed, what);
  if (other) std::rethrow_exception(other);
  if (!failed.empty()) throw Error(gang.rank() == 0 ? failed : others_prefix + failed);
}

// A value in all_reduce_dict: a number on the host, or a tensor on the host or the gang's device.
using DictValue = std::variant<double, int64_t, at::Tensor>;

// Sums every entry across ranks (same keys on every rank) in at most two collectives: one for
// host values, one for device tensors. Values come back with their original type, device,
// dtype and shape.
std::map<std::string, DictValue> all_reduce_dict(Gang& gang, const std::map<std::string, DictValue>& values);

}  // namespace fairseq_cpp::distributed
