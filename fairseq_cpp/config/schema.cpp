#include "fairseq_cpp/config/schema.h"

#include <algorithm>

#include "fairseq_cpp/core/overloaded.h"

namespace fairseq_cpp::config {

std::string Field::flag_name() const {
  std::string out = flag.empty() ? name : flag;
  std::replace(out.begin(), out.end(), '_', '-');
  return out;
}

std::string Field::type_name() const {
  return std::visit(Overloaded{
                        [](bool*) { return "bool"; },
                        [](int64_t*) { return "int"; },
                        [](double*) { return "float"; },
                        [](std::string*) { return "str"; },
                        [](std::optional<bool>*) { return "bool?"; },
                        [](std::optional<int64_t>*) { return "int?"; },
                        [](std::optional<double>*) { return "float?"; },
                        [](std::vector<int64_t>*) { return "list[int]"; },
                        [](std::vector<double>*) { return "list[float]"; },
                        [](std::vector<std::string>*) { return "list[str]"; },
                    },
                    ref);
}

const Field* Section::find(const std::string& key) const {
  for (const auto& f : fields_) {
    if (f.name == key || std::find(f.aliases.begin(), f.aliases.end(), key) != f.aliases.end()) return &f;
  }
  return nullptr;
}

}  // namespace fairseq_cpp::config
