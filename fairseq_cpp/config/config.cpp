#include "fairseq_cpp/config/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/core/overloaded.h"

namespace fairseq_cpp::config {
namespace {

// Problems found so far, each already prefixed with where it was found.
using Problems = std::vector<std::string>;

// "config.yaml:3:5: " for a node of the file, "command line `a.b=c`: " for an assignment.
std::string where_in_file(const std::string& path, const YAML::Mark& mark) {
  if (mark.is_null()) return path + ": ";
  return fmt::format("{}:{}:{}: ", path, mark.line + 1, mark.column + 1);
}

// How a YAML value looks, for "but is ... instead".
std::string describe_node(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "empty";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    default:
      return fmt::format("\"{}\"", node.Scalar());
  }
}

std::optional<int64_t> parse_int(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return std::nullopt;
  return static_cast<int64_t>(v);
}

std::optional<double> parse_double(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (*end != '\0') return std::nullopt;
  return v;
}

std::optional<bool> parse_bool(const std::string& text) {
  static const std::map<std::string, bool> kWords = {
      {"true", true},   {"True", true},   {"TRUE", true},   {"yes", true}, {"on", true},   {"1", true},
      {"false", false}, {"False", false}, {"FALSE", false}, {"no", false}, {"off", false}, {"0", false}};
  auto it = kWords.find(text);
  return it == kWords.end() ? std::nullopt : std::optional<bool>(it->second);
}

// The elements of a list value: a YAML sequence, or a scalar that is one element or a
// fairseq-style string list such as "(0.9, 0.98)" or "0.9,0.98".
std::optional<std::vector<std::string>> list_elements(const YAML::Node& node) {
  std::vector<std::string> out;
  if (node.IsSequence()) {
    for (const auto& item : node) {
      if (!item.IsScalar()) return std::nullopt;
      out.push_back(item.Scalar());
    }
    return out;
  }
  if (!node.IsScalar()) return std::nullopt;
  std::string text = node.Scalar();
  if (text.size() >= 2 && ((text.front() == '(' && text.back() == ')') || (text.front() == '[' && text.back() == ']')))
    text = text.substr(1, text.size() - 2);
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string format_number(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{}", v);
}

// Checks one number against the field's bounds; returns the problem or "".
std::string check_range(const Field& f, double v) {
  if (f.lower && (f.lower_exclusive ? !(v > *f.lower) : !(v >= *f.lower)))
    return fmt::format("must be {} {}", f.lower_exclusive ? "greater than" : "greater than or equal to",
                       format_number(*f.lower));
  if (f.upper && !(v <= *f.upper)) return fmt::format("must be less than or equal to {}", format_number(*f.upper));
  return "";
}

std::string check_choice(const Field& f, const std::string& v) {
  if (f.choices.empty() || std::find(f.choices.begin(), f.choices.end(), v) != f.choices.end()) return "";
  std::string list;
  for (const auto& c : f.choices) list += fmt::format("{}{}", list.empty() ? "" : ", ", c.empty() ? "\"\"" : c);
  return fmt::format("must be one of {}", list);
}

// Converts one YAML value into the type of a field (one operator() per type a Field can point
// to) and checks it. Each returns "" on success, else the problem as "must be X, but is Y
// instead." without the key.
class Assigner {
 public:
  Assigner(const Field& f, const YAML::Node& node) : f_(f), node_(node) {}

  std::string operator()(bool* p) const { return boolean(p, "a bool (true or false)"); }
  std::string operator()(int64_t* p) const { return number(p, parse_int, "an integer"); }
  std::string operator()(double* p) const { return number(p, parse_double, "a number"); }
  std::string operator()(std::string* p) const {
    auto t = scalar_text();
    if (!t) return wrong("a string");
    if (auto e = out_of_range(check_choice(f_, *t), fmt::format("\"{}\"", *t)); !e.empty()) return e;
    *p = *t;
    return "";
  }
  std::string operator()(std::optional<bool>* p) const {
    if (node_.IsNull()) return p->reset(), "";
    return boolean(p, "a bool (true or false) or empty");
  }
  std::string operator()(std::optional<int64_t>* p) const {
    if (node_.IsNull()) return p->reset(), "";
    return number(p, parse_int, "an integer or empty");
  }
  std::string operator()(std::optional<double>* p) const {
    if (node_.IsNull()) return p->reset(), "";
    return number(p, parse_double, "a number or empty");
  }
  std::string operator()(std::vector<int64_t>* p) const { return number_list(p, parse_int, "a list of integers"); }
  std::string operator()(std::vector<double>* p) const { return number_list(p, parse_double, "a list of numbers"); }
  std::string operator()(std::vector<std::string>* p) const {
    auto items = list_elements(node_);
    if (!items) return wrong("a list of strings");
    for (const auto& item : *items)
      if (auto rule = check_choice(f_, item); !rule.empty())
        return fmt::format("{} in every element, but has \"{}\" instead.", rule, item);
    *p = std::move(*items);
    return "";
  }

 private:
  std::optional<std::string> scalar_text() const {
    if (node_.IsNull()) return std::string();
    if (node_.IsScalar()) return node_.Scalar();
    return std::nullopt;
  }
  std::string wrong(const char* expected) const {
    return fmt::format("must be {}, but is {} instead.", expected, describe_node(node_));
  }
  static std::string out_of_range(const std::string& rule, const std::string& shown) {
    return rule.empty() ? std::string() : fmt::format("{}, but is {} instead.", rule, shown);
  }
  template <class T>
  std::string boolean(T* p, const char* expected) const {
    auto t = scalar_text();
    auto v = t ? parse_bool(*t) : std::nullopt;
    if (!v) return wrong(expected);
    *p = *v;
    return "";
  }
  template <class T, class Parse>
  std::string number(T* p, Parse parse, const char* expected) const {
    auto t = scalar_text();
    auto v = t ? parse(*t) : std::nullopt;
    if (!v) return wrong(expected);
    if (auto e = out_of_range(check_range(f_, static_cast<double>(*v)), *t); !e.empty()) return e;
    *p = *v;
    return "";
  }
  template <class T, class Parse>
  std::string number_list(std::vector<T>* p, Parse parse, const char* expected) const {
    auto items = list_elements(node_);
    if (!items) return wrong(expected);
    std::vector<T> values;
    for (const auto& item : *items) {
      auto v = parse(item);
      if (!v) return fmt::format("must be {}, but has the element \"{}\".", expected, item);
      if (auto rule = check_range(f_, static_cast<double>(*v)); !rule.empty())
        return fmt::format("{} in every element, but has {} instead.", rule, format_number(static_cast<double>(*v)));
      values.push_back(*v);
    }
    *p = std::move(values);
    return "";
  }

  const Field& f_;
  const YAML::Node& node_;
};

std::string assign(const Field& f, const YAML::Node& node) { return std::visit(Assigner(f, node), f.ref); }

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

const Section* find_section(const std::vector<Section>& sections, const std::string& name) {
  for (const auto& s : sections)
    if (s.name() == name) return &s;
  return nullptr;
}

std::vector<std::string> qualified_keys(const std::vector<Section>& sections) {
  std::vector<std::string> keys;
  for (const auto& s : sections)
    for (const auto& f : s.fields()) keys.push_back(s.name() + "." + f.name);
  return keys;
}

// "`optimization.max_updates` is not a key; did you mean `optimization.max_update`?"
std::string unknown_key(const std::vector<Section>& sections, const std::string& section, const std::string& key) {
  std::string qualified = section + "." + key;
  for (const auto& s : sections)
    if (s.find(key) != nullptr)
      return fmt::format("`{}` is not a key; did you mean `{}.{}`?", qualified, s.name(), s.find(key)->name);
  std::string guess = nearest(qualified, qualified_keys(sections));
  if (guess.empty()) return fmt::format("`{}` is not a key; `--help` lists every key.", qualified);
  return fmt::format("`{}` is not a key; did you mean `{}`?", qualified, guess);
}

std::string unknown_section(const std::vector<Section>& sections, const std::string& name) {
  std::vector<std::string> names;
  for (const auto& s : sections) names.push_back(s.name());
  std::string guess = nearest(name, names);
  std::string all;
  for (const auto& n : names) all += fmt::format("{}{}", all.empty() ? "" : ", ", n);
  if (guess.empty()) return fmt::format("`{}` is not a config section; the sections are {}.", name, all);
  return fmt::format("`{}` is not a config section; did you mean `{}`?", name, guess);
}

void apply_file(const std::string& path, std::vector<Section>& sections, Problems& problems) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    problems.push_back(fmt::format("config file `{}` does not exist.", path));
    return;
  }
  if (std::filesystem::is_directory(path, ec)) {
    problems.push_back(fmt::format("config file `{}` is a directory, not a YAML file.", path));
    return;
  }
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::ParserException& e) {
    problems.push_back(fmt::format("{}YAML syntax error: {}.", where_in_file(path, e.mark), e.msg));
    return;
  } catch (const YAML::BadFile&) {
    problems.push_back(fmt::format("config file `{}` cannot be read.", path));
    return;
  }
  if (root.IsNull()) return;
  if (!root.IsMap()) {
    problems.push_back(fmt::format("{}the config must be a mapping of sections (common:, dataset:, ...), but is {}.",
                                   where_in_file(path, root.Mark()), describe_node(root)));
    return;
  }
  for (const auto& section_entry : root) {
    if (!section_entry.first.IsScalar()) {
      problems.push_back(fmt::format("{}a section name must be a word (common, dataset, ...), but is {} instead.",
                                     where_in_file(path, section_entry.first.Mark()), describe_node(section_entry.first)));
      continue;
    }
    std::string section_name = section_entry.first.Scalar();
    const YAML::Node& body = section_entry.second;
    const Section* section = find_section(sections, section_name);
    if (section == nullptr) {
      problems.push_back(where_in_file(path, section_entry.first.Mark()) + unknown_section(sections, section_name));
      continue;
    }
    if (body.IsNull()) continue;
    if (!body.IsMap()) {
      problems.push_back(fmt::format("{}section `{}` must be a mapping of keys, but is {} instead.",
                                     where_in_file(path, body.Mark()), section_name, describe_node(body)));
      continue;
    }
    for (const auto& entry : body) {
      if (!entry.first.IsScalar()) {
        problems.push_back(fmt::format("{}a key of section `{}` must be a word, but is {} instead.",
                                       where_in_file(path, entry.first.Mark()), section_name, describe_node(entry.first)));
        continue;
      }
      std::string key = entry.first.Scalar();
      const Field* field = section->find(key);
      if (field == nullptr) {
        problems.push_back(where_in_file(path, entry.first.Mark()) + unknown_key(sections, section_name, key));
        continue;
      }
      if (auto problem = assign(*field, entry.second); !problem.empty())
        problems.push_back(
            fmt::format("{}`{}.{}` {}", where_in_file(path, entry.second.Mark()), section_name, field->name, problem));
    }
  }
}

