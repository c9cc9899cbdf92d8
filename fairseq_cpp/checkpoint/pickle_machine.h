#pragma once
// A restricted pickle machine for the data.pkl of fairseq's checkpoints, which LibTorch's unpickler
// cannot read (it turns collections.OrderedDict into None, has no APPEND, takes LONG1 only 8 bytes
// long). It calls nothing: the few globals a checkpoint's data needs become plain values
// (collections.OrderedDict a dict, torch.Size a tuple, torch._utils._rebuild_tensor_v2 a view of its
// storage, argparse.Namespace, any fairseq or omegaconf class and a numpy scalar an object that
// keeps its state), and any other global is refused.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/Tensor.h>

namespace fairseq_cpp::checkpoint {

struct PyValue;
using PyRef = std::shared_ptr<PyValue>;

// A value of the pickle, as far as a checkpoint holds them.
struct PyValue {
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kBytes, kList, kTuple, kDict, kObject, kGlobal, kTensor };
  Kind kind = Kind::kNone;
  bool boolean = false;
  int64_t integer = 0;
  double number = 0;
  std::string text;                              // kString, kBytes; kGlobal, kObject: "module.name"
  std::vector<PyRef> items;                      // kList, kTuple; kObject: its constructor's arguments
  std::vector<std::pair<PyRef, PyRef>> entries;  // kDict; kObject: its state, in order
  std::map<std::string, size_t> index;           // string keys of `entries` -> position
  at::Tensor tensor;                             // kTensor (a storage is a flat one)

  PyValue() = default;
  PyValue(const PyValue&) = delete;
  PyValue& operator=(const PyValue&) = delete;
  ~PyValue();  // without recursion: a pickle may nest a million levels deep

  // The entry with string key `key` of a dict or an object's state; nullptr when there is none.
  const PyValue* get(const std::string& key) const;
  // Sets `key` (replacing an equal string key, as a dict does).
  void set(PyRef key, PyRef value);
};

// The storage that a persistent id ('storage', torch.<Type>Storage, key, location, numel) names:
// a flat tensor of `numel` elements of the type ("FloatStorage", ...).
using StorageLoader = std::function<at::Tensor(const std::string& key, const std::string& type, int64_t numel)>;

// The value that the pickle `data` (`size` bytes) of `path` builds. Throws DataError naming
// `path` for a global it refuses, an opcode it does not read, or bytes that are not a pickle.
PyRef unpickle_restricted(const std::string& path, const unsigned char* data, size_t size,
                          const StorageLoader& load_storage);

}  // namespace fairseq_cpp::checkpoint
