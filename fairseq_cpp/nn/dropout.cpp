#include "fairseq_cpp/nn/dropout.h"

#include <cstdint>
#include <cstring>
#include <mutex>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include "fairseq_cpp/core/torch.h"

namespace fairseq_cpp::nn {
namespace {

constexpr int64_t kBlock = 4096;  // elements per random stream; fixed, so threads do not matter
constexpr int64_t kGrain = 16384;  // elements per thread's share of an elementwise pass, at least

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t draw_seed() {
  const at::Generator& gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(const_cast<at::Generator&>(gen).mutex());
  return gen.get<at::CPUGeneratorImpl>()->random64();
}

// keep[i] = 1 with probability 1 - p: 32 random bits per element against p * 2^32.
at::Tensor draw_mask(at::IntArrayRef sizes, double p, uint64_t seed) {
  at::Tensor mask = at::empty(sizes, at::TensorOptions().dtype(at::kByte));
  const int64_t n = mask.numel();
  uint8_t* out = mask.data_ptr<uint8_t>();
  const auto threshold = static_cast<uint64_t>(p * 4294967296.0);
  at::parallel_for(0, (n + kBlock - 1) / kBlock, 1, [&](int64_t first, int64_t last) {
    for (int64_t block = first; block < last; ++block) {
      uint64_t state = seed ^ (static_cast<uint64_t>(block) * 0xD1B54A32D192ED03ULL);
      const int64_t begin = block * kBlock;
      const int64_t end = std::min(n, begin + kBlock);
      for (int64_t i = begin; i < end; i += 2) {
        const uint64_t bits = splitmix64(state);
        out[i] = static_cast<uint8_t>((bits & 0xFFFFFFFFULL) >= threshold);
        if (i + 1 < end) out[i + 1] = static_cast<uint8_t>((bits >> 32) >= threshold);
      }
    }
  });
  return mask;
}

// float to bfloat16, rounded to nearest even as c10::BFloat16 does (NaN stays a quiet NaN), in a
// form the compiler vectorizes.
inline uint16_t round_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const uint32_t rounded = (bits + 0x7FFFU + ((bits >> 16) & 1U)) >> 16;
  return f != f ? uint16_t{0x7FC0} : static_cast<uint16_t>(rounded);
}

inline float widen_bf16(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// x * keep * scale in one pass, in float32 arithmetic; x and keep contiguous, x float32 or bf16
// (rounded once, from the float32 product).
at::Tensor apply_mask(const at::Tensor& x, const at::Tensor& keep, float scale) {
  at::Tensor out = at::empty_like(x, at::MemoryFormat::Contiguous);
  const uint8_t* k = keep.data_ptr<uint8_t>();
  if (x.scalar_type() == at::kBFloat16) {
    const auto* in = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
    auto* o = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
    at::parallel_for(0, x.numel(), kGrain, [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i)
        o[i] = round_to_bf16(widen_bf16(in[i]) * (static_cast<float>(k[i]) * scale));
    });
    return out;
  }
  const float* in = x.data_ptr<float>();
  float* o = out.data_ptr<float>();
  at::parallel_for(0, x.numel(), kGrain, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) o[i] = in[i] * (static_cast<float>(k[i]) * scale);  // vectorizes
  });
  return out;
}

struct MaskedDropout : public torch::autograd::Function<MaskedDropout> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, double p) {
    at::Tensor input = x.contiguous();
    at::Tensor keep = draw_mask(input.sizes(), p, draw_seed());
    const auto scale = static_cast<float>(1.0 / (1.0 - p));
    ctx->save_for_backward({keep});
    ctx->saved_data["scale"] = static_cast<double>(scale);
    return apply_mask(input, keep, scale);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    at::Tensor keep = ctx->get_saved_variables()[0];
    const auto scale = static_cast<float>(ctx->saved_data["scale"].toDouble());
    return {apply_mask(grads[0].contiguous(), keep, scale), at::Tensor()};
  }
};