void apply_assignment(const Assignment& a, std::vector<Section>& sections, Problems& problems) {
  std::string where = a.origin.empty() ? "" : a.origin + ": ";
  auto dot = a.key.find('.');
  if (dot == std::string::npos) {
    problems.push_back(
        fmt::format("{}`{}` is not a key; keys are written section.key, e.g. optimization.lr.", where, a.key));
    return;
  }
  std::string section_name = a.key.substr(0, dot);
  std::string key = a.key.substr(dot + 1);
  const Section* section = find_section(sections, section_name);
  if (section == nullptr) {
    problems.push_back(where + unknown_section(sections, section_name));
    return;
  }
  const Field* field = section->find(key);
  if (field == nullptr) {
    problems.push_back(where + unknown_key(sections, section_name, key));
    return;
  }
  YAML::Node node;
  try {
    node = a.value.empty() ? YAML::Node(YAML::NodeType::Null) : YAML::Load(a.value);
  } catch (const YAML::Exception& e) {
    problems.push_back(fmt::format("{}the value of `{}` is not valid YAML: {}.", where, a.key, e.msg));
    return;
  }
  if (auto problem = assign(*field, node); !problem.empty())
    problems.push_back(fmt::format("{}`{}.{}` {}", where, section_name, field->name, problem));
}

