#include "fairseq_cpp/core/meters.h"

namespace fairseq_cpp::core {

double monotonic_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace fairseq_cpp::core
