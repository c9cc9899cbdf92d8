#include "fairseq_cpp/tasks/preprocess.h"

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/core/logging.h"
#include "fairseq_cpp/data/binarizer.h"
#include "fairseq_cpp/data/dictionary.h"
#include "fairseq_cpp/data/file_util.h"
#include "fairseq_cpp/data/indexed_dataset.h"
#include "fairseq_cpp/data/sentencepiece.h"
#include "fairseq_cpp/data/text.h"
#include "fairseq_cpp/tasks/programs.h"

namespace fairseq_cpp::tasks {

namespace fs = std::filesystem;
using data::Dictionary;

PreprocessOptions preprocess_options(const config::Config& cfg) {
  const auto& p = cfg.preprocess;
  PreprocessOptions o;
  o.source_lang = cfg.task.source_lang;
  o.target_lang = cfg.task.target_lang;
  o.trainpref = p.trainpref;
  o.validpref = p.validpref;
  o.testpref = p.testpref;
  o.destdir = p.destdir;
  o.joined_dictionary = p.joined_dictionary;
  o.srcdict = p.srcdict;
  o.tgtdict = p.tgtdict;
  o.nwordssrc = p.nwordssrc;
  o.nwordstgt = p.nwordstgt;
  o.thresholdsrc = p.thresholdsrc;
  o.thresholdtgt = p.thresholdtgt;
  o.padding_factor = p.padding_factor;
  o.workers = p.workers;
  o.only_source = p.only_source;
  o.dict_only = p.dict_only;
  o.dataset_impl = cfg.dataset.dataset_impl;
  o.spm_model = p.spm_model;
  o.spm_vocab_size = p.spm_vocab_size;
  o.spm_model_type = p.spm_model_type;
  o.spm_character_coverage = p.spm_character_coverage;
  o.spm_input_sentence_size = p.spm_input_sentence_size;
  return o;
}

namespace {

// One input text: its lines as fairseq will tokenize them (SentencePiece pieces when encoded).
struct Text {
  std::string path;
  std::optional<data::TextFile> file;
  data::EncodedLines encoded;
  std::vector<std::string_view> lines;
};

struct Split {
  std::string output;  // "train", "valid", "valid1", "test", ...
  std::string prefix;  // input prefix
};

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string percent(int64_t part, int64_t whole) {
  return whole == 0 ? "0" : fmt::format("{:.3}", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

}  // namespace

void preprocess(const PreprocessOptions& o) {
  const bool target = !o.only_source;
  if (o.source_lang.empty()) raise<UserError>("`task.source_lang` (--source-lang) is required");
  if (target && o.target_lang.empty())
    raise<UserError>("`task.target_lang` (--target-lang) is required (or preprocess.only_source)");
  if (o.trainpref.empty() && (o.srcdict.empty() || (target && !o.joined_dictionary && o.tgtdict.empty())))
    raise<UserError>(
        "`preprocess.trainpref` (--trainpref) is required unless the dictionaries are given (--srcdict, --tgtdict)");
  if (o.joined_dictionary && !o.srcdict.empty() && !o.tgtdict.empty())
    raise<UserError>("cannot use both --srcdict and --tgtdict with --joined-dictionary");
  if (!o.spm_model.empty() && o.spm_vocab_size > 0)
    raise<UserError>(
        "`preprocess.spm_model` and `preprocess.spm_vocab_size` exclude each other: apply a model or train one");
  if (o.spm_vocab_size > 0 && o.trainpref.empty())
    raise<UserError>("`preprocess.spm_vocab_size` needs `preprocess.trainpref` to train on");
  const int workers = static_cast<int>(std::max<int64_t>(1, o.workers));
  const std::string src = o.source_lang;
  const std::string tgt = o.target_lang.empty() ? "None" : o.target_lang;  // fairseq's name when unset
  std::vector<std::string> langs = {src};
  if (target) langs.push_back(tgt);

  auto dict_path = [&](const std::string& lang) { return (fs::path(o.destdir) / ("dict." + lang + ".txt")).string(); };
  if (o.srcdict.empty() && fs::exists(dict_path(src)))
    raise<UserError>("{} already exists: remove it or choose another --destdir", dict_path(src));
  if (target && o.tgtdict.empty() && fs::exists(dict_path(tgt)))
    raise<UserError>("{} already exists: remove it or choose another --destdir", dict_path(tgt));

  // Read and check every input before writing anything.
  std::vector<Split> splits;
  if (!o.trainpref.empty()) splits.push_back({"train", o.trainpref});
  if (!o.validpref.empty()) {
    auto prefixes = split_commas(o.validpref);
    for (size_t k = 0; k < prefixes.size(); ++k)
      splits.push_back({k > 0 ? fmt::format("valid{}", k) : "valid", prefixes[k]});
  }
  if (!o.testpref.empty()) {
    auto prefixes = split_commas(o.testpref);
    for (size_t k = 0; k < prefixes.size(); ++k)
      splits.push_back({k > 0 ? fmt::format("test{}", k) : "test", prefixes[k]});
  }
  std::map<std::string, Text> texts;  // by path
  auto text_path = [](const std::string& prefix, const std::string& lang) { return prefix + "." + lang; };
  for (const auto& split : splits) {
    if (o.dict_only && split.output != "train") continue;
    for (const auto& lang : langs) {
      std::string path = text_path(split.prefix, lang);
      if (texts.count(path) > 0) continue;
      Text text;
      text.path = path;
      text.file.emplace(data::TextFile::read(path));
      texts.emplace(path, std::move(text));
    }
    if (target) {
      const Text& s = texts.at(text_path(split.prefix, src));
      const Text& t = texts.at(text_path(split.prefix, tgt));
      if (s.file->size() != t.file->size()) {
        const Text& longer = s.file->size() > t.file->size() ? s : t;
        const Text& shorter = s.file->size() > t.file->size() ? t : s;
        raise<DataError>(
            "{}:{}: no counterpart in {}, which has {} lines ({} has {}); expected parallel files with "
            "one sentence per line",
            longer.path, shorter.file->size() + 1, shorter.path, shorter.file->size(), longer.path,
            longer.file->size());
      }
    }
  }
  std::optional<Dictionary> given_src, given_tgt;
  if (!o.srcdict.empty()) given_src = Dictionary::load(o.srcdict);
  if (!o.tgtdict.empty()) given_tgt = Dictionary::load(o.tgtdict);

  fs::create_directories(o.destdir);

  // SentencePiece: train a joint model, or apply a given one; the model used is kept as destdir/spm.model.
  std::optional<data::SentencePiece> spm;
  const std::string spm_copy = (fs::path(o.destdir) / "spm.model").string();
  if (o.spm_vocab_size > 0) {
    data::SpmTrainOptions train;
    for (const auto& lang : langs) train.inputs.push_back(text_path(o.trainpref, lang));
    std::string prefix = (fs::path(o.destdir) / "spm").string();
    train.model_prefix = prefix + ".tmp";
    train.vocab_size = o.spm_vocab_size;
    train.model_type = o.spm_model_type;
    train.character_coverage = o.spm_character_coverage;
    train.input_sentence_size = o.spm_input_sentence_size;
    log::info("preprocess", "training a {} SentencePiece model of {} pieces on {}", o.spm_model_type, o.spm_vocab_size,
              fmt::join(train.inputs, ", "));
    data::train_sentencepiece(train);
    fs::rename(train.model_prefix + ".model", prefix + ".model");
    fs::rename(train.model_prefix + ".vocab", prefix + ".vocab");
    spm.emplace(data::SentencePiece::load(prefix + ".model"));
  } else if (!o.spm_model.empty()) {
    spm.emplace(data::SentencePiece::load(o.spm_model));
    std::error_code ec;
    if (!fs::equivalent(o.spm_model, spm_copy, ec)) {
      std::string bytes;
      {
        auto model = data::MappedFile(o.spm_model);
        bytes.assign(reinterpret_cast<const char*>(model.data()), model.size());
      }
      data::write_file_atomically(spm_copy, bytes);
    }
  }
  for (auto& [path, text] : texts) {
    const auto& lines = text.file->lines();
    if (spm) {
      text.encoded = data::encode_lines(*spm, lines, workers);
      text.lines = std::move(text.encoded.lines);
    } else {
      text.lines = lines;
    }
  }
  if (spm) log::info("preprocess", "encoded {} files with SentencePiece model {}", texts.size(), spm->model_path());

  // Dictionaries.
  auto build = [&](const std::vector<std::string>& paths, int64_t threshold, int64_t nwords) {
    Dictionary d;
    for (const auto& path : paths) data::count_tokens(texts.at(path).lines, d, workers);
    d.finalize(threshold, nwords, o.padding_factor);
    return d;
  };
  Dictionary src_dict, tgt_dict;
  if (o.joined_dictionary) {
    if (given_src) {
      src_dict = *given_src;
    } else if (given_tgt) {
      src_dict = *given_tgt;
    } else {
      std::vector<std::string> paths = {text_path(o.trainpref, src)};
      if (target && tgt != src) paths.push_back(text_path(o.trainpref, tgt));
      src_dict = build(paths, o.thresholdsrc, o.nwordssrc);
    }
    tgt_dict = src_dict;
  } else {
    src_dict = given_src ? *given_src : build({text_path(o.trainpref, src)}, o.thresholdsrc, o.nwordssrc);
    if (target) tgt_dict = given_tgt ? *given_tgt : build({text_path(o.trainpref, tgt)}, o.thresholdtgt, o.nwordstgt);
  }
  src_dict.save(dict_path(src));
  if (target) tgt_dict.save(dict_path(tgt));
  if (o.dict_only) {
    log::info("preprocess", "wrote the dictionaries to {}", o.destdir);
    return;
  }

  // Binarize every split.
  for (const auto& lang : langs) {
    const Dictionary& dict = lang == src ? src_dict : tgt_dict;
    for (const auto& split : splits) {
      const Text& text = texts.at(text_path(split.prefix, lang));
      std::string out_prefix =
          (fs::path(o.destdir) / fmt::format("{}.{}-{}.{}", split.output, src, tgt, lang)).string();
      if (o.dataset_impl == "raw") {
        std::string content;
        for (auto line : text.lines) (content += line) += '\n';
        data::write_file_atomically(out_prefix, content);
        continue;
      }
      log::info("preprocess", "[{}] Dictionary: {} types", lang, dict.size() - 1);
      data::Binarized bin = data::binarize(text.lines, dict, data::best_fitting_dtype(dict.size()), workers);
      data::IndexedDatasetBuilder builder(out_prefix, bin.dtype);
      builder.add_raw(bin.data.data(), bin.sizes);
      builder.finalize();
      log::info("preprocess", "[{}] {}: {} sents, {} tokens, {}% replaced by {}", lang, text.path, bin.sizes.size(),
                bin.ntok, percent(bin.nunk, bin.ntok), Dictionary::unk_word());
    }
  }
  log::info("preprocess", "wrote preprocessed data to {}", o.destdir);
}

}  // namespace fairseq_cpp::tasks

namespace fairseq_cpp::tasks {

int preprocess_main(const Invocation& inv) {
  preprocess(preprocess_options(inv.config));
  return kExitOk;
}

}  // namespace fairseq_cpp::tasks
