#include "fairseq_cpp/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string_view>
#include <vector>

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/csrc/jit/serialization/storage_context.h>
#include <torch/serialize.h>
#include "fairseq_cpp/core/torch.h"

#include "fairseq_cpp/checkpoint/fairseq_checkpoint.h"
#include "fairseq_cpp/checkpoint/integrity.h"
#include "fairseq_cpp/config/config.h"
#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::checkpoint {
namespace fs = std::filesystem;

namespace {

// A write that failed for lack of space (ENOSPC, EDQUOT): save_file adds the free space.
class DiskFullError : public OperationalError {
 public:
  using OperationalError::OperationalError;
};

// Throws OperationalError "`doing` `path`: strerror(err)" (DiskFullError for a full disk).
[[noreturn]] void raise_io(const char* doing, const std::string& path, int err) {
  if (err == ENOSPC || err == EDQUOT) raise<DiskFullError>("{} {}: {}", doing, path, std::strerror(err));
  raise<OperationalError>("{} {}: {}", doing, path, std::strerror(err));
}

// "N MiB of M MiB free in DIR": the free space of the filesystem holding `dir`.
std::string free_space(const fs::path& dir) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return fmt::format("free space in {} unknown", dir.string());
  auto mib = [](double bytes) { return fmt::format("{:.1f} MiB", bytes / (1 << 20)); };
  return fmt::format("{} of {} free in {}", mib(static_cast<double>(st.f_bavail) * st.f_frsize),
                     mib(static_cast<double>(st.f_blocks) * st.f_frsize), dir.string());
}

void write_all(int fd, const char* data, size_t size, const std::string& path) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      raise_io("cannot write", path, errno);
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
}

// `value` with every list as a plain list, recursively. LibTorch pickles a typed list (List[int],
// List[Tensor]) through torch.jit._pickle.build_intlist / build_tensorlist, which torch.load's
// weights_only mode (the default since torch 2.6) refuses; a plain list needs no global.
c10::IValue untyped(const c10::IValue& value) {
  if (value.isList()) {
    c10::impl::GenericList out(c10::AnyType::get());
    for (const c10::IValue& item : value.toListRef()) out.push_back(untyped(item));
    return out;
  }
  if (value.isGenericDict()) {
    auto in = value.toGenericDict();
    c10::impl::GenericDict out(in.keyType(), c10::AnyType::get());
    for (const auto& item : in) out.insert(item.key(), untyped(item.value()));
    return out;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> items;
    for (const c10::IValue& item : value.toTupleRef().elements()) items.push_back(untyped(item));
    return c10::ivalue::Tuple::create(std::move(items));
  }
  return value;
}

// torch::pickle_save's zip archive (what torch.load reads), streamed into `fd`: pickle_save builds
// the whole file in one growing vector first, about twice the model and optimizer state at its
// peak, while training's activations are still mapped.
void write_archive(int fd, const StateDict& state, const std::string& path) {
  std::vector<char> pickle_data;  // the structure; the tensors' bytes go straight to the file
  // No type tags on dicts (torch.jit._pickle.restore_type_tag, LibTorch 2.x writes them by default):
  // torch.load's weights_only mode, the default since torch 2.6, refuses that global.
  torch::jit::Pickler pickler(
      [&](const char* bytes, size_t size) { pickle_data.insert(pickle_data.end(), bytes, bytes + size); },
      /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr, /*get_tensor_id=*/nullptr,
      /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(untyped(c10::IValue(state)));
  pickler.stop();
  std::exception_ptr write_error;
  // The bytes go through the digest on their way to the file; the digest ends it (integrity.h).
  DigestWriter digest([&](const char* data, size_t size) { write_all(fd, data, size, path); });
  // After a failed write (a full disk) the rest is dropped but reported as written: a short count
  // makes the writer throw, and its destructor then finishes the archive and throws again, out of a
  // destructor (std::terminate). The first error comes back below.
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) -> size_t {
    if (write_error) return size;
    try {
      digest.write(static_cast<const char*>(data), size);
    } catch (const OperationalError&) {
      write_error = std::current_exception();
    }
    return size;
  });
  try {
    torch::jit::writeArchiveAndTensors("data", pickle_data.data(), pickle_data.size(), pickler.tensorData(), writer);
    writer.writeEndOfFile();
  } catch (const c10::Error& e) {
    if (!write_error) raise<OperationalError>("cannot write {}: {}", path, e.what_without_backtrace());
  }
  if (write_error) std::rethrow_exception(write_error);
  digest.finish();
}

