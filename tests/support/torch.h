#pragma once
// The LibTorch a test suite uses: tensors and their functions (torch::randn, torch::allclose, ...),
// the guards and seeds of torch/utils.h, and torch::nn::Module. The suites' precompiled header
// (tests/CMakeLists.txt) is this and gtest: every translation unit pays for what its header
// declares (with <torch/torch.h>, whose nn, optim, data and serialize templates GCC instantiates in
// every unit whether used or not, the Debian lane's suites took 497 CPU s to compile; with this,
// 414). A test that needs more includes that part itself (torch/nn/functional.h, torch/serialize.h,
// torch/cuda.h).
#include <torch/nn/module.h>
#include <torch/types.h>
#include <torch/utils.h>