// A field's value as YAML text (also the default shown by --help).
std::string value_text(const Field& f) {
  auto list = [](const auto& values, auto show) {
    std::string out;
    for (const auto& v : values) out += fmt::format("{}{}", out.empty() ? "" : ", ", show(v));
    return "[" + out + "]";
  };
  auto quote = [](const std::string& s) {
    YAML::Emitter e;
    e << s;
    return std::string(e.c_str());
  };
  return std::visit(
      Overloaded{
          [](bool* p) -> std::string { return *p ? "true" : "false"; },
          [](int64_t* p) -> std::string { return fmt::format("{}", *p); },
          [](double* p) -> std::string { return fmt::format("{}", *p); },
          [&](std::string* p) -> std::string { return p->empty() ? "\"\"" : quote(*p); },
          [](std::optional<bool>* p) -> std::string { return *p ? (**p ? "true" : "false") : "null"; },
          [](std::optional<int64_t>* p) -> std::string { return *p ? fmt::format("{}", **p) : "null"; },
          [](std::optional<double>* p) -> std::string { return *p ? fmt::format("{}", **p) : "null"; },
          [&](std::vector<int64_t>* p) { return list(*p, [](int64_t v) { return fmt::format("{}", v); }); },
          [&](std::vector<double>* p) { return list(*p, [](double v) { return fmt::format("{}", v); }); },
          [&](std::vector<std::string>* p) { return list(*p, quote); },
      },
      f.ref);
}