// The unpickler sizes a storage by the element count that the pickle claims, not by its record's
// bytes: a storage larger than its record is refused (reading it would run past the record).
void check_storages(const std::string& path, const std::map<std::string, uint64_t>& record_sizes,
                    torch::jit::DeserializationStorageContext& storages) {
  for (const auto& [name, size] : record_sizes) {
    const auto at = name.rfind("/data/");
    if (at == std::string::npos) continue;
    const std::string key = name.substr(at + 6);
    if (storages.hasStorage(key) && storages.getStorage(key).nbytes() > size) {
      raise<DataError>("{} is damaged and was not used: record {} holds {} bytes, but its tensor storage claims {}",
                       path, one_line(name), size, storages.getStorage(key).nbytes());
    }
  }
}

// Whether the elements of `t` lie inside its storage (the pickle sets sizes, strides and offset
// freely), computed in int64 without overflow.
bool view_fits_storage(const at::Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) < 0) return false;
  if (t.numel() == 0) return true;
  int64_t lo = t.storage_offset(), hi = t.storage_offset(), span = 0, end = 0;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (__builtin_mul_overflow(t.size(d) - 1, t.stride(d), &span) ||
        __builtin_add_overflow(span < 0 ? lo : hi, span, span < 0 ? &lo : &hi))
      return false;
  }
  return lo >= 0 && !__builtin_add_overflow(hi, 1, &end) &&
         !__builtin_mul_overflow(end, static_cast<int64_t>(t.element_size()), &end) &&
         end <= static_cast<int64_t>(t.storage().nbytes());
}

// Every tensor anywhere in the loaded value fits its storage.
void check_tensor_views(const std::string& path, const c10::IValue& root) {
  std::vector<c10::IValue> todo{root};  // a worklist, not recursion: the nesting is the file's
  while (!todo.empty()) {
    c10::IValue v = std::move(todo.back());
    todo.pop_back();
    if (v.isGenericDict()) {
      for (const auto& item : v.toGenericDict()) todo.push_back(item.value());
    } else if (v.isList()) {
      for (const c10::IValue& item : v.toListRef()) todo.push_back(item);
    } else if (v.isTuple()) {
      for (const c10::IValue& item : v.toTupleRef().elements()) todo.push_back(item);
    } else if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (t.defined() && t.layout() == at::kStrided && !view_fits_storage(t)) {
        raise<DataError>("{} is damaged and was not used: a tensor of shape {} reaches past its storage of {} bytes",
                         path, c10::str(t.sizes()), t.storage().nbytes());
      }
    }
  }
}

