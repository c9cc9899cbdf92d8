#include "fairseq_cpp/checkpoint/fairseq_checkpoint.h"

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/storage_context.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fairseq_cpp/checkpoint/pickle_machine.h"
#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::checkpoint {
namespace {

namespace fs = std::filesystem;
using Kind = PyValue::Kind;
// fairseq's arguments by name, flat (v0.9's Namespace, or the sections of a newer cfg).
using Args = std::map<std::string, const PyValue*>;

// An omegaconf node (a stand-in of DictConfig or a ValueNode) as the value it holds.
const PyValue* plain(const PyValue* v) {
  for (int hops = 0; v != nullptr && v->kind == Kind::kObject && hops < 8; ++hops) {
    const PyValue* inner = v->get("_content");
    if (inner == nullptr) inner = v->get("_val");
    if (inner == nullptr) break;
    v = inner;
  }
  return v;
}

bool is_none(const PyValue* v) { return v == nullptr || v->kind == Kind::kNone; }

// The entries of a dict or an object's state (a Namespace's fields) into `out`.
void add_fields(const PyValue* holder, Args& out) {
  holder = plain(holder);
  if (holder == nullptr || (holder->kind != Kind::kDict && holder->kind != Kind::kObject)) return;
  for (const auto& [key, value] : holder->entries)
    if (key->kind == Kind::kString && key->text != "_name") out[key->text] = plain(value.get());
}

Args fairseq_args(const PyValue& root, const std::string& path) {
  Args out;
  if (const PyValue* args = root.get("args"); !is_none(args)) {
    add_fields(args, out);
    return out;
  }
  const PyValue* cfg = plain(root.get("cfg"));
  if (is_none(cfg)) raise<DataError>("{}: a fairseq checkpoint with neither `args` nor `cfg`", path);
  for (const char* group : {"common", "dataset", "optimization", "checkpoint", "task", "criterion", "optimizer",
                            "lr_scheduler", "distributed_training", "model"})
    add_fields(cfg->get(group), out);
  for (const auto& [group, name] : std::vector<std::pair<std::string, std::string>>{{"criterion", "criterion"},
                                                                                    {"optimizer", "optimizer"},
                                                                                    {"lr_scheduler", "lr_scheduler"},
                                                                                    {"task", "task"}}) {
    const PyValue* section = plain(cfg->get(group));
    if (section != nullptr && !is_none(plain(section->get("_name")))) out[name] = plain(section->get("_name"));
  }
  if (out.count("max_sentences") == 0 && out.count("batch_size") > 0) out["max_sentences"] = out["batch_size"];  // 0.12
  const PyValue* model = plain(cfg->get("model"));
  if (out.count("arch") == 0 && model != nullptr) {
    const PyValue* arch = plain(model->get("arch"));
    out["arch"] = is_none(arch) ? plain(model->get("_name")) : arch;
  }
  return out;
}

const PyValue* arg(const Args& args, const std::string& name) {
  auto it = args.find(name);
  return it == args.end() || is_none(it->second) ? nullptr : it->second;
}

std::string text_of(const PyValue& v) {
  switch (v.kind) {
    case Kind::kString:
      return v.text;
    case Kind::kBool:
      return v.boolean ? "True" : "False";
    case Kind::kInt:
      return std::to_string(v.integer);
    case Kind::kFloat:
      return fmt::format("{}", v.number);
    default:
      return "<" + v.text + ">";
  }
}

// A YAML float as Python's repr writes it, with a dot before an exponent (as fairseq-import).
std::string yaml_float(double x) {
  if (std::isnan(x)) return ".nan";
  if (std::isinf(x)) return x > 0 ? ".inf" : "-.inf";
  std::string text = fmt::format("{}", x);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  if (text.find('e') != std::string::npos && text.find('.') == std::string::npos) text.insert(text.find('e'), ".0");
  return text;
}

std::string yaml_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) out += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
  return out + "\"";
}

enum class As { kStr, kInt, kFloat, kBool };

