#pragma once
// The precompiled header of the library's LibTorch sources and of the programs and benchmarks that
// reuse it: the LibTorch headers that take most of a clean build's time (core/torch.h). Sources
// that do not use LibTorch skip it (see CMakeLists.txt); the test suites have their own.
#include "fairseq_cpp/core/torch.h"
