#pragma once
// Loading the configuration: a YAML file of fairseq's config sections, then `section.key=value`
// overrides in order, then validation that collects every problem before reporting.
//
//   Config cfg = load_config("configs/demo.yaml", {{"optimization.lr", "3e-4", "command line"}});
//   std::cout << dump_config(cfg);   // YAML that load_config reads back to the same values

#include <optional>
#include <string>
#include <vector>

#include "fairseq_cpp/config/sections.h"

namespace fairseq_cpp::config {

// One key set outside the YAML file: "optimization.lr" = "3e-4". The value is YAML (a scalar,
// "[0.9, 0.98]", or empty for null); `origin` says where it came from for error messages.
struct Assignment {
  std::string key;
  std::string value;
  std::string origin;
};

// Reads `path` (empty = defaults only), applies `assignments` in order and validates the result.
// Throws ConfigError listing every problem: missing file, YAML syntax (file:line:column),
// unknown sections or keys (with the nearest valid name), wrong types, out-of-range values.
Config load_config(const std::string& path, const std::vector<Assignment>& assignments = {});

// The options of validation's BLEU search: fairseq's generation defaults with `task.eval_bleu_args`
// (a JSON object of generation keys) over them, as fairseq builds that generator. Throws ConfigError.
GenerationConfig eval_bleu_generation(const std::string& eval_bleu_args);
// The language whose Moses rules detokenize for BLEU: `task.eval_bleu_detok_args`'s target_lang,
// else "en" (fairseq's MosesTokenizerConfig default). Throws ConfigError.
std::string eval_bleu_detok_language(const std::string& eval_bleu_detok_args);

// The whole configuration as YAML, every key of every section.
std::string dump_config(const Config& config);

// The --help listing of `keys` (entries "section" or "section.key"; every key when empty): key,
// flag, type, default, help, grouped by section.
std::string describe_keys(const std::vector<std::string>& keys = {});

// The key that `--flag` sets ("max-tokens" -> "dataset.max_tokens"); empty when none does.
// `is_switch` is set when the key is a bool that the flag alone turns on, `is_list` when it holds a
// list (the flag then takes several values, as fairseq's nargs='+' flags do), `is_string` when it
// holds a string or a list of strings (each value is then taken as it is, not as YAML: `--sys -`, `--remove-bpe "@@ "`),
// and `bare` to the value the flag takes when given alone, if it may be (`--remove-bpe` = "@@ ").
std::string key_for_flag(const std::string& flag, bool* is_switch = nullptr, bool* is_list = nullptr,
                         bool* is_string = nullptr, std::optional<std::string>* bare = nullptr);
// `key` ("section.key", or a key's alias) as "section.name"; empty when no key answers to it.
std::string canonical_key(const std::string& key);
// All flags, for suggestions.
std::vector<std::string> all_flags();

// The nearest candidate to `word` by edit distance, or empty when nothing is close.
std::string nearest(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace fairseq_cpp::config