// fairseq's value `v` as YAML of type `as`; DataError when it is not one.
std::string yaml_value(const PyValue& v, As as, const std::string& name, const std::string& path) {
  const bool number = v.kind == Kind::kInt || v.kind == Kind::kBool || v.kind == Kind::kFloat;
  const double x = v.kind == Kind::kFloat  ? v.number
                   : v.kind == Kind::kBool ? v.boolean
                                           : static_cast<double>(v.integer);
  switch (as) {
    case As::kStr:
      return yaml_string(text_of(v));
    case As::kBool:
      if (number) return x != 0 ? "true" : "false";
      break;
    case As::kInt:
      if (number) return std::to_string(static_cast<int64_t>(x));
      break;
    case As::kFloat:
      if (number) return yaml_float(x);
      break;
  }
  raise<DataError>("{}: fairseq's `{}` is `{}`, not a number", path, name, text_of(v));
}

// "(0.9, 0.98)", "0.9,0.98" or a list, as a YAML list of floats.
std::string yaml_float_list(const PyValue& v, const std::string& name, const std::string& path) {
  std::vector<std::string> out;
  if (v.kind == Kind::kList || v.kind == Kind::kTuple) {
    for (const auto& item : v.items) out.push_back(yaml_value(*item, As::kFloat, name, path));
  } else if (v.kind == Kind::kString) {
    std::string text = v.text;
    for (char& c : text)
      if (c == '(' || c == ')' || c == '[' || c == ']') c = ' ';
    size_t start = 0;
    while (start <= text.size()) {
      const size_t comma = std::min(text.find(',', start), text.size());
      const std::string item = text.substr(start, comma - start);
      if (item.find_first_not_of(' ') != std::string::npos) {
        char* end = nullptr;
        const double x = std::strtod(item.c_str(), &end);
        if (end == item.c_str() || std::string_view(end).find_first_not_of(' ') != std::string_view::npos)
          raise<DataError>("{}: fairseq's `{}` is `{}`, not a list of numbers", path, name, v.text);
        out.push_back(yaml_float(x));
      }
      start = comma + 1;
    }
  } else {
    out.push_back(yaml_value(v, As::kFloat, name, path));
  }
  return "[" + fmt::format("{}", fmt::join(out, ", ")) + "]";
}

void check_architecture(const Args& args, const std::string& path) {
  const PyValue* arch = arg(args, "arch");
  const std::string name = arch == nullptr ? "None" : text_of(*arch);
  if (name.rfind("transformer", 0) != 0 || name == "transformer_align")
    raise<DataError>("{}: arch `{}` is not a transformer that fairseq-cpp has", path, name);
  for (const char* key : {"adaptive_softmax_cutoff", "adaptive_input", "no_cross_attention", "cross_self_attention",
                          "layer_wise_attention"}) {
    const PyValue* v = arg(args, key);
    const bool off = v == nullptr || (v->kind == Kind::kBool && !v->boolean) ||
                     (v->kind == Kind::kInt && v->integer == 0) || (v->kind == Kind::kString && v->text.empty());
    if (!off) raise<DataError>("{}: `{}` = {} is not supported by fairseq-cpp", path, key, text_of(*v));
  }
  const PyValue *input = arg(args, "decoder_input_dim"), *embed = arg(args, "decoder_embed_dim");
  if (input != nullptr && embed != nullptr && text_of(*input) != text_of(*embed))
    raise<DataError>("{}: decoder_input_dim != decoder_embed_dim is not supported by fairseq-cpp", path);
}

struct Key {
  const char* section;
  const char* key;
  const char* fairseq;
  As as;
};

