#pragma once
// The checkpoint file: a zip written by torch::pickle_save that Python's torch.load reads, holding
// one dict (never a one-entry dict: LibTorch 1.13 cannot read those back from Python):
//   "model"        dict parameter name -> tensor (fairseq's state-dict keys; shared ones repeated)
//   "cfg"          the resolved config as YAML (config::dump_config)
//   "optimizer", "lr_scheduler", "extra_state"   optional dicts (trainer state)
// Written atomically: temporary file in the same directory, fsync, rename, fsync of the directory.

#include <string>

#include <ATen/Tensor.h>
#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <torch/nn/module.h>

#include "fairseq_cpp/config/sections.h"

namespace fairseq_cpp::checkpoint {

// String keys to values (c10::impl::GenericDict with str keys).
using StateDict = c10::impl::GenericDict;
StateDict new_state_dict();
using TensorDict = c10::Dict<std::string, at::Tensor>;

inline constexpr const char* kModelKey = "model";
inline constexpr const char* kConfigKey = "cfg";

// Writes `state` to `path` atomically; throws OperationalError on I/O failure ("cannot save
// checkpoint PATH: ..."; with the free space when the disk is full), removing its temporary file.
void save_file(const std::string& path, const StateDict& state);
// The temporary file save_file writes `file_name` to, in the same directory: ".NAME.tmp.PID".
std::string temporary_name(const std::string& file_name);
// Removes the temporary files of saves that a killed process left in `dir` (any ".NAME.tmp.PID"):
// call it only while holding the directory's RunLock, so that no other save can be under way.
// Returns how many were removed.
int remove_unfinished_saves(const std::string& dir);
// How load_file gets the tensors' bytes: read into memory, or mapped (copy-on-write) from the file,
// so that a record's pages are read only when touched (checkpoint averaging reads only "model").
enum class Reading { kCopy, kMapped };
// Reads a checkpoint. Throws UserError when `path` does not exist, DataError when it is truncated,
// not a torch zip, or lacks "model"/"cfg" (with a hint to tools/fairseq-import for fairseq files).
StateDict load_file(const std::string& path, Reading reading = Reading::kCopy);
// Gives the resident pages under `t` back to the kernel when `t` is a tensor of a checkpoint loaded
// with Reading::kMapped that was only read (touched again, a page is read from the file again);
// does nothing for any other tensor. load_model_state calls it on each record it copied, so that a
// mapped checkpoint's pages do not stay resident beside the model they were copied into.
void release_mapped_pages(const at::Tensor& t);

// Parameters and buffers of `module` by fairseq name (on the CPU, detached).
TensorDict model_state(const torch::nn::Module& module);
// Copies `state` into `module`'s parameters (releasing each mapped record's pages once copied).
// Throws DataError naming `origin` and the first keys that are missing, unexpected, or of another
// shape.
void load_model_state(torch::nn::Module& module, const TensorDict& state, const std::string& origin);
// The "model" entry of a loaded checkpoint as a name -> tensor dict.
TensorDict model_entry(const StateDict& checkpoint, const std::string& origin);
// The EMA weights of a checkpoint trained with ema.store_ema (extra_state["ema"], as fairseq saves
// them) as a name -> tensor dict. Throws DataError naming `origin` when it has none.
TensorDict ema_entry(const StateDict& checkpoint, const std::string& origin);
// Whether the checkpoint holds EMA weights.
bool has_ema_entry(const StateDict& checkpoint);
// The "cfg" entry parsed and validated (missing keys take their defaults). Throws DataError naming
// `origin` when it is not a valid config.
config::Config config_entry(const StateDict& checkpoint, const std::string& origin);

}  // namespace fairseq_cpp::checkpoint