// residual + x * keep * scale in one pass: x float32, or bf16 with the dropout's output rounded to
// bf16 before the float32 add, as dropout then the add give it.
at::Tensor add_masked(const at::Tensor& residual, const at::Tensor& x, const at::Tensor& keep, float scale) {
  at::Tensor out = at::empty_like(residual, at::MemoryFormat::Contiguous);
  const float* r = residual.data_ptr<float>();
  const uint8_t* k = keep.data_ptr<uint8_t>();
  float* o = out.data_ptr<float>();
  if (x.scalar_type() == at::kBFloat16) {
    const auto* in = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
    at::parallel_for(0, x.numel(), kGrain, [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i)
        o[i] = r[i] + widen_bf16(round_to_bf16(widen_bf16(in[i]) * (static_cast<float>(k[i]) * scale)));
    });
    return out;
  }
  const float* in = x.data_ptr<float>();
  at::parallel_for(0, x.numel(), kGrain, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {
      const float dropped = in[i] * (static_cast<float>(k[i]) * scale);  // rounded, as dropout's output is
      o[i] = r[i] + dropped;                                             // (two statements: never one FMA)
    }
  });
  return out;
}

// The gradient of a bf16 x: the float32 gradient rounded to bf16 (as autograd casts it for a bf16
// input of the add), then masked and scaled as the dropout's backward does.
at::Tensor round_and_mask(const at::Tensor& grad, const at::Tensor& keep, float scale) {
  at::Tensor out = at::empty(grad.sizes(), grad.options().dtype(at::kBFloat16));
  const float* g = grad.data_ptr<float>();
  const uint8_t* k = keep.data_ptr<uint8_t>();
  auto* o = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  at::parallel_for(0, grad.numel(), kGrain, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i)
      o[i] = round_to_bf16(widen_bf16(round_to_bf16(g[i])) * (static_cast<float>(k[i]) * scale));
  });
  return out;
}

struct ResidualDropout : public torch::autograd::Function<ResidualDropout> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& residual, const at::Tensor& x,
                            double p) {
    at::Tensor keep = draw_mask(x.sizes(), p, draw_seed());
    const auto scale = static_cast<float>(1.0 / (1.0 - p));
    ctx->save_for_backward({keep});
    ctx->saved_data["scale"] = static_cast<double>(scale);
    ctx->saved_data["bf16"] = x.scalar_type() == at::kBFloat16;
    return add_masked(residual, x, keep, scale);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor keep = ctx->get_saved_variables()[0];
    const auto scale = static_cast<float>(ctx->saved_data["scale"].toDouble());
    const at::Tensor grad = grads[0].contiguous();
    at::Tensor grad_x =
        ctx->saved_data["bf16"].toBool() ? round_and_mask(grad, keep, scale) : apply_mask(grad, keep, scale);
    return {grad, grad_x, at::Tensor()};
  }
};

}  // namespace

at::Tensor residual_dropout(const at::Tensor& residual, const at::Tensor& x, double p, bool training) {
  const bool fused = training && p > 0.0 && p < 1.0 && x.numel() > 0 && residual.is_cpu() && x.is_cpu() &&
                     residual.scalar_type() == at::kFloat &&
                     (x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16) &&
                     residual.sizes() == x.sizes() && residual.is_contiguous() && x.is_contiguous();
  if (!fused) return residual + nn::dropout(x, p, training);
  return ResidualDropout::apply(residual, x, p);
}

at::Tensor dropout_keep_mask(at::IntArrayRef sizes, double p) { return draw_mask(sizes, p, draw_seed()); }

at::Tensor dropout(const at::Tensor& x, double p, bool training) {
  if (!training || p == 0.0 || x.numel() == 0) return x;
  const bool ours = x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16;
  if (!x.is_cpu() || !ours || p >= 1.0) return torch::dropout(x, p, training);
  return MaskedDropout::apply(x, p);
}

}  // namespace fairseq_cpp::nn
