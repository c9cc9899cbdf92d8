// The CPU runtime settings of the programs that run a model (core/runtime.h says why: idle OpenMP
// and OpenBLAS threads must not spin against the busy ones). libgomp and OpenBLAS read their
// variables in their constructors, when they load, before main. A function in the executable's
// .preinit_array runs before any shared library's constructor (the dynamic loader calls the
// preinit array first, then the libraries' initializers), so it sets them in time, without
// re-executing the program and loading LibTorch a second time (0.3-0.5 s of every start).
#include "fairseq_cpp/core/runtime.h"

namespace {

void set_before_libraries_start(int, char**, char**) { fairseq_cpp::core::set_cpu_runtime_settings(); }

// NOLINTNEXTLINE: the loader finds it by its section.
__attribute__((section(".preinit_array"), used)) void (*const preinit_settings)(int, char**, char**) =
    &set_before_libraries_start;

// glibc's __libc_start_main points `environ` back at the original block on the stack after the
// preinit array ran, which drops what setenv added there. The executable's own constructors run
// after that: set the variables again, so that this process (its log line) and the workers it
// spawns see them too.
__attribute__((constructor)) void set_again_for_this_process() { fairseq_cpp::core::set_cpu_runtime_settings(); }

}  // namespace
