#pragma once
// The precompiled header of the library and the tests: the LibTorch headers that take most of a
// clean build's time. Sources that do not use LibTorch skip it (see CMakeLists.txt).
#include <torch/torch.h>
