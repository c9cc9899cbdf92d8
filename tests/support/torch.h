#pragma once
// The LibTorch a test suite uses: tensors and their functions (torch::randn, torch::allclose, ...),
// the guards and seeds of torch/utils.h, and torch::nn::Module. The suites' precompiled header
// (tests/CMakeLists.txt) is this and gtest: every translation unit pays for what its header
// declares (a third of a test file's compile time at -O0 went to instantiating <torch/torch.h>'s
// templates, nn, optim, data and serialize included, whether used or not). A test that needs
// more includes that part itself (torch/nn/functional.h, torch/serialize.h, torch/cuda.h).
#include <torch/nn/module.h>
#include <torch/types.h>
#include <torch/utils.h>
