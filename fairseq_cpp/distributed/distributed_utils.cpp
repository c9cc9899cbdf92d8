#include "fairseq_cpp/distributed/distributed_utils.h"

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>

#include <cmath>

#include "fairseq_cpp/core/overloaded.h"
#include "fairseq_cpp/distributed/process_group_gang.h"

namespace fairseq_cpp::distributed {
namespace {

at::TensorOptions on(Gang& gang, at::ScalarType dtype) {
  return at::TensorOptions().dtype(dtype).device(gang.device());
}

at::Tensor bytes_tensor(Gang& gang, const std::vector<uint8_t>& bytes, int64_t length) {
  at::Tensor cpu = at::zeros({length}, at::kByte);
  std::copy(bytes.begin(), bytes.end(), cpu.data_ptr<uint8_t>());
  return cpu.to(gang.device());
}

nlohmann::json decode(const at::Tensor& bytes_on_any_device, int64_t size) {
  at::Tensor cpu = bytes_on_any_device.to(at::kCPU).contiguous();
  const uint8_t* data = cpu.data_ptr<uint8_t>();
  return nlohmann::json::from_cbor(data, data + size);
}

}  // namespace

std::shared_ptr<Gang> distributed_init(const Topology& topology, double timeout_seconds, const std::string& backend,
                                       const SocketInterface& socket) {
  if (topology.spawn > 0)
    raise<OperationalError>("distributed_init: this process spawns {} workers and joins no gang.", topology.spawn);
  c10::Device device(topology.device);
  if (topology.world_size <= 1) return std::make_shared<FakeGang>(1, 0, device);
  ProcessGroupOptions pg;
  pg.master_addr = topology.master_addr;
  pg.master_port = topology.master_port;
  pg.rank = topology.rank;
  pg.world_size = topology.world_size;
  pg.timeout_seconds = timeout_seconds;
  pg.device = device;
  pg.backend = backend;
  pg.store_served_elsewhere = topology.store_from_agent;
  pg.store_namespace = topology.run_id;
  pg.socket = socket;
  return make_process_group_gang(pg);
}

std::vector<nlohmann::json> all_gather_list(Gang& gang, const nlohmann::json& value, int64_t max_size) {
  std::vector<uint8_t> bytes = nlohmann::json::to_cbor(value);
  at::Tensor size = at::full({1}, static_cast<int64_t>(bytes.size()), on(gang, at::kLong));
  at::Tensor sizes = gang.all_gather(size).to(at::kCPU).view({-1});  // (world,)
  int64_t largest = 0;
  for (int r = 0; r < gang.size(); ++r) {
    int64_t n = sizes[r].item<int64_t>();
    if (n > max_size)
      raise<UserError>("all_gather_list: rank {} sends {} bytes, more than max_size {}; raise max_size.", r, n,
                       max_size);
    largest = std::max(largest, n);
  }
  at::Tensor gathered = gang.all_gather(bytes_tensor(gang, bytes, std::max<int64_t>(largest, 1)));  // (world, L)
  std::vector<nlohmann::json> out;
  for (int r = 0; r < gang.size(); ++r) out.push_back(decode(gathered[r], sizes[r].item<int64_t>()));
  return out;
}

std::string broadcast_message(Gang& gang, const std::string& message, const std::string& what) {
  CollectiveScope scope(what);
  return broadcast_object(gang, nlohmann::json(message)).get<std::string>();
}

nlohmann::json broadcast_object(Gang& gang, const nlohmann::json& value, int root) {
  // Every rank encodes its own value: on a real gang the root's replaces it, on a FakeGang (whose
  // ranks all hold the same values) it is the answer.
  std::vector<uint8_t> bytes = nlohmann::json::to_cbor(value);
  at::Tensor size = at::full({1}, static_cast<int64_t>(bytes.size()), on(gang, at::kLong));
  gang.broadcast(size, root);
  int64_t n = size.item<int64_t>();
  bytes.resize(static_cast<size_t>(n));
  at::Tensor payload = bytes_tensor(gang, bytes, std::max<int64_t>(n, 1));
  gang.broadcast(payload, root);
  return decode(payload, n);
}

std::map<std::string, DictValue> all_reduce_dict(Gang& gang, const std::map<std::string, DictValue>& values) {
  // Host numbers and tensors go into one float64 buffer, device tensors into another.
  std::vector<at::Tensor> host_parts;
  std::vector<at::Tensor> device_parts;
  for (const auto& [key, value] : values) {
    std::visit(Overloaded{
                   [&](double v) { host_parts.push_back(at::full({1}, v, at::kDouble)); },
                   [&](int64_t v) { host_parts.push_back(at::full({1}, static_cast<double>(v), at::kDouble)); },
                   [&](const at::Tensor& t) {
                     at::Tensor flat = t.detach().reshape({-1}).to(at::kDouble);
                     (t.device().is_cpu() ? host_parts : device_parts).push_back(flat);
                   },
               },
               value);
  }
  auto reduce = [&](std::vector<at::Tensor>& parts) -> at::Tensor {
    if (parts.empty()) return at::Tensor();
    at::Tensor buffer = at::cat(parts).to(gang.device());
    gang.all_reduce(buffer, ReduceOp::sum);
    return buffer.to(parts.front().device());
  };
  at::Tensor host = reduce(host_parts);
  at::Tensor device = reduce(device_parts);
  std::map<std::string, DictValue> out;
  int64_t host_at = 0;
  int64_t device_at = 0;
  for (const auto& [key, value] : values) {
    std::visit(Overloaded{
                   [&](double) { out[key] = host[host_at++].item<double>(); },
                   [&](int64_t) { out[key] = static_cast<int64_t>(std::llround(host[host_at++].item<double>())); },
                   [&](const at::Tensor& t) {
                     int64_t n = t.numel();
                     at::Tensor& buffer = t.device().is_cpu() ? host : device;
                     int64_t& at_ = t.device().is_cpu() ? host_at : device_at;
                     out[key] = buffer.slice(0, at_, at_ + n).reshape(t.sizes()).to(t.scalar_type()).clone();
                     at_ += n;
                   },
               },
               value);
  }
  return out;
}

}  // namespace fairseq_cpp::distributed
