#pragma once
// fairseq's checkpoints, read as they are: v0.9 and 0.10 pickle their arguments as `args` (an
// argparse Namespace), 0.12 as `cfg` (a dict of sections); both hold the model's state dict under
// `model`. load_file reads them through the restricted pickle machine (pickle_machine.h) into our
// layout, the one tools/fairseq-import writes, so that every program takes them.

#include <cstddef>
#include <string>

#include "fairseq_cpp/checkpoint/checkpoint.h"

namespace caffe2::serialize {
class PyTorchStreamReader;
}
namespace torch::jit {
class DeserializationStorageContext;
}

namespace fairseq_cpp::checkpoint {

// Whether a checkpoint's data.pkl (`size` bytes) is fairseq's: it names `optimizer_history`.
bool is_fairseq_pickle(const unsigned char* pickle, size_t size);

// fairseq's checkpoint `path` (its zip open in `reader`, its data.pkl checked already) as ours:
//   "model"        fairseq's parameters as float32 (its `*.version` and `*._float_tensor` buffers left out)
//   "cfg"          fairseq's arguments as our config YAML (arch, model, task, criterion, optimizer, ...)
//   "extra_state"  imported_from (the file), num_updates, epoch, iterations_in_epoch, world_size and best
// The float32 parameters are views of `mapped`'s storages where it is given (Reading::kMapped).
// Throws DataError naming `path` when it holds what fairseq-cpp cannot take (another architecture,
// a global that is not data, a storage of the wrong size).
StateDict read_fairseq_checkpoint(const std::string& path, caffe2::serialize::PyTorchStreamReader& reader,
                                  const unsigned char* pickle, size_t size,
                                  torch::jit::DeserializationStorageContext* mapped = nullptr);

}  // namespace fairseq_cpp::checkpoint