// A whole file mapped copy-on-write, unmapped when the last storage that points into it goes.
struct Mapping {
  Mapping(void* base, size_t size) : base(base), size(size) {}
  ~Mapping() { ::munmap(base, size); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  void* base;
  size_t size;
};

// The deleter of a mapped record's storage: drops its reference to the mapping.
void release_mapping_reference(void* owner) { delete static_cast<std::shared_ptr<Mapping>*>(owner); }

// The storage of every tensor record ("ROOT/data/KEY", of the sizes verify_file found), as a view
// of the file mapped into memory: the unpickler takes them from `storages` instead of reading.
void map_storages(const std::string& path, const std::map<std::string, uint64_t>& record_sizes,
                  caffe2::serialize::PyTorchStreamReader& reader, torch::jit::DeserializationStorageContext& storages) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) raise_io("cannot open", path, errno);
  struct stat st {};
  void* base = MAP_FAILED;
  if (::fstat(fd, &st) == 0 && st.st_size > 0)
    base = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (base == MAP_FAILED) raise_io("cannot map", path, err);
  auto mapping = std::make_shared<Mapping>(base, static_cast<size_t>(st.st_size));
  for (const auto& [name, bytes] : record_sizes) {
    const auto at = name.find('/');
    if (at == std::string::npos || name.compare(at, 6, "/data/") != 0) continue;
    const std::string key = name.substr(at + 6);
    const size_t offset = reader.getRecordOffset("data/" + key);
    if (offset > mapping->size || bytes > mapping->size - offset)
      raise<DataError>("{} is damaged and was not used: record {} runs past the end of the file", path, name);
    auto* owner = new std::shared_ptr<Mapping>(mapping);
    at::DataPtr data(static_cast<char*>(base) + offset, owner, &release_mapping_reference, at::kCPU);
    storages.addStorage(key, c10::Storage(c10::Storage::use_byte_size_t(), bytes, std::move(data), nullptr, false));
  }
}

}  // namespace

void release_mapped_pages(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage() || t.storage().data_ptr().get_deleter() != &release_mapping_reference) return;
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(t.storage().data_ptr().get());
  const uintptr_t end = begin + t.storage().nbytes();
  const uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;  // whole pages inside
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

StateDict new_state_dict() { return c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get()); }

void save_file(const std::string& path, const StateDict& state) {
  fs::path target(path);
  fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(dir, ec);
  std::string tmp = (dir / temporary_name(target.filename().string())).string();
  try {
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) raise_io("cannot create", tmp, errno);
    try {
      write_archive(fd, state, tmp);
      if (::fsync(fd) != 0) raise_io("cannot fsync", tmp, errno);
    } catch (...) {
      ::close(fd);
      throw;
    }
    if (::close(fd) != 0) raise_io("cannot close", tmp, errno);
    if (::rename(tmp.c_str(), path.c_str()) != 0) raise_io("cannot rename", tmp, errno);
  } catch (const OperationalError& e) {
    ::unlink(tmp.c_str());
    const bool full = dynamic_cast<const DiskFullError*>(&e) != nullptr;
    raise<OperationalError>("cannot save checkpoint {}: {}{}; {}", path, e.what(),
                            full ? " (" + free_space(dir) + " without the unfinished file)" : "",
                            fs::exists(target, ec) ? "the previous file is unchanged" : "no file was written");
  }
  // The rename is durable only once the directory is: a power cut must not bring back the old name.
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::string temporary_name(const std::string& file_name) {
  return "." + file_name + ".tmp." + std::to_string(::getpid());
}

int remove_unfinished_saves(const std::string& dir) {
  static const std::regex pattern(R"(\..+\.tmp\.[0-9]+)");
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (!entry.is_regular_file(ec) || !std::regex_match(entry.path().filename().string(), pattern)) continue;
    if (fs::remove(entry.path(), ec)) ++removed;
  }
  return removed;
}