// What tools/fairseq-import maps, key for key.
const std::vector<Key>& mapped_keys() {
  static const std::vector<Key> keys = [] {
    std::vector<Key> k;
    for (const auto& [name, as] :
         std::vector<std::pair<const char*, As>>{{"activation_fn", As::kStr},
                                                 {"dropout", As::kFloat},
                                                 {"attention_dropout", As::kFloat},
                                                 {"activation_dropout", As::kFloat},
                                                 {"encoder_embed_dim", As::kInt},
                                                 {"encoder_ffn_embed_dim", As::kInt},
                                                 {"encoder_layers", As::kInt},
                                                 {"encoder_attention_heads", As::kInt},
                                                 {"encoder_normalize_before", As::kBool},
                                                 {"encoder_learned_pos", As::kBool},
                                                 {"decoder_embed_dim", As::kInt},
                                                 {"decoder_ffn_embed_dim", As::kInt},
                                                 {"decoder_layers", As::kInt},
                                                 {"decoder_attention_heads", As::kInt},
                                                 {"decoder_normalize_before", As::kBool},
                                                 {"decoder_learned_pos", As::kBool},
                                                 {"decoder_output_dim", As::kInt},
                                                 {"share_decoder_input_output_embed", As::kBool},
                                                 {"share_all_embeddings", As::kBool},
                                                 {"no_scale_embedding", As::kBool},
                                                 {"layernorm_embedding", As::kBool},
                                                 {"no_token_positional_embeddings", As::kBool}})
      k.push_back({"model", name, name, as});
    const std::vector<Key> other{{"task", "source_lang", "source_lang", As::kStr},
                                 {"task", "target_lang", "target_lang", As::kStr},
                                 {"task", "left_pad_source", "left_pad_source", As::kBool},
                                 {"task", "left_pad_target", "left_pad_target", As::kBool},
                                 {"task", "max_source_positions", "max_source_positions", As::kInt},
                                 {"task", "max_target_positions", "max_target_positions", As::kInt},
                                 {"criterion", "_name", "criterion", As::kStr},
                                 {"criterion", "label_smoothing", "label_smoothing", As::kFloat},
                                 {"optimizer", "_name", "optimizer", As::kStr},
                                 {"optimizer", "adam_eps", "adam_eps", As::kFloat},
                                 {"optimizer", "weight_decay", "weight_decay", As::kFloat},
                                 {"optimizer", "momentum", "momentum", As::kFloat},
                                 {"lr_scheduler", "_name", "lr_scheduler", As::kStr},
                                 {"lr_scheduler", "warmup_updates", "warmup_updates", As::kInt},
                                 {"lr_scheduler", "warmup_init_lr", "warmup_init_lr", As::kFloat},
                                 {"lr_scheduler", "lr_shrink", "lr_shrink", As::kFloat},
                                 {"optimization", "max_epoch", "max_epoch", As::kInt},
                                 {"optimization", "max_update", "max_update", As::kInt},
                                 {"optimization", "clip_norm", "clip_norm", As::kFloat},
                                 {"optimization", "sentence_avg", "sentence_avg", As::kBool},
                                 {"dataset", "max_tokens", "max_tokens", As::kInt},
                                 {"dataset", "batch_size", "max_sentences", As::kInt},
                                 {"dataset", "required_batch_size_multiple", "required_batch_size_multiple", As::kInt},
                                 {"common", "seed", "seed", As::kInt}};
    k.insert(k.end(), other.begin(), other.end());
    return k;
  }();
  return keys;
}

// Values fairseq-cpp has of the keys that name a component; another is left out (its default stays).
bool supported(const std::string& section, const std::string& value) {
  static const std::map<std::string, std::set<std::string>> kSupported{
      {"criterion", {"cross_entropy", "label_smoothed_cross_entropy"}},
      {"optimizer", {"adam", "sgd", "nag"}},
      {"lr_scheduler", {"fixed", "inverse_sqrt", "polynomial_decay", "cosine", "reduce_lr_on_plateau"}}};
  auto it = kSupported.find(section);
  return it == kSupported.end() || it->second.count(value) > 0;
}