std::string rule_text(const Field& f) {
  std::string out;
  if (!f.choices.empty()) {
    for (const auto& c : f.choices) out += fmt::format("{}{}", out.empty() ? "{" : ", ", c.empty() ? "\"\"" : c);
    out += "}";
  }
  if (f.lower)
    out += fmt::format("{}{} {}", out.empty() ? "" : " ", f.lower_exclusive ? ">" : ">=", format_number(*f.lower));
  if (f.upper) out += fmt::format("{}<= {}", out.empty() ? "" : " ", format_number(*f.upper));
  return out;
}

// A JSON object of option names and values (`task.eval_bleu_args`): each name must be a field of
// `section`, and its value that field's type.
void apply_json_object(const std::string& key, const std::string& json, const Section& section, Problems& problems) {
  YAML::Node root;
  try {
    root = YAML::Load(json);  // JSON is YAML's flow style
  } catch (const YAML::Exception& e) {
    problems.push_back(fmt::format("`{}` is not a valid JSON object: {} in {}.", key, e.msg, json));
    return;
  }
  if (root.IsNull()) return;
  if (!root.IsMap()) {
    problems.push_back(fmt::format("`{}` must be a JSON object of {} options, but is {} instead.", key, section.name(),
                                   describe_node(root)));
    return;
  }
  for (const auto& entry : root) {
    std::string name = entry.first.IsScalar() ? entry.first.Scalar() : describe_node(entry.first);
    const Field* field = section.find(name);
    if (field == nullptr) {
      std::vector<std::string> names;
      for (const auto& f : section.fields()) names.push_back(f.name);
      std::string guess = nearest(name, names);
      problems.push_back(fmt::format("`{}` names `{}`, which is not a {} option{}", key, name, section.name(),
                                     guess.empty() ? "." : fmt::format("; did you mean `{}`?", guess)));
      continue;
    }
    if (auto problem = assign(*field, entry.second); !problem.empty())
      problems.push_back(fmt::format("`{}`: `{}` {}", key, name, problem));
  }
}