StateDict load_file(const std::string& path, Reading reading) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) raise<UserError>("checkpoint {}: no such file", path);
  const auto size = fs::file_size(path, ec);
  char magic[4] = {};
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) raise<OperationalError>("cannot read {}", path);
    in.read(magic, sizeof(magic));
  }
  if (ec || size < 4 || std::memcmp(magic, "PK\x03\x04", 4) != 0) {
    raise<DataError>("{} is not a checkpoint: expected a zip written by torch.save / fairseq-cpp, found {}", path,
                     size < 4 ? "a file of " + std::to_string(size) + " bytes" : "other content");
  }
  // Every byte checked before LibTorch reads any (its reader does not check the CRCs).
  const std::map<std::string, uint64_t> record_sizes = verify_file(path);
  c10::IValue value;
  auto storages = std::make_shared<torch::jit::DeserializationStorageContext>();
  try {
    // torch::pickle_load's reading, record by record from the file: the whole file is never in
    // memory at once (it held about the model and optimizer state twice over while resuming).
    caffe2::serialize::PyTorchStreamReader reader(path);
    if (reading == Reading::kMapped) map_storages(path, record_sizes, reader, *storages);
    const auto [pickle, pickle_size] = reader.getRecord("data.pkl");
    const auto* pickle_bytes = static_cast<const unsigned char*>(pickle.get());
    check_pickle(path, pickle_bytes, pickle_size);
    if (is_fairseq_pickle(pickle_bytes, pickle_size))
      return read_fairseq_checkpoint(path, reader, pickle_bytes, pickle_size,
                                     reading == Reading::kMapped ? storages.get() : nullptr);
    value = torch::jit::readArchiveAndTensors("data", "", "", c10::nullopt, c10::nullopt, c10::nullopt, reader,
                                              torch::jit::Unpickler::defaultTypeParser, storages);
  } catch (const c10::Error& e) {
    raise<DataError>("{} is truncated or not a fairseq-cpp checkpoint: {}", path,
                     one_line(core::torch_message(e.what_without_backtrace())));  // names from the pickle
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception&) {
    // LibTorch's unpickler indexes its memo and stack with .at(): a malformed pickle throws
    // std::out_of_range and the like, whose texts are LibTorch's internals.
    raise<DataError>("{} is not a fairseq-cpp checkpoint: its pickled data (data.pkl) is malformed", path);
  }
  check_storages(path, record_sizes, *storages);
  check_tensor_views(path, value);
  if (!value.isGenericDict()) raise<DataError>("{} is not a fairseq-cpp checkpoint: the top level is not a dict", path);
  StateDict state = value.toGenericDict();
  for (const char* key : {kModelKey, kConfigKey}) {
    if (!state.contains(key)) raise<DataError>("{} is not a fairseq-cpp checkpoint: no `{}` entry", path, key);
  }
  return state;
}

namespace {

// `t` on the CPU with a storage of its own: a view of a flat buffer (Optimizer::flatten) would
// otherwise be saved with the whole buffer behind it.
at::Tensor own_storage_cpu(const at::Tensor& t) {
  at::Tensor cpu = t.detach().cpu();
  const bool whole = cpu.storage_offset() == 0 && cpu.is_contiguous() &&
                     cpu.storage().nbytes() == static_cast<size_t>(cpu.numel()) * cpu.element_size();
  return whole ? cpu : cpu.clone();
}

}  // namespace

TensorDict model_state(const torch::nn::Module& module) {
  TensorDict out;
  std::map<const void*, at::Tensor> copies;  // a tensor shared by several names stays one tensor
  auto add = [&](const std::string& name, const at::Tensor& t) {
    auto it = copies.find(t.unsafeGetTensorImpl());
    if (it == copies.end()) it = copies.emplace(t.unsafeGetTensorImpl(), own_storage_cpu(t)).first;
    out.insert(name, it->second);
  };
  for (const auto& item : module.named_parameters(true)) add(item.key(), item.value());
  for (const auto& item : module.named_buffers(true)) add(item.key(), item.value());
  return out;
}

TensorDict model_entry(const StateDict& checkpoint, const std::string& origin) {
  const c10::IValue& model = checkpoint.at(kModelKey);
  if (!model.isGenericDict()) raise<DataError>("{}: `model` is not a dict of tensors", origin);
  TensorDict out;
  for (const auto& item : model.toGenericDict()) {
    if (!item.key().isString() || !item.value().isTensor()) {
      raise<DataError>("{}: `model` must map names to tensors", origin);
    }
    out.insert(item.key().toStringRef(), item.value().toTensor());
  }
  return out;
}

bool has_ema_entry(const StateDict& checkpoint) {
  if (!checkpoint.contains("extra_state") || !checkpoint.at("extra_state").isGenericDict()) return false;
  return checkpoint.at("extra_state").toGenericDict().contains("ema");
}

