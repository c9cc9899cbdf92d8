// SLURM's node list syntax (SLURM_JOB_NODELIST), as the topology resolver expands it when scontrol
// is missing. Input: the node list.
#include <string>

#include "fairseq_cpp/core/errors.h"
#include "fairseq_cpp/distributed/topology.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fairseq_cpp;
  try {
    distributed::parse_nodelist(std::string(fuzz::as_text(data, size)));
  } catch (const UserError&) {  // quotes the list, line breaks included
  }
  return 0;
}
