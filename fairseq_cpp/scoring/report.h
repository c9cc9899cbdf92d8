#pragma once
// sacreBLEU's text report of several systems (`sacrebleu REF -i A B ... -f text`): a table of the
// systems' scores drawn as tabulate's fancy_grid, with the paired test's p-values and bootstrap
// estimates when one ran, its explanation, and the metrics' signatures.
//
//   ╒════════════════╤═══════════════════════╕
//   │         System │  BLEU (μ ± 95% CI)    │
//   ╞════════════════╪═══════════════════════╡
//   │ Baseline: a.de │  78.6 (78.5 ± 2.2)    │
//   ├────────────────┼───────────────────────┤
//   │           b.de │  62.3 (62.4 ± 2.7)    │
//   │                │    (p = 0.0010)*      │
//   ╘════════════════╧═══════════════════════╛

#include <string>
#include <vector>

#include "fairseq_cpp/scoring/significance.h"

namespace fairseq_cpp::scoring {

// tabulate's fancy_grid: the first column flush right, the others centred; a cell's lines are
// separated by '\n'. Widths count code points.
std::string fancy_grid(const std::vector<std::string>& headers, const std::vector<std::vector<std::string>>& rows);

struct Report {
  std::vector<std::string> systems;               // names; the first is the baseline in a paired test
  std::vector<std::string> metrics;               // score names: "BLEU", "chrF2", ...
  std::vector<std::string> signatures;            // per metric, with the test's fields
  std::vector<std::vector<TestResult>> results;   // [system][metric]
  const PairedTest* test = nullptr;               // the paired test that ran, if any
  int width = 2;                                  // decimals of the scores
};
// The whole report as sacreBLEU prints it, ending with a newline.
std::string format_report(const Report& report);

}  // namespace fairseq_cpp::scoring
