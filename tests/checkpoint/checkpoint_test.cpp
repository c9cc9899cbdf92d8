// The checkpoint file: atomic save, load, the model state by fairseq name, and clear errors for
// missing, truncated and foreign files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include <caffe2/serialize/inline_container.h>
#include <torch/serialize.h>
#include "tests/support/torch.h"

#include "fairseq_cpp/checkpoint/checkpoint.h"
#include "fairseq_cpp/checkpoint/integrity.h"
#include "fairseq_cpp/checkpoint/load_model.h"
#include "fairseq_cpp/config/config.h"
#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/models/transformer.h"
#include "tests/support/test_support.h"

namespace fairseq_cpp::checkpoint {
namespace {
namespace fs = std::filesystem;

std::shared_ptr<models::TransformerModel> tiny_model(uint64_t seed) {
  torch::manual_seed(seed);
  config::ModelConfig m;
  m.arch = "transformer_tiny";
  m.share_decoder_input_output_embed = true;
  return std::make_shared<models::TransformerModel>(models::resolve_transformer_options(m, config::TaskConfig{}),
                                                    models::Vocabularies{20, 24, 1, false});
}

StateDict sample_checkpoint(const models::TransformerModel& model) {
  config::Config cfg;
  cfg.model.arch = "transformer_tiny";
  cfg.model.share_decoder_input_output_embed = true;
  StateDict state = new_state_dict();
  state.insert(kModelKey, model_state(model));
  state.insert(kConfigKey, config::dump_config(cfg));
  StateDict extra = new_state_dict();
  extra.insert("num_updates", int64_t{17});
  extra.insert("best", 4.5);
  state.insert("extra_state", extra);
  return state;
}

std::string expect_error_text(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(Checkpoint, SaveAndLoadRoundTripTheModelAndConfig) {
  testing::TempDir dir;
  auto a = tiny_model(1);
  const std::string path = dir.path() + "/sub/checkpoint_last.pt";
  save_file(path, sample_checkpoint(*a));
  // Atomic: nothing but the file itself is left in the directory.
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir.path() + "/sub")) {
    ++entries;
    EXPECT_EQ(e.path().filename(), "checkpoint_last.pt");
  }
  EXPECT_EQ(entries, 1);

  StateDict loaded = load_file(path);
  auto b = tiny_model(2);
  load_model_state(*b, model_entry(loaded, path), path);
  auto pa = a->named_parameters(true), pb = b->named_parameters(true);
  ASSERT_EQ(pa.size(), pb.size());
  for (const auto& item : pa) EXPECT_TRUE(torch::equal(item.value(), pb[item.key()])) << item.key();
  config::Config cfg = config_entry(loaded, path);
  EXPECT_EQ(cfg.model.arch, "transformer_tiny");
  EXPECT_EQ(cfg.model.share_decoder_input_output_embed, std::optional<bool>(true));
  EXPECT_EQ(loaded.at("extra_state").toGenericDict().at("num_updates").toInt(), 17);
}

// load_model builds its model without drawing initial values (nn::ParametersFromCheckpoint) and
// takes every parameter from the file.
TEST(Checkpoint, LoadModelTakesEveryParameterFromTheFileAndDrawsNothing) {
  testing::TempDir dir;
  auto a = tiny_model(1);
  const std::string path = dir.path() + "/checkpoint_last.pt";
  save_file(path, sample_checkpoint(*a));
  torch::manual_seed(9);
  const at::Tensor first_draw = torch::rand({8});
  torch::manual_seed(9);
  LoadedModel loaded = load_model(path, models::Vocabularies{20, 24, 1, false}, torch::kCPU);
  EXPECT_TRUE(torch::equal(torch::rand({8}), first_draw));
  auto pa = a->named_parameters(true), pb = loaded.model->named_parameters(true);
  ASSERT_EQ(pa.keys(), pb.keys());
  for (const auto& item : pa) EXPECT_TRUE(torch::equal(item.value(), pb[item.key()])) << item.key();

  // The model is built uninitialised: a file without one of its parameters is refused, by name.
  StateDict lacking = sample_checkpoint(*a);
  TensorDict weights = model_entry(lacking, path);
  ASSERT_EQ(weights.erase("encoder.layers.0.fc1.weight"), 1u);
  lacking.insert_or_assign(kModelKey, weights);
  save_file(path, lacking);
  const std::string text = expect_error_text([&] {
    load_model(path, models::Vocabularies{20, 24, 1, false}, torch::kCPU);
  });
  EXPECT_NE(text.find("encoder.layers.0.fc1.weight"), std::string::npos) << text;
}

// This process's resident set in MiB.
double resident_mib() { return static_cast<double>(testing::resident_bytes()) / (1 << 20); }

// A mapped checkpoint's record gives its pages back once load_model_state copied it: the resident
// set shrinks by the record's 32 MiB, and the record still reads its values (from the file again).
// A tensor of a checkpoint read into memory is left alone.
TEST(Checkpoint, MappedRecordsGiveTheirPagesBackOnceCopied) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/checkpoint_last.pt";
  torch::manual_seed(4);
  const at::Tensor values = torch::randn({8 << 20});  // 32 MiB
  {
    StateDict state = new_state_dict();
    TensorDict model;
    model.insert("w", values);
    state.insert(kModelKey, model);
    state.insert(kConfigKey, config::dump_config(config::Config{}));
    save_file(path, state);
  }
  torch::nn::Module module;
  at::Tensor w = module.register_parameter("w", torch::zeros({8 << 20}));
  StateDict mapped = load_file(path, Reading::kMapped);
  const at::Tensor record = model_entry(mapped, path).at("w");
  const double before = resident_mib();
  EXPECT_EQ(record.sum().item<float>(), values.sum().item<float>());  // its pages are now resident
  const double touched = resident_mib();
  EXPECT_GT(touched - before, 24.0) << "reading the mapped record made it resident";
  load_model_state(module, model_entry(mapped, path), path);
  const double copied = resident_mib();
  EXPECT_LT(copied, touched - 24.0) << "resident MiB: " << before << " before, " << touched << " read, " << copied
                                    << " copied";
  EXPECT_TRUE(torch::equal(w, values));
  EXPECT_TRUE(torch::equal(record, values)) << "read again from the file";