TensorDict ema_entry(const StateDict& checkpoint, const std::string& origin) {
  if (!has_ema_entry(checkpoint))
    raise<DataError>("{} holds no EMA weights (extra_state.ema): train with `ema.store_ema: true` to keep them",
                     origin);
  const c10::IValue& ema = checkpoint.at("extra_state").toGenericDict().at("ema");
  if (!ema.isGenericDict()) raise<DataError>("{}: `extra_state.ema` is not a dict of tensors", origin);
  TensorDict out;
  for (const auto& item : ema.toGenericDict()) {
    if (!item.key().isString() || !item.value().isTensor())
      raise<DataError>("{}: `extra_state.ema` must map names to tensors", origin);
    out.insert(item.key().toStringRef(), item.value().toTensor());
  }
  return out;
}

void load_model_state(torch::nn::Module& module, const TensorDict& state, const std::string& origin) {
  auto params = module.named_parameters(true);
  auto buffers = module.named_buffers(true);
  std::vector<std::string> missing;
  std::vector<std::string> mismatched;
  torch::NoGradGuard no_grad;
  auto copy_into = [&](const std::string& name, at::Tensor target) {
    auto it = state.find(name);
    if (it == state.end()) {
      missing.push_back(name);
      return;
    }
    const at::Tensor& source = it->value();
    if (!source.sizes().equals(target.sizes())) {
      mismatched.push_back(
          fmt::format("{} (file {}, model {})", name, c10::str(source.sizes()), c10::str(target.sizes())));
      return;
    }
    target.copy_(source);
    release_mapped_pages(source);
  };
  for (const auto& item : params) copy_into(item.key(), item.value());
  for (const auto& item : buffers) copy_into(item.key(), item.value());
  std::vector<std::string> unexpected;
  for (const auto& item : state) {
    const std::string& name = item.key();
    if (!params.contains(name) && !buffers.contains(name)) unexpected.push_back(name);
  }
  auto some = [](const std::vector<std::string>& names) {
    std::string out;
    for (size_t i = 0; i < names.size() && i < 3; ++i) out += (i ? ", " : "") + names[i];
    if (names.size() > 3) out += fmt::format(" and {} more", names.size() - 3);
    return out;
  };
  if (!mismatched.empty()) {
    raise<DataError>("{}: parameter shapes differ from the model's: {}", origin, some(mismatched));
  }
  if (!missing.empty()) raise<DataError>("{}: parameters missing: {}", origin, some(missing));
  if (!unexpected.empty()) {
    raise<DataError>("{}: parameters the model does not have: {}", origin, some(unexpected));
  }
}

config::Config config_entry(const StateDict& checkpoint, const std::string& origin) {
  const c10::IValue& cfg = checkpoint.at(kConfigKey);
  if (!cfg.isString()) raise<DataError>("{}: `cfg` is not a YAML string", origin);
  // load_config reads files; the YAML goes through a private temporary file.
  char tmpl[] = "/tmp/fairseq-cpp-cfg-XXXXXX";
  int fd = ::mkstemp(tmpl);
  if (fd < 0) raise<OperationalError>("cannot create a temporary file: {}", std::strerror(errno));
  const std::string& yaml = cfg.toStringRef();
  try {
    write_all(fd, yaml.data(), yaml.size(), tmpl);
  } catch (...) {
    ::close(fd);
    ::unlink(tmpl);
    throw;
  }
  ::close(fd);
  try {
    config::Config out = config::load_config(tmpl);
    ::unlink(tmpl);
    return out;
  } catch (const ConfigError& e) {
    ::unlink(tmpl);
    std::string problems;
    for (const auto& p : e.problems()) problems += (problems.empty() ? "" : "; ") + one_line(p);
    raise<DataError>("{}: the stored config is not valid: {}", origin, problems);
  }
}

}  // namespace fairseq_cpp::checkpoint
