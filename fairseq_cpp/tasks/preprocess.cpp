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

std::string text_path(const std::string& prefix, const std::string& lang) { return prefix + "." + lang; }

// The options that exclude or need each other, checked before anything is read.
void check_options(const PreprocessOptions& o) {
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
}

// train, then valid, valid1, ... and test, test1, ... from the comma-separated prefixes.
std::vector<Split> plan_splits(const PreprocessOptions& o) {
  std::vector<Split> splits;
  if (!o.trainpref.empty()) splits.push_back({"train", o.trainpref});
  const auto add = [&](const std::string& name, const std::string& prefixes) {
    if (prefixes.empty()) return;
    auto each = split_commas(prefixes);
    for (size_t k = 0; k < each.size(); ++k) splits.push_back({k > 0 ? fmt::format("{}{}", name, k) : name, each[k]});
  };
  add("valid", o.validpref);
  add("test", o.testpref);
  return splits;
}

// A DataError naming the first line without a counterpart when `s` and `t` differ in length.
void check_parallel(const Text& s, const Text& t) {
  if (s.file->size() == t.file->size()) return;
  const Text& longer = s.file->size() > t.file->size() ? s : t;
  const Text& shorter = s.file->size() > t.file->size() ? t : s;
  raise<DataError>(
      "{}:{}: no counterpart in {}, which has {} lines ({} has {}); expected parallel files with "
      "one sentence per line",
      longer.path, shorter.file->size() + 1, shorter.path, shorter.file->size(), longer.path, longer.file->size());
}

// Every input text (by path), read and checked before anything is written.
std::map<std::string, Text> read_texts(const PreprocessOptions& o, const std::vector<Split>& splits,
                                       const std::vector<std::string>& langs) {
  std::map<std::string, Text> texts;
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
    if (langs.size() > 1)
      check_parallel(texts.at(text_path(split.prefix, langs[0])), texts.at(text_path(split.prefix, langs[1])));
  }
  return texts;
}

// SentencePiece: trains a joint model, or applies a given one; the model used is kept as
// destdir/spm.model. None without either.
std::optional<data::SentencePiece> sentencepiece(const PreprocessOptions& o, const std::vector<std::string>& langs) {
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
    return data::SentencePiece::load(prefix + ".model");
  }
  if (o.spm_model.empty()) return std::nullopt;
  data::SentencePiece spm = data::SentencePiece::load(o.spm_model);
  std::error_code ec;
  if (!fs::equivalent(o.spm_model, spm_copy, ec)) {
    std::string bytes;
    {
      auto model = data::MappedFile(o.spm_model);
      bytes.assign(reinterpret_cast<const char*>(model.data()), model.size());
    }
    data::write_file_atomically(spm_copy, bytes);
  }
  return spm;
}

// Each text's lines as the dictionaries and the binarizer see them: encoded with `spm`, if any.
void tokenize_texts(std::map<std::string, Text>& texts, const std::optional<data::SentencePiece>& spm, int workers) {
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
}

// The source and target dictionaries: given, or counted from the train texts (joined: one of both).
// The given ones are `given` (--srcdict, --tgtdict).
std::pair<Dictionary, Dictionary> make_dictionaries(const PreprocessOptions& o, const std::map<std::string, Text>& texts,
                                                    const std::string& src, const std::string& tgt,
                                                    const std::pair<std::optional<Dictionary>, std::optional<Dictionary>>& given,
                                                    int workers) {
  const bool target = !o.only_source;
  const auto& [given_src, given_tgt] = given;
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
  return {std::move(src_dict), std::move(tgt_dict)};
}

// One split's text in `lang` as <output>.<src>-<tgt>.<lang>.{bin,idx} (or the text itself, raw).
void write_split(const PreprocessOptions& o, const Split& split, const Text& text, const Dictionary& dict,
                 const std::string& src, const std::string& tgt, const std::string& lang, int workers) {
  std::string out_prefix = (fs::path(o.destdir) / fmt::format("{}.{}-{}.{}", split.output, src, tgt, lang)).string();
  if (o.dataset_impl == "raw") {
    std::string content;
    for (auto line : text.lines) (content += line) += '\n';
    data::write_file_atomically(out_prefix, content);
    return;
  }
  log::info("preprocess", "[{}] Dictionary: {} types", lang, dict.size() - 1);
  data::Binarized bin = data::binarize(text.lines, dict, data::best_fitting_dtype(dict.size()), workers);
  data::IndexedDatasetBuilder builder(out_prefix, bin.dtype);
  builder.add_raw(bin.data.data(), bin.sizes);
  builder.finalize();
  log::info("preprocess", "[{}] {}: {} sents, {} tokens, {}% replaced by {}", lang, text.path, bin.sizes.size(),
            bin.ntok, percent(bin.nunk, bin.ntok), Dictionary::unk_word());
}

}  // namespace

void preprocess(const PreprocessOptions& o) {
  check_options(o);
  const bool target = !o.only_source;
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
  const std::vector<Split> splits = plan_splits(o);
  std::map<std::string, Text> texts = read_texts(o, splits, langs);
  std::pair<std::optional<Dictionary>, std::optional<Dictionary>> given;
  if (!o.srcdict.empty()) given.first = Dictionary::load(o.srcdict);
  if (!o.tgtdict.empty()) given.second = Dictionary::load(o.tgtdict);
  fs::create_directories(o.destdir);
  tokenize_texts(texts, sentencepiece(o, langs), workers);
  const auto [src_dict, tgt_dict] = make_dictionaries(o, texts, src, tgt, given, workers);
  src_dict.save(dict_path(src));
  if (target) tgt_dict.save(dict_path(tgt));
  if (o.dict_only) {
    log::info("preprocess", "wrote the dictionaries to {}", o.destdir);
    return;
  }
  for (const auto& lang : langs) {
    for (const auto& split : splits)
      write_split(o, split, texts.at(text_path(split.prefix, lang)), lang == src ? src_dict : tgt_dict, src, tgt, lang,
                  workers);
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