  StateDict read = load_file(path);
  const at::Tensor in_memory = model_entry(read, path).at("w");
  release_mapped_pages(in_memory);
  EXPECT_TRUE(torch::equal(in_memory, values)) << "not mapped: untouched";
}

TEST(Checkpoint, OnlyTheUnfinishedFilesOfSavesAreRemoved) {
  testing::TempDir dir;
  EXPECT_EQ(temporary_name("checkpoint_last.pt"), ".checkpoint_last.pt.tmp." + std::to_string(::getpid()));
  for (const char* name : {".checkpoint_last.pt.tmp.4242", ".checkpoint_1_10.pt.tmp.7", "checkpoint_last.pt",
                           ".fairseq-cpp-train.lock", ".notes.tmp.x", "model.tmp.12", "checkpoint_best.pt.tmp.3x"})
    dir.write(name, "x");
  fs::create_directory(dir.path() + "/.dir.tmp.5");  // only files go
  EXPECT_EQ(remove_unfinished_saves(dir.path()), 2);
  std::set<std::string> left;
  for (const auto& e : fs::directory_iterator(dir.path())) left.insert(e.path().filename().string());
  EXPECT_EQ(left, (std::set<std::string>{"checkpoint_last.pt", ".fairseq-cpp-train.lock", ".notes.tmp.x",
                                         "model.tmp.12", "checkpoint_best.pt.tmp.3x", ".dir.tmp.5"}));
  EXPECT_EQ(remove_unfinished_saves(dir.path() + "/missing"), 0);
}

TEST(Checkpoint, MissingTruncatedAndForeignFilesAreClearErrors) {
  testing::TempDir dir;
  const std::string missing = dir.path() + "/nope.pt";
  EXPECT_THROW(load_file(missing), UserError);
  EXPECT_NE(expect_error_text([&] { load_file(missing); }).find(missing), std::string::npos);

  const std::string good = dir.path() + "/good.pt";
  save_file(good, sample_checkpoint(*tiny_model(1)));
  std::string bytes = testing::read_file(good);
  const std::string truncated = dir.write("truncated.pt", bytes.substr(0, bytes.size() / 2));
  std::string text = expect_error_text([&] { load_file(truncated); });
  EXPECT_NE(text.find(truncated), std::string::npos) << text;
  EXPECT_NE(text.find("truncated"), std::string::npos) << text;
  EXPECT_THROW(load_file(truncated), DataError);

  const std::string foreign = dir.write("notes.pt", "model: not a checkpoint\n");
  text = expect_error_text([&] { load_file(foreign); });
  EXPECT_NE(text.find(foreign), std::string::npos) << text;
  EXPECT_NE(text.find("expected a zip"), std::string::npos) << text;

  // A torch zip that is not ours: a bare tensor, and a dict without "cfg".
  const std::string tensor_file = dir.path() + "/tensor.pt";
  {
    auto data = torch::pickle_save(torch::ones({2}));
    std::ofstream(tensor_file, std::ios::binary).write(data.data(), static_cast<std::streamsize>(data.size()));
  }
  EXPECT_THROW(load_file(tensor_file), DataError);
  StateDict no_cfg = new_state_dict();
  no_cfg.insert(kModelKey, model_state(*tiny_model(1)));
  no_cfg.insert("other", int64_t{1});
  save_file(dir.path() + "/nocfg.pt", no_cfg);
  EXPECT_NE(expect_error_text([&] { load_file(dir.path() + "/nocfg.pt"); }).find("no `cfg`"), std::string::npos);
}