std::string config_yaml(const Args& args, const std::string& path) {
  check_architecture(args, path);
  static const std::set<std::string> kOurArchs{"transformer",
                                               "transformer_wmt_en_de",
                                               "transformer_iwslt_de_en",
                                               "transformer_vaswani_wmt_en_de_big",
                                               "transformer_wmt_en_de_big",
                                               "transformer_tiny"};
  const std::string arch = text_of(*arg(args, "arch"));
  std::map<std::string, std::vector<std::string>> sections;  // section -> "key: value" lines
  std::vector<std::string> order{"model"};
  auto add = [&](const std::string& section, const std::string& line) {
    if (sections.count(section) == 0 && section != "model") order.push_back(section);
    sections[section].push_back(line);
  };
  add("model", "arch: " + yaml_string(kOurArchs.count(arch) ? arch : "transformer"));
  for (const Key& k : mapped_keys()) {
    const PyValue* v = arg(args, k.fairseq);
    if (v == nullptr || (std::string(k.key) == "_name" && !supported(k.section, text_of(*v)))) continue;
    add(k.section, std::string(k.key) + ": " + yaml_value(*v, k.as, k.fairseq, path));
  }
  if (const PyValue* v = arg(args, "adam_betas"))
    add("optimizer", "adam_betas: " + yaml_float_list(*v, "adam_betas", path));
  if (const PyValue* v = arg(args, "lr")) add("optimization", "lr: " + yaml_float_list(*v, "lr", path));
  if (const PyValue* v = arg(args, "update_freq")) {
    std::vector<std::string> freq;
    if (v->kind == Kind::kList || v->kind == Kind::kTuple) {
      for (const auto& item : v->items) freq.push_back(yaml_value(*item, As::kInt, "update_freq", path));
    } else {
      freq.push_back(yaml_value(*v, As::kInt, "update_freq", path));
    }
    add("optimization", "update_freq: [" + fmt::format("{}", fmt::join(freq, ", ")) + "]");
  }
  std::string out = "# imported from fairseq checkpoint " + fs::path(path).filename().string() + "\n";
  for (const std::string& section : order) {
    out += section + ":\n";
    for (const std::string& line : sections[section]) out += "  " + line + "\n";
  }
  return out;
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool flag_on(const Args& args, const char* name) {
  const PyValue* v = arg(args, name);
  return v != nullptr && ((v->kind == Kind::kBool && v->boolean) || (v->kind == Kind::kInt && v->integer != 0));
}

// fairseq's state dict as float32 parameters under our names: 0.12's separate output projection is
// v0.9's `decoder.embed_out`, and a shared one is the embedding itself.
c10::impl::GenericDict model_tensors(const PyValue& root, const Args& args, const std::string& path) {
  const PyValue* model = plain(root.get("model"));
  if (model == nullptr || model->kind != Kind::kDict)
    raise<DataError>("{}: a fairseq checkpoint whose `model` is not a state dict", path);
  const bool shared = flag_on(args, "share_decoder_input_output_embed") || flag_on(args, "share_all_embeddings");
  c10::impl::GenericDict out(c10::StringType::get(), c10::TensorType::get());
  for (const auto& [key, value] : model->entries) {
    if (key->kind != Kind::kString) raise<DataError>("{}: a model entry whose name is not a string", path);
    std::string name = key->text;
    if (ends_with(name, ".version") || ends_with(name, "._float_tensor")) continue;  // fairseq's bookkeeping
    if (value->kind != Kind::kTensor) raise<DataError>("{}: model entry `{}` is not a tensor", path, name);
    if (name == "decoder.output_projection.weight") {
      if (shared) continue;
      name = "decoder.embed_out";
    }
    out.insert(name, value->tensor.to(at::kFloat).contiguous());
  }
  if (out.size() < 2) raise<DataError>("{}: the model has {} parameters; expected a transformer", path, out.size());
  return out;
}

int64_t int_or(const PyValue* v, int64_t fallback) {
  v = plain(v);
  return v != nullptr && v->kind == Kind::kInt ? v->integer : fallback;
}

StateDict extra_state(const PyValue& root, const Args& args, const std::string& path) {
  StateDict extra = new_state_dict();
  extra.insert("imported_from", fs::absolute(path).lexically_normal().string());
  const PyValue* history = root.get("optimizer_history");
  const PyValue* last = history != nullptr && history->kind == Kind::kList && !history->items.empty()
                            ? history->items.back().get()
                            : nullptr;
  extra.insert("num_updates", int_or(last == nullptr ? nullptr : last->get("num_updates"), 0));
  const PyValue* fairseq_extra = plain(root.get("extra_state"));
  const PyValue* iterator = fairseq_extra == nullptr ? nullptr : plain(fairseq_extra->get("train_iterator"));
  extra.insert("epoch", int_or(iterator == nullptr ? nullptr : iterator->get("epoch"), 0));
  extra.insert("iterations_in_epoch", int_or(iterator == nullptr ? nullptr : iterator->get("iterations_in_epoch"), 0));
  extra.insert("world_size", std::max<int64_t>(1, int_or(arg(args, "distributed_world_size"), 1)));
  // The best metric: a number, or a tensor of one (a numpy scalar is not decoded: it is left out).
  const PyValue* best = fairseq_extra == nullptr ? nullptr : plain(fairseq_extra->get("best"));
  if (best != nullptr && (best->kind == Kind::kFloat || best->kind == Kind::kInt))
    extra.insert("best", best->kind == Kind::kFloat ? best->number : static_cast<double>(best->integer));
  if (best != nullptr && best->kind == Kind::kTensor && best->tensor.numel() == 1)
    extra.insert("best", best->tensor.to(at::kDouble).item<double>());
  return extra;
}

// One storage record of the zip as a flat tensor of its type: a view of the mapped file, or read.
at::Tensor read_storage(const std::string& path, caffe2::serialize::PyTorchStreamReader& reader,
                        torch::jit::DeserializationStorageContext* mapped, const std::string& key,
                        const std::string& type, int64_t numel) {
  static const std::map<std::string, at::ScalarType> kTypes{
      {"FloatStorage", at::kFloat},       {"DoubleStorage", at::kDouble}, {"HalfStorage", at::kHalf},
      {"BFloat16Storage", at::kBFloat16}, {"LongStorage", at::kLong},     {"IntStorage", at::kInt},
      {"ShortStorage", at::kShort},       {"CharStorage", at::kChar},     {"ByteStorage", at::kByte},
      {"BoolStorage", at::kBool}};
  auto type_it = kTypes.find(type);
  if (type_it == kTypes.end())
    raise<DataError>("{}: a storage of type {}, which a checkpoint does not hold", path, type);
  const std::string record = "data/" + key;
  if (key.empty() || key.find('/') != std::string::npos || !reader.hasRecord(record))
    raise<DataError>("{}: the storage `{}` that data.pkl names is not in the file", path, key);
  const auto item = static_cast<uint64_t>(c10::elementSize(type_it->second));
  const auto check_size = [&](uint64_t bytes) {
    if (numel < 0 || static_cast<uint64_t>(numel) > bytes || static_cast<uint64_t>(numel) * item != bytes)
      raise<DataError>("{}: storage `{}` holds {} bytes, not {} elements of {}", path, key, bytes, numel, type);
  };
  if (mapped != nullptr && mapped->hasStorage(key)) {
    c10::Storage storage = mapped->getStorage(key);
    check_size(storage.nbytes());
    return at::empty({0}, at::TensorOptions().dtype(type_it->second)).set_(storage, 0, {numel}, {1});
  }
  auto [data, bytes] = reader.getRecord(record);
  check_size(bytes);
  auto owner = std::make_shared<at::DataPtr>(std::move(data));
  return at::from_blob(
      owner->get(), {numel}, [owner](void*) {}, at::TensorOptions().dtype(type_it->second));
}

}  // namespace

bool is_fairseq_pickle(const unsigned char* pickle, size_t size) {
  static constexpr std::string_view kMarker = "optimizer_history";
  const std::string_view text(reinterpret_cast<const char*>(pickle), size);
  return text.find(kMarker) != std::string_view::npos;
}

StateDict read_fairseq_checkpoint(const std::string& path, caffe2::serialize::PyTorchStreamReader& reader,
                                  const unsigned char* pickle, size_t size,
                                  torch::jit::DeserializationStorageContext* mapped) {
  const PyRef root =
      unpickle_restricted(path, pickle, size, [&](const std::string& key, const std::string& type, int64_t numel) {
        return read_storage(path, reader, mapped, key, type, numel);
      });
  if (root->kind != Kind::kDict) raise<DataError>("{}: a fairseq checkpoint whose top level is not a dict", path);
  const Args args = fairseq_args(*root, path);
  StateDict out = new_state_dict();
  out.insert(kModelKey, model_tensors(*root, args, path));
  out.insert(kConfigKey, config_yaml(args, path));
  out.insert("extra_state", extra_state(*root, args, path));
  return out;
}

}  // namespace fairseq_cpp::checkpoint