// The detokenizer options fairseq's Moses tokenizer takes in `task.eval_bleu_detok_args`.
struct DetokOptions {
  std::string source_lang = "en";
  std::string target_lang = "en";
  bool moses_no_dash_splits = false;
  bool moses_no_escape = false;
};
Section detok_section(DetokOptions& o) {
  Section s("eval_bleu_detok_args", "");
  s.add("source_lang", &o.source_lang, "");
  s.add("target_lang", &o.target_lang, "the language whose rules detokenize");
  s.add("moses_no_dash_splits", &o.moses_no_dash_splits, "");
  s.add("moses_no_escape", &o.moses_no_escape, "");
  return s;
}

// Every key that a fairseq-cpp feature does not implement yet, set to anything but its default.
void check_refusals(std::vector<Section>& sections, Problems& problems) {
  Config defaults;
  std::vector<Section> default_sections = describe(defaults);
  for (size_t s = 0; s < sections.size(); ++s) {
    for (size_t f = 0; f < sections[s].fields().size(); ++f) {
      const Field& field = sections[s].fields()[f];
      if (field.refusal.empty()) continue;
      std::string value = value_text(field), default_value = value_text(default_sections[s].fields()[f]);
      if (value != default_value)
        problems.push_back(fmt::format("`{}.{}` is {}, but {}; leave it at {}.", sections[s].name(), field.name, value,
                                       field.refusal, default_value));
    }
  }
}

}  // namespace

std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::string::npos;
  for (const auto& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  size_t limit = std::max<size_t>(2, word.size() / 3);
  return best_distance <= limit ? best : std::string();
}

Config load_config(const std::string& path, const std::vector<Assignment>& assignments) {
  Config cfg;
  std::vector<Section> sections = describe(cfg);
  Problems problems;
  if (!path.empty()) apply_file(path, sections, problems);
  for (const auto& a : assignments) apply_assignment(a, sections, problems);
  // fairseq's default for the scheduler chosen, resolved here so that --dump-config and the saved config show it.
  if (!cfg.lr_scheduler.warmup_updates)
    cfg.lr_scheduler.warmup_updates = default_warmup_updates(cfg.lr_scheduler._name);
  check_refusals(sections, problems);
  check_consistency(cfg, problems);
  GenerationConfig bleu_generation;
  Section generation("generation", "");
  describe(bleu_generation, generation);
  apply_json_object("task.eval_bleu_args", cfg.task.eval_bleu_args, generation, problems);
  DetokOptions detok;
  apply_json_object("task.eval_bleu_detok_args", cfg.task.eval_bleu_detok_args, detok_section(detok), problems);
  if (!problems.empty()) throw ConfigError(std::move(problems));
  return cfg;
}

GenerationConfig eval_bleu_generation(const std::string& eval_bleu_args) {
  GenerationConfig out;
  Section section("generation", "");
  describe(out, section);
  Problems problems;
  apply_json_object("task.eval_bleu_args", eval_bleu_args, section, problems);
  if (!problems.empty()) throw ConfigError(std::move(problems));
  return out;
}

std::string eval_bleu_detok_language(const std::string& eval_bleu_detok_args) {
  DetokOptions detok;
  Problems problems;
  apply_json_object("task.eval_bleu_detok_args", eval_bleu_detok_args, detok_section(detok), problems);
  if (!problems.empty()) throw ConfigError(std::move(problems));
  return detok.target_lang;
}

std::string dump_config(const Config& config) {
  Config copy = config;
  std::string out;
  for (const auto& section : describe(copy)) {
    out += section.name() + ":\n";
    for (const auto& f : section.fields()) out += fmt::format("  {}: {}\n", f.name, value_text(f));
  }
  return out;
}

namespace {

// "--post-process, --remove-bpe": a key's flag, then the other spellings it answers to.
std::string flags_of(const Field& f) {
  std::string out = "--" + f.flag_name();
  for (const auto& alias : f.aliases) {
    if (alias.front() == '_') continue;
    std::string flag = alias;
    std::replace(flag.begin(), flag.end(), '_', '-');
    if (flag != f.flag_name()) out += ", --" + flag;
  }
  for (const auto& spelling : f.flag_spellings) out += ", --" + spelling;
  return out;
}

}  // namespace

