// fairseq-cpp-eval's body: `validate` (fairseq-validate) or `score` (fairseq-score).
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
  raise<NotImplementedError>("`{}` is not available yet (issue #7).", inv.command_line.subcommand);
}

}  // namespace fairseq_cpp::tasks
