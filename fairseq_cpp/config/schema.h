#pragma once
// Declaring configuration keys once: a Section binds each key of one config struct to its field,
// with fairseq's name, a one-line help and its checks. The type and the default come from the field.
//
//   void describe(OptimizationConfig& c, Section& s) {
//     s.add("max_update", &c.max_update, "force stop training at this update (0 = no limit)").at_least(0);
//     s.add("clip_norm", &c.clip_norm, "clip gradients to this global L2 norm (0 = off)").at_least(0);
//   }

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace fairseq_cpp::config {

// Where a key's value lives. std::optional fields are "unset" until the config names them
// (used where a preset decides, e.g. model sizes from `model.arch`).
using FieldRef =
    std::variant<bool*, int64_t*, double*, std::string*, std::optional<bool>*, std::optional<int64_t>*,
                 std::optional<double>*, std::vector<int64_t>*, std::vector<double>*, std::vector<std::string>*>;

// One key: its name within the section, its help line, where it lives and what it may hold.
struct Field {
  std::string name;                           // fairseq's spelling, e.g. "max_tokens"
  std::string help;                           // one line, shown by --help
  FieldRef ref{static_cast<bool*>(nullptr)};  // the bound struct member
  std::optional<double> lower;                // numbers (and every element of a number list) must be >= / > this
  bool lower_exclusive = false;               // true: strictly greater than `lower`
  std::optional<double> upper;                // numbers must be <= this
  std::vector<std::string> choices;           // allowed strings (every element of a string list); empty = any
  std::vector<std::string> aliases;           // other accepted spellings (e.g. fairseq's older names)
  std::string flag;                           // command-line flag without dashes; empty = the name with '_' -> '-'
  std::vector<std::string> flag_spellings;    // further flags taken as written, e.g. torch launchers' "local_rank"
  std::optional<std::string> bare;            // the value of the flag given alone (argparse's nargs='?' const)
  std::string refusal;                        // not implemented yet: any value but the default is an error, why
  std::string no_effect;                      // accepted, and every value behaves alike here: why

  Field& at_least(double v) {
    lower = v;
    lower_exclusive = false;
    return *this;
  }
  Field& greater_than(double v) {
    lower = v;
    lower_exclusive = true;
    return *this;
  }
  Field& at_most(double v) {
    upper = v;
    return *this;
  }
  Field& in_range(double lo, double hi) { return at_least(lo).at_most(hi); }
  Field& one_of(std::vector<std::string> values) {
    choices = std::move(values);
    return *this;
  }
  Field& alias(std::string name) {
    aliases.push_back(std::move(name));
    return *this;
  }
  Field& with_flag(std::string name) {
    flag = std::move(name);
    return *this;
  }
  // A further flag taken exactly as written: `--local_rank=N`, as fairseq's argparse alias and
  // torch.distributed.launch spell it (aliases are otherwise flags with dashes only).
  Field& also_flag(std::string name) {
    flag_spellings.push_back(std::move(name));
    return *this;
  }
  // `--remove-bpe` alone means "@@ ", as fairseq's `nargs='?', const='@@ '`.
  Field& when_bare(std::string value) {
    bare = std::move(value);
    return *this;
  }
  // A fairseq key that fairseq-cpp does not implement yet: setting it is a one-line error that
  // says `reason`, never a run that silently ignores it.
  Field& not_yet(std::string reason) {
    refusal = std::move(reason);
    return *this;
  }
  // A fairseq key whose values all give the same result here (e.g. the DDP implementation, where
  // every choice averages the same gradients): accepted so that recipes run, with `reason` in --help.
  Field& same_for_every_value(std::string reason) {
    no_effect = std::move(reason);
    return *this;
  }

  // The flag that sets this key on the command line, e.g. "max-tokens".
  std::string flag_name() const;
  // "int", "float", "bool", "str", "int?", "list[float]", ... for --help.
  std::string type_name() const;
};

// The keys of one config section (`optimization`, `dataset`, ...), bound to one struct instance.
class Section {
 public:
  Section(std::string name, std::string help) : name_(std::move(name)), help_(std::move(help)) {}

  template <typename T>
  Field& add(std::string name, T* field, std::string help) {
    Field& f = fields_.emplace_back();
    f.name = std::move(name);
    f.help = std::move(help);
    f.ref = field;
    return f;
  }

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const std::deque<Field>& fields() const { return fields_; }
  // The field called `key` (or with `key` as an alias); nullptr when there is none.
  const Field* find(const std::string& key) const;

 private:
  std::string name_;
  std::string help_;
  std::deque<Field> fields_;  // a deque: references returned by add() stay valid
};

}  // namespace fairseq_cpp::config