std::string describe_keys(const std::vector<std::string>& wanted) {
  Config defaults;
  const std::vector<Section> all = describe(defaults);
  auto listed = [&](const Section& section, const Field& f) {
    auto in = [&](const std::string& entry) { return entry == section.name() || entry == section.name() + "." + f.name; };
    return wanted.empty() || std::any_of(wanted.begin(), wanted.end(), in);
  };
  size_t width = 0;
  for (const auto& section : all)
    for (const auto& f : section.fields())
      if (listed(section, f)) width = std::max(width, section.name().size() + f.name.size() + flags_of(f).size() + 4);
  std::string out = fmt::format("  {:<{}} {:<11} {:<12} {}\n", "key (flag)", width, "type", "default", "description");
  for (const auto& section : all) {
    bool header = false;
    for (const auto& f : section.fields()) {
      if (!listed(section, f)) continue;
      if (!header) out += fmt::format("\n{}: {}\n", section.name(), section.help());
      header = true;
      std::string key = fmt::format("{}.{} ({})", section.name(), f.name, flags_of(f));
      std::string rules = rule_text(f);
      if (!f.refusal.empty()) rules += (rules.empty() ? "" : " ") + ("[not implemented: " + f.refusal + "]");
      if (!f.no_effect.empty()) rules += (rules.empty() ? "" : " ") + ("[" + f.no_effect + "]");
      out += fmt::format("  {:<{}} {:<11} {:<12} {}{}{}\n", key, width, f.type_name(), value_text(f), f.help,
                         rules.empty() ? "" : "  ", rules);
    }
  }
  return out;
}

std::string canonical_key(const std::string& key) {
  const auto dot = key.find('.');
  if (dot == std::string::npos) return "";
  Config defaults;
  for (const auto& section : describe(defaults)) {
    if (section.name() != key.substr(0, dot)) continue;
    const Field* f = section.find(key.substr(dot + 1));
    return f == nullptr ? "" : section.name() + "." + f->name;
  }
  return "";
}

std::string key_for_flag(const std::string& flag, bool* is_switch, bool* is_list, bool* is_string,
                         std::optional<std::string>* bare) {
  Config defaults;
  for (const auto& section : describe(defaults)) {
    for (const auto& f : section.fields()) {
      // A key answers to its flag and to its aliases' flags (fairseq's older names: --remove-bpe).
      bool match = f.flag_name() == flag;
      for (const auto& alias : f.aliases) {
        std::string alias_flag = alias;
        std::replace(alias_flag.begin(), alias_flag.end(), '_', '-');
        match = match || (alias.front() != '_' && alias_flag == flag);
      }
      match = match || std::find(f.flag_spellings.begin(), f.flag_spellings.end(), flag) != f.flag_spellings.end();
      if (!match) continue;
      if (bare != nullptr) *bare = f.bare;
      if (is_switch != nullptr)
        *is_switch = std::holds_alternative<bool*>(f.ref) || std::holds_alternative<std::optional<bool>*>(f.ref);
      if (is_string != nullptr)
        *is_string = std::holds_alternative<std::string*>(f.ref) || std::holds_alternative<std::vector<std::string>*>(f.ref);
      if (is_list != nullptr)
        *is_list = std::holds_alternative<std::vector<int64_t>*>(f.ref) ||
                   std::holds_alternative<std::vector<double>*>(f.ref) ||
                   std::holds_alternative<std::vector<std::string>*>(f.ref);
      return section.name() + "." + f.name;
    }
  }
  return "";
}

std::vector<std::string> all_flags() {
  Config defaults;
  std::vector<std::string> flags;
  for (const auto& section : describe(defaults))
    for (const auto& f : section.fields()) flags.push_back(f.flag_name());
  return flags;
}

}  // namespace fairseq_cpp::config
