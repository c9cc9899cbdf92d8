// fairseq-cpp-eval's body: `validate` (fairseq-validate), `score` (fairseq-score, with sacreBLEU's
// metrics and options from scoring/) or `average` (scripts/average_checkpoints.py).
#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/tasks/compute_setup.h"
#include "fairseq_cpp/tasks/programs.h"
#include "fairseq_cpp/tasks/validate.h"

namespace fairseq_cpp::tasks {

int eval_main(const Invocation& inv) {
  if (inv.command_line.subcommand == "validate") {
    setup_compute(inv.config);
    return validate_main(inv);
  }
  if (inv.command_line.subcommand == "score") return score_main(inv.config);
  if (inv.command_line.subcommand == "average") return average_main(inv.config);
  raise<UserError>("unknown subcommand `{}`: use `validate`, `score` or `average`", inv.command_line.subcommand);
}

}  // namespace fairseq_cpp::tasks