TEST(Checkpoint, EveryChangedByteIsRefusedWithOneLine) {
  // Each byte of a whole checkpoint changed in turn (zip headers, pickle, tensors, padding,
  // central directory, end records, digest): every copy is refused, with one line naming the file,
  // and LibTorch never sees it.
  // A small checkpoint: every byte; a model's (half a megabyte): 300 seeded positions.
  testing::TempDir dir;
  StateDict small = new_state_dict();
  TensorDict weights;
  weights.insert("w", torch::arange(12, torch::kFloat).reshape({3, 4}));
  weights.insert("b", torch::ones({4}));
  small.insert(kModelKey, weights);
  small.insert(kConfigKey, std::string("model:\n  arch: transformer\n"));
  const std::string small_path = dir.path() + "/small.pt", model_path = dir.path() + "/model.pt";
  save_file(small_path, small);
  save_file(model_path, sample_checkpoint(*tiny_model(1)));
  std::vector<std::pair<std::string, size_t>> flips;  // (file, byte)
  const std::string small_bytes = testing::read_file(small_path), model_bytes = testing::read_file(model_path);
  for (size_t i = 0; i < small_bytes.size(); ++i) flips.emplace_back(small_bytes, i);
  std::mt19937_64 rng(2026);
  for (int k = 0; k < 300; ++k) flips.emplace_back(model_bytes, rng() % model_bytes.size());
  for (const std::string* bytes : {&small_bytes, &model_bytes})
    ASSERT_NE(bytes->find(kDigestPrefix), std::string::npos) << "no digest in the zip comment";
  load_file(small_path);
  load_file(model_path);
  const std::string bad = dir.path() + "/bad.pt";
  std::map<std::string, int> reasons;
  for (const auto& [bytes, i] : flips) {
    std::string copy = bytes;
    copy[i] = static_cast<char>(copy[i] ^ (i % 2 == 0 ? 0x01 : 0x80));
    std::ofstream(bad, std::ios::binary | std::ios::trunc).write(copy.data(), static_cast<std::streamsize>(copy.size()));
    try {
      load_file(bad);
      ADD_FAILURE() << "byte " << i << " of " << bytes.size() << " changed and the checkpoint loaded";
    } catch (const UserError& e) {
      const std::string text = e.what();
      ASSERT_EQ(text.find('\n'), std::string::npos) << "byte " << i << ": " << text;
      ASSERT_NE(text.find(bad), std::string::npos) << "byte " << i << ": " << text;
      ASSERT_EQ(text.find("INTERNAL ASSERT"), std::string::npos) << "byte " << i << ": " << text;
      ++reasons[text.substr(text.find("used: ") + 6, 24)];
    }
  }
  // The record checks name the record whose bytes changed (not only the digest).
  int crc = 0;
  for (const auto& [reason, n] : reasons) crc += reason.rfind("record ", 0) == 0 ? n : 0;
  EXPECT_GT(crc, static_cast<int>(flips.size() / 2));
}

TEST(Checkpoint, ModelStateMismatchesNameTheParameters) {
  auto a = tiny_model(1);
  TensorDict state = model_state(*a);
  ASSERT_EQ(state.erase("decoder.layers.1.fc2.bias"), 1u);
  std::string text = expect_error_text([&] { load_model_state(*a, state, "x.pt"); });
  EXPECT_NE(text.find("decoder.layers.1.fc2.bias"), std::string::npos) << text;
  EXPECT_NE(text.find("missing"), std::string::npos) << text;

  state = model_state(*a);
  state.insert("decoder.embed_out", torch::zeros({24, 64}));
  text = expect_error_text([&] { load_model_state(*a, state, "x.pt"); });
  EXPECT_NE(text.find("decoder.embed_out"), std::string::npos) << text;

  state = model_state(*a);
  state.insert_or_assign("encoder.embed_tokens.weight", torch::zeros({21, 64}));
  text = expect_error_text([&] { load_model_state(*a, state, "x.pt"); });
  EXPECT_NE(text.find("encoder.embed_tokens.weight"), std::string::npos) << text;
  EXPECT_NE(text.find("[21, 64]"), std::string::npos) << text;
}

