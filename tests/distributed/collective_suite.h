#pragma once
// Every collective of the Gang and distributed_utils, checked against closed forms. Rank r
// contributes f(r) = r + 1; on a FakeGang of simulated size n every rank holds this rank's values
// (`simulated`), which changes the expected sums. Tensors live on the gang's device and are compared
// on the CPU. Shared by the FakeGang, thread and process tests.

#include <string>
#include <vector>

#include "fairseq_cpp/distributed/gang.h"

namespace fairseq_cpp::testing {

// Runs the suite on `gang`; returns one line per mismatch (empty = all passed).
std::vector<std::string> run_collective_suite(distributed::Gang& gang, bool simulated);

}  // namespace fairseq_cpp::testing
