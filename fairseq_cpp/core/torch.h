#pragma once
// The LibTorch API the library's LibTorch sources use: tensors and their functions, torch/utils.h's
// guards and seeds, autograd's custom functions, and the nn modules the models are made of. It is
// the precompiled header (core/pch.h), so every such translation unit pays for what it declares:
// <torch/torch.h> adds optim, data, serialize, jit and every other nn module, whose templates GCC
// instantiates in each unit whether used or not (about 3 s of an empty unit's 7 at -O0). A source
// that needs more includes that part itself (torch/cuda.h, torch/serialize.h, jit's serialization).
#include <torch/autograd.h>
#include <torch/nn/init.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/types.h>
#include <torch/utils.h>
