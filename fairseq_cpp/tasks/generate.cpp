// fairseq-cpp-generate's and fairseq-cpp-interactive's bodies.
#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/tasks/compute_setup.h"
#include "fairseq_cpp/tasks/programs.h"

namespace fairseq_cpp::tasks {

int generate_main(const Invocation& inv) {
  setup_compute(inv.config);
  raise<NotImplementedError>("generation is not available yet (issue #7).");
}

int interactive_main(const Invocation& inv) {
  setup_compute(inv.config);
  raise<NotImplementedError>("interactive translation is not available yet (issue #7).");
}

}  // namespace fairseq_cpp::tasks