// A checkpoint of hand-made records with intact CRC-32s and digest, as save_file writes them.
std::string write_records(const std::string& path, const std::vector<std::pair<std::string, std::string>>& records) {
  std::ofstream out(path, std::ios::binary);
  DigestWriter digest([&](const char* data, size_t size) { out.write(data, static_cast<std::streamsize>(size)); });
  {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
      digest.write(static_cast<const char*>(data), size);
      return size;
    });
    for (const auto& [name, bytes] : records) writer.writeRecord(name, bytes.data(), bytes.size());
    writer.writeEndOfFile();
  }
  digest.finish();
  return path;
}

// Pickle: BINUNICODE, BININT1.
std::string str(const std::string& s) {
  const auto n = static_cast<uint32_t>(s.size());
  return "X" + std::string(reinterpret_cast<const char*>(&n), 4) + s;
}
std::string int1(int v) { return "K" + std::string(1, static_cast<char>(v)); }

// {"model": {"w": a float tensor of `size` elements on storage "0" of `numel` elements}, "cfg": ""}
std::string tensor_pickle(int numel, int size) {
  return "\x80\x02}(" + str("model") + "}(" + str("w") + "ctorch._utils\n_rebuild_tensor_v2\n((" + str("storage") +
         "ctorch\nFloatStorage\n" + str("0") + str("cpu") + int1(numel) + "tQ" + int1(0) + "(" + int1(size) + "t(" +
         int1(1) + "t\x89" + "ccollections\nOrderedDict\n)RtRu" + str("cfg") + str("") + "u.";
}

// Found by fuzz_checkpoint_records (fuzz/README.md): pickles behind intact CRCs and digest that
// made LibTorch allocate what they claim, read past a record, throw std::out_of_range, or pop an
// empty stack.
TEST(Checkpoint, CraftedPicklesAreRefusedWithOneLine) {
  testing::TempDir dir;
  const std::string floats(16, '\0');
  auto write = [&](const std::string& name, const std::string& pickle) {
    return write_records(dir.path() + "/" + name + ".pt", {{"data.pkl", pickle}, {"data/0", floats}});
  };
  EXPECT_EQ(model_entry(load_file(write("good", tensor_pickle(4, 4))), "good").at("w").numel(), 4);
  for (const auto& [name, pickle, expected] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"storage", tensor_pickle(64, 4), "record archive/data/0 holds 16 bytes, but its tensor storage claims 256"},
           {"view", tensor_pickle(4, 8), "a tensor of shape [8] reaches past its storage of 16 bytes"},
           {"memo", std::string("\x80\x02}r\xff\xff\xff\x7f.", 9), "data.pkl: memo entry 2147483647 at byte 3"},
           {"length", std::string("\x80\x02X\xff\xff\xff\x7f.", 8), "opcode 0x58 at byte 2 runs past the end"},
           {"get", std::string("\x80\x02h\x05.", 5), "not a fairseq-cpp checkpoint"},
           {"global", "\x80\x02" "ctorch._utils\n_rebuild\r_tensor_v2\n.", "not a fairseq-cpp checkpoint"},
           // LibTorch's unpickler pops without looking: NEWOBJ on an empty stack wrote out of bounds.
           {"newobj", "\x80\x02\x81.", "opcode 0x81 at byte 2 takes more values than the stack holds"},
           {"tuple", "\x80\x02}t.", "opcode 0x74 at byte 3 needs a MARK before it"},
           {"appends", "\x80\x02(K\x01" "e.", "opcode 0x65 at byte 5 takes more values than the stack holds"},
           {"stop", "\x80\x02.", "opcode 0x2e at byte 2 takes more values than the stack holds"},
       }) {
    const std::string text = expect_error_text([&, &pickle = pickle] { load_file(write(name, pickle)); });
    EXPECT_NE(text.find(expected), std::string::npos) << name << ": " << text;
    EXPECT_EQ(text.find_first_of("\n\r"), std::string::npos) << text;
  }
}

// Found by fuzz_checkpoint: a damaged record's name went into the message as it was, line breaks
// included.
TEST(Checkpoint, RecordNamesInErrorsStayOnOneLine) {
  testing::TempDir dir;
  const std::string path = write_records(dir.path() + "/n.pt", {{"data.pkl", tensor_pickle(4, 4)},
                                                                {"data/0", std::string(16, '\0')},
                                                                {"x\ny", "payload"}});
  std::string bytes = testing::read_file(path);
  bytes[bytes.find("payload")] = 'P';
  std::ofstream(path, std::ios::binary) << bytes;
  const std::string text = expect_error_text([&] { load_file(path); });
  EXPECT_NE(text.find("record archive/x\\ny: its bytes' CRC-32"), std::string::npos) << text;
}

}  // namespace
}  // namespace fairseq_cpp::checkpoint
