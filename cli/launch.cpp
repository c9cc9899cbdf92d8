// The command that users run for a program that computes (fairseq-cpp-train, -generate,
// -interactive, -eval): it sets the CPU runtime settings (core/runtime.h: OMP_WAIT_POLICY and
// OPENBLAS_THREAD_TIMEOUT, which libgomp and OpenBLAS read when they load) unless the user set
// them, then executes the program itself, FSQ_PROGRAM_BINARY beside it, in its place (same pid,
// same arguments). It links no LibTorch, so LibTorch loads once, with the settings in place; a
// program that re-executed itself to set them loaded LibTorch twice (0.25-0.5 s of every start).
// Setting them from the program's .preinit_array does not work (core/runtime.h says why).
// What needs no model it answers itself, as the program would (tasks/program.h,
// answer_without_running): --help, --dump-config, and a command line or config that is refused;
// these then take milliseconds, not LibTorch's start-up.
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <string>

#include "fairseq_cpp/core/runtime.h"
#include "fairseq_cpp/tasks/program.h"
#include "fairseq_cpp/tasks/programs.h"

int main(int argc, char** argv) {
  fairseq_cpp::core::set_cpu_runtime_settings();
  if (auto code = fairseq_cpp::tasks::answer_without_running(argc, argv, fairseq_cpp::tasks::FSQ_PROGRAM_SPEC()))
    return *code;
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string path = FSQ_PROGRAM_BINARY;
  if (n > 0) {
    std::string exe(self, static_cast<size_t>(n));
    path = exe.substr(0, exe.rfind('/') + 1) + FSQ_PROGRAM_BINARY;
  }
  execv(path.c_str(), argv);
  std::fprintf(stderr, "%s: cannot start %s: %s\n", argv[0], path.c_str(), std::strerror(errno));
  return 1;
}
