// The attention function and module against hand computations, on each device (tests that
// exercise the CPU kernel itself, cpu_attention, stay CPU-only).
#include <gtest/gtest.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <memory>
#include <set>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include "tests/support/torch.h"

#include "fairseq_cpp/core/runtime.h"
#include "fairseq_cpp/nn/attention.h"
#include "fairseq_cpp/optim/mixed_precision.h"
#include "tests/support/devices.h"

namespace fairseq_cpp::nn {
namespace {

// Inputs are drawn on the CPU (the same numbers on every device), then moved; results come back
// to the CPU for the comparisons.
class Attention : public ::testing::TestWithParam<std::string> {
 protected:
  torch::Device device() const { return torch::Device(GetParam()); }
  // CPU float32 meets the first; CUDA float32 (other kernels, other summation orders) the second.
  double tolerance(double cpu) const { return device().is_cuda() ? 10 * cpu : cpu; }
};

TEST_P(Attention, ReferencePathMatchesAHandComputation) {
  // One head, D = 2: q = [1, 0], keys [1, 0] and [0, 1]: scores [1, 0] / sqrt(2).
  at::Tensor q = torch::tensor({1.f, 0.f}).view({1, 1, 1, 2}).to(device());
  at::Tensor k = torch::tensor({1.f, 0.f, 0.f, 1.f}).view({1, 1, 2, 2}).to(device());
  at::Tensor v = torch::tensor({1.f, 2.f, 3.f, 4.f}).view({1, 1, 2, 2}).to(device());
  const double a = std::exp(1 / std::sqrt(2.0)) / (std::exp(1 / std::sqrt(2.0)) + 1);
  at::Tensor out = attention_reference(q, k, v, at::Tensor(), 0.0, false).to(torch::kCPU);
  EXPECT_NEAR(out[0][0][0][0].item<double>(), a * 1 + (1 - a) * 3, tolerance(1e-6));
  EXPECT_NEAR(out[0][0][0][1].item<double>(), a * 2 + (1 - a) * 4, tolerance(1e-6));
  // Masking the second key leaves the first value.
  at::Tensor mask = torch::tensor({false, true}).view({1, 1, 1, 2}).to(device());
  out = attention(q, k, v, mask, 0.0, false).to(torch::kCPU);
  EXPECT_NEAR(out[0][0][0][0].item<double>(), 1.0, tolerance(1e-6));
  EXPECT_NEAR(out[0][0][0][1].item<double>(), 2.0, tolerance(1e-6));
}

TEST_P(Attention, DispatchedPathEqualsReferencePath) {
  torch::manual_seed(0);
  at::Tensor q = torch::randn({2, 3, 5, 4}), k = torch::randn({2, 3, 6, 4}), v = torch::randn({2, 3, 6, 4});
  at::Tensor mask = torch::rand({2, 1, 5, 6}) > 0.6;
  mask.select(3, 0).fill_(false);  // every query keeps one key
  q = q.to(device()), k = k.to(device()), v = v.to(device()), mask = mask.to(device());
  at::Tensor a = attention(q, k, v, mask, 0.0, false).to(torch::kCPU);
  at::Tensor b = attention_reference(q, k, v, mask, 0.0, false).to(torch::kCPU);
  EXPECT_LT((a - b).abs().max().item<double>(), tolerance(1e-5));
}

// The per-head BLAS path against autograd through the matmul-softmax-matmul path: outputs and the
// gradients of q, k and v, on (B, T, H, D) projections seen as (B, H, T, D) (as the module passes
// them), with a causal mask and padded keys together, with and without dropout (both paths draw
// the same mask from the same seed).
TEST(Attention, CpuPathAndItsGradientsEqualTheReferencePath) {
  for (double dropout : {0.0, 0.3}) {
    torch::manual_seed(2);
    const int64_t b = 3, h = 2, t = 5, s = 5, d = 4;
    at::Tensor q0 = torch::randn({b, t, h, d}), k0 = torch::randn({b, s, h, d}), v0 = torch::randn({b, s, h, d});
    at::Tensor pad = torch::zeros({b, 1, 1, s}, torch::kBool);
    pad[1][0][0][4] = true;
    pad[2][0][0][3] = true;
    pad[2][0][0][4] = true;
    at::Tensor mask = causal_mask(t, torch::kCPU).view({1, 1, t, s}).logical_or(pad);
    at::Tensor grad_out = torch::randn({b, h, t, d});
    std::vector<at::Tensor> grads[2];
    at::Tensor outs[2];
    for (int path = 0; path < 2; ++path) {
      at::Tensor q = q0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true);
      at::Tensor v = v0.clone().requires_grad_(true);
      at::Tensor qh = q.transpose(1, 2), kh = k.transpose(1, 2), vh = v.transpose(1, 2);
      ASSERT_TRUE(cpu_attention_applies(qh, kh, vh));
      torch::manual_seed(9);
      outs[path] = path == 0 ? cpu_attention(qh, kh, vh, mask, dropout, true)
                             : attention_reference(qh, kh, vh, mask, dropout, true);
      outs[path].backward(grad_out);
      grads[path] = {q.grad(), k.grad(), v.grad()};
    }
    EXPECT_LT((outs[0] - outs[1]).abs().max().item<double>(), 1e-5) << "dropout " << dropout;
    const char* names[] = {"q", "k", "v"};
    for (int i = 0; i < 3; ++i) {
      EXPECT_LT((grads[0][i] - grads[1][i]).abs().max().item<double>(), 1e-5) << names[i] << ", dropout " << dropout;
      EXPECT_GT(grads[0][i].abs().sum().item<double>(), 0.0) << names[i];
    }
  }
}

// Training on the CPU in bf16 takes the batched products (attention_reference) with either LibTorch
// (on 2.x instead of the fused kernel, whose backward was slower there): the same output and
// gradients to the bit, dropout included.
TEST(Attention, CpuTrainingInBf16TakesTheBatchedProducts) {
  torch::manual_seed(4);
  const int64_t b = 2, h = 2, t = 6, d = 8;
  const at::Tensor q0 = torch::randn({b, h, t, d}).to(at::kBFloat16), k0 = torch::randn({b, h, t, d}).to(at::kBFloat16);
  const at::Tensor v0 = torch::randn({b, h, t, d}).to(at::kBFloat16),
                   grad_out = torch::randn({b, h, t, d}).to(at::kBFloat16);
  const at::Tensor mask = causal_mask(t, torch::kCPU).view({1, 1, t, t});
  at::Tensor outs[2], grads[2];
  for (int path = 0; path < 2; ++path) {
    at::Tensor q = q0.clone().requires_grad_(true);
    torch::manual_seed(9);
    outs[path] = path == 0 ? attention(q, k0, v0, mask, 0.2, true) : attention_reference(q, k0, v0, mask, 0.2, true);
    outs[path].backward(grad_out);
    grads[path] = q.grad();
  }
  EXPECT_TRUE(at::equal(outs[0], outs[1]));
  EXPECT_TRUE(at::equal(grads[0], grads[1]));
  EXPECT_GT(grads[0].abs().sum().item<double>(), 0.0);
}

// Beam search's cross-attention: query row b reads key/value row kv_rows[b] (hypotheses share
// their sentence's keys), equal to attending to the index_selected keys and values.
TEST(Attention, CpuPathWithKeyRowsEqualsIndexSelectedKeys) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(4);
  const int64_t sentences = 2, rows = 5, h = 2, s = 6, d = 4;
  at::Tensor q = torch::randn({rows, 1, h, d}).transpose(1, 2);
  at::Tensor k = torch::randn({sentences, s, h, d}).transpose(1, 2), v = torch::randn({sentences, s, h, d}).transpose(1, 2);
  at::Tensor kv_rows = torch::tensor({1, 1, 0, 1, 0}, torch::kLong);
  at::Tensor pad = torch::zeros({sentences, s}, torch::kBool);
  pad[0][0] = true;  // sentence 0 is left-padded by one
  at::Tensor mask = pad.index_select(0, kv_rows).view({rows, 1, 1, s});
  ASSERT_TRUE(cpu_attention_applies(q, k, v, kv_rows));
  EXPECT_FALSE(cpu_attention_applies(q, k, v)) << "row counts differ without the map";
  at::Tensor got = cpu_attention(q, k, v, mask, 0.0, false, kv_rows);
  at::Tensor want = attention_reference(q, k.index_select(0, kv_rows), v.index_select(0, kv_rows), mask, 0.0, false);
  EXPECT_LT((got - want).abs().max().item<double>(), 1e-6);
}

// One query row per (batch, head), as a decoder's step: on CPUs with AVX2 the head sizes 32, 64 and
// 128 take attend()'s row kernel (dot products and a weighted sum in registers, no BLAS), 48 the
// BLAS path, as do all with the row kernels off. Each against float64 sums of the same inputs,
// with a padding mask, with the keys' row map (cross-attention) and without (self-attention's
// cache, a view into a longer buffer).
TEST(Attention, OneQueryRowEqualsFloat64Sums) {
  torch::NoGradGuard no_grad;
  struct Restore {
    ~Restore() { set_row_attention_kernels(true); }
  } restore;
  for (const bool row_kernels : {true, false}) {
    for (int64_t d : {32, 48, 64, 128}) {
      set_row_attention_kernels(row_kernels);
      EXPECT_EQ(row_attention_kernel_applies(d), row_kernels && d != 48 && core::cpu_has_avx2_fma()) << "d " << d;
      torch::manual_seed(d);
      const int64_t sentences = 3, rows = 6, h = 2, s = 7;
      at::Tensor q = torch::randn({rows, 1, h, d}).transpose(1, 2);
      at::Tensor k = torch::randn({sentences, s, h, d}).transpose(1, 2);
      at::Tensor v = torch::randn({sentences, s, h, d}).transpose(1, 2);
      at::Tensor kv_rows = torch::tensor({2, 2, 0, 1, 0, 1}, torch::kLong);
      at::Tensor pad = torch::zeros({sentences, s}, torch::kBool);
      pad[0][0] = true;
      pad[1][5] = true;
      pad[1][6] = true;
      at::Tensor mask = pad.index_select(0, kv_rows).view({rows, 1, 1, s});
      at::Tensor probs;
      at::Tensor got = cpu_attention(q, k, v, mask, 0.0, false, kv_rows, &probs);
      at::Tensor kd = k.index_select(0, kv_rows).to(torch::kDouble), vd = v.index_select(0, kv_rows).to(torch::kDouble);
      at::Tensor scores = torch::matmul(q.to(torch::kDouble), kd.transpose(2, 3)) / std::sqrt(static_cast<double>(d));
      at::Tensor want_probs = torch::softmax(scores.masked_fill(mask, -INFINITY), -1);
      at::Tensor want = torch::matmul(want_probs, vd);
      EXPECT_LT((got.to(torch::kDouble) - want).abs().max().item<double>(), 2e-6)
          << "d " << d << (row_kernels ? "" : ", BLAS");
      EXPECT_LT((probs.to(torch::kDouble) - want_probs).abs().max().item<double>(), 1e-6)
          << "d " << d << (row_kernels ? "" : ", BLAS");
      EXPECT_EQ(probs.masked_select(mask.expand_as(probs)).abs().max().item<float>(), 0.0f)
          << "d " << d << (row_kernels ? "" : ", BLAS");

      // Self-attention: the first 5 of 9 positions of a cache buffer, one row per hypothesis.
      at::Tensor buffer = torch::randn({rows, h, 9, d});
      at::Tensor ks = buffer.narrow(2, 0, 5), vs = buffer.narrow(2, 4, 5);
      at::Tensor self = cpu_attention(q, ks, vs, at::Tensor(), 0.0, false);
      at::Tensor self_probs =
          torch::softmax(torch::matmul(q.to(torch::kDouble), ks.to(torch::kDouble).transpose(2, 3)) /
                             std::sqrt(static_cast<double>(d)),
                         -1);
      at::Tensor self_want = torch::matmul(self_probs, vs.to(torch::kDouble));
      EXPECT_LT((self.to(torch::kDouble) - self_want).abs().max().item<double>(), 2e-6)
          << "d " << d << (row_kernels ? "" : ", BLAS");
    }
  }
}

// The cache's lazy reordering: two reorderings, then an append, equal index_select twice and cat,
// also when rows are duplicated and dropped (beam search) and for the static (materialized) path.
// The CPU takes the one-copy gather_append, CUDA the materialize-and-cat path; both are exact copies.
class AttentionCaches : public ::testing::TestWithParam<std::string> {
 protected:
  torch::Device device() const { return torch::Device(GetParam()); }
};

TEST_P(AttentionCaches, LazyReorderThenAppendEqualsIndexSelectAndCat) {
  torch::manual_seed(3);
  at::Tensor key = torch::randn({4, 2, 3, 5}), value = torch::randn({4, 2, 3, 5});
  at::Tensor step_k = torch::randn({3, 1, 2, 5}).transpose(1, 2), step_v = torch::randn({3, 1, 2, 5}).transpose(1, 2);
  at::Tensor first = torch::tensor({3, 3, 0, 1}, torch::kLong), second = torch::tensor({2, 0, 1}, torch::kLong);
  // The expectations on the CPU, the cache on the device.
  AttentionCache cache;
  cache.key = key.to(device());
  cache.value = value.to(device());
  cache.reorder(first.to(device()));
  cache.reorder(second.to(device()));
  cache.append(step_k.to(device()), step_v.to(device()));
  at::Tensor want_k = torch::cat({key.index_select(0, first).index_select(0, second), step_k}, 2);
  at::Tensor want_v = torch::cat({value.index_select(0, first).index_select(0, second), step_v}, 2);
  EXPECT_EQ(cache.key.device(), device());
  EXPECT_TRUE(torch::equal(cache.key.to(torch::kCPU), want_k));
  EXPECT_TRUE(torch::equal(cache.value.to(torch::kCPU), want_v));
  EXPECT_FALSE(cache.pending_rows.defined());

  AttentionCache fixed;
  fixed.key = key.to(device());
  fixed.value = value.to(device());
  fixed.reorder(first.to(device()));
  fixed.materialize();
  EXPECT_TRUE(torch::equal(fixed.key.to(torch::kCPU), key.index_select(0, first)));
  EXPECT_TRUE(torch::equal(fixed.value.to(torch::kCPU), value.index_select(0, first)));
}

// Beam search's caches on shared buffers (CPU float32): two caches (a decoder's layers) reordered,
// shrunk and appended to step after step hold what caches with their own copies hold, and from the
// third step on no step allocates: the four tensors and the spare rotate over the same five buffers
// (a step past `max_steps` may allocate, and is still right).
TEST(AttentionCaches, CachesOnSharedBuffersEqualOwnCopiesAndStopAllocatingAfterTheSecondStep) {
  torch::manual_seed(5);
  const int64_t heads = 2, dim = 3, max_steps = 6;
  auto buffers = std::make_shared<CacheBuffers>(max_steps);
  std::vector<AttentionCache> shared(2), own(2);
  for (auto& c : shared) c.buffers = buffers;
  std::set<const void*> first_buffers;
  int64_t rows = 4;
  for (int64_t step = 0; step < max_steps + 2; ++step) {
    const int64_t next_rows = step == 3 ? 3 : rows;  // a sentence finishes: fewer rows from here
    at::Tensor order = torch::randint(rows, {next_rows}, torch::kLong);
    for (size_t layer = 0; layer < 2; ++layer) {
      at::Tensor k = torch::randn({next_rows, 1, heads, dim}).transpose(1, 2);
      at::Tensor v = torch::randn({next_rows, 1, heads, dim}).transpose(1, 2);
      if (step > 0) {
        shared[layer].reorder(order);
        own[layer].reorder(order);
      }
      shared[layer].append(k, v);
      own[layer].append(k, v);
      ASSERT_TRUE(torch::equal(shared[layer].key, own[layer].key)) << "step " << step << " layer " << layer;
      ASSERT_TRUE(torch::equal(shared[layer].value, own[layer].value)) << "step " << step << " layer " << layer;
      EXPECT_EQ(shared[layer].key.sizes(), (std::vector<int64_t>{next_rows, heads, step + 1, dim}));
    }
    rows = next_rows;
    if (step < 2) continue;  // step 0 keeps the projections, step 1 allocates a buffer per tensor
    std::set<const void*> now{buffers->spare.data_ptr()};
    for (const auto& c : shared) now.insert({c.key_buffer.data_ptr(), c.value_buffer.data_ptr()});
    if (step == 2) first_buffers = now;
    if (step > 2 && step < max_steps) {
      EXPECT_EQ(now, first_buffers) << "step " << step << " allocated";
    }
  }
  EXPECT_EQ(first_buffers.size(), 5u);
}

// Beam search's self-attention caches kept in place (CPU float32, head size 64, AVX2's row
// kernel): step after step of reorders (a row per sentence growing to a row per hypothesis, rows
// duplicated and dropped, a sentence finishing), each
// cache holds what a cache with its own copies holds, gathered by position; attention that reads
// it by position gives the bits of attention over those copies; its buffers move only when the
// rows outgrow them; with an eighth of the rows gone, it leaves the in-place form and is still
// right; and no step is written past `max_steps`.
TEST(AttentionCaches, CachesKeptInPlaceEqualOwnCopiesUntilAnEighthOfTheRowsAreGone) {
  if (!row_attention_kernel_applies(64)) GTEST_SKIP() << "the row kernel needs a CPU with AVX2 and FMA";
  torch::NoGradGuard no_grad;
  torch::manual_seed(6);
  const int64_t heads = 2, dim = 64, max_steps = 6;
  auto buffers = std::make_shared<CacheBuffers>(max_steps);
  AttentionCache in_place, own;
  in_place.buffers = buffers;
  const void* first_buffer = nullptr;
  int64_t rows = 2;
  for (int64_t step = 0; step < max_steps + 2; ++step) {
    // Step 1 reads 16 rows of 2 (as beam search's second step), step 3 drops to 15 and step 5 to
    // 14 (sentences finish; exactly an eighth of the buffers' 16 rows gone: the cache leaves the
    // in-place form), step 6 to 13.
    const int64_t next_rows = step == 1 ? 16 : step == 3 ? 15 : step == 5 ? 14 : step == 6 ? 13 : rows;
    at::Tensor order = torch::randint(rows, {next_rows}, torch::kLong);
    at::Tensor k = torch::randn({next_rows, 1, heads, dim}).transpose(1, 2);
    at::Tensor v = torch::randn({next_rows, 1, heads, dim}).transpose(1, 2);
    at::Tensor q = torch::randn({next_rows, 1, heads, dim}).transpose(1, 2);
    if (step > 0) {
      in_place.reorder(order);
      own.reorder(order);
    }
    own.append(k, v);
    const bool fits = step < 5;
    ASSERT_EQ(in_place.can_append_in_place(k, v), fits) << "step " << step;
    if (fits) {
      in_place.append_in_place(k, v);
      if (step == 1) first_buffer = in_place.key_buffer.data_ptr();  // the buffers for 16 rows
      if (step > 1) {
        EXPECT_EQ(in_place.key_buffer.data_ptr(), first_buffer) << "step " << step;
      }
      EXPECT_EQ(in_place.key.size(0), step == 0 ? 2 : 16) << "step " << step;
      EXPECT_EQ(in_place.positions.sizes(), (std::vector<int64_t>{next_rows, step + 1}));
      at::Tensor by_position =
          cpu_attention(q, in_place.key, in_place.value, at::Tensor(), 0.0, false, in_place.positions);
      at::Tensor over_copies = cpu_attention(q, own.key, own.value, at::Tensor(), 0.0, false);
      EXPECT_TRUE(torch::equal(by_position, over_copies)) << "step " << step;
      at::Tensor mask = torch::rand({next_rows, 1, 1, step + 1}) > 0.5;  // padded keys
      mask.select(3, 0).fill_(false);
      at::Tensor masked = cpu_attention(q, in_place.key, in_place.value, mask, 0.0, false, in_place.positions);
      EXPECT_TRUE(torch::equal(masked, cpu_attention(q, own.key, own.value, mask, 0.0, false))) << "step " << step;
      AttentionCache gathered = in_place;
      gathered.materialize();
      EXPECT_FALSE(gathered.positions.defined());
      ASSERT_TRUE(torch::equal(gathered.key, own.key)) << "step " << step;
      ASSERT_TRUE(torch::equal(gathered.value, own.value)) << "step " << step;
    } else {
      in_place.append(k, v);  // gathered, then appended as a plain cache
      EXPECT_FALSE(in_place.positions.defined());
      ASSERT_TRUE(torch::equal(in_place.key, own.key)) << "step " << step;
      ASSERT_TRUE(torch::equal(in_place.value, own.value)) << "step " << step;
    }
    rows = next_rows;
  }
  // The buffers' last position taken: the next step is not appended in place.
  AttentionCache full;
  full.buffers = std::make_shared<CacheBuffers>(3);
  for (int64_t step = 0; step < 4; ++step) {
    at::Tensor k = torch::randn({2, heads, 1, dim});
    ASSERT_EQ(full.can_append_in_place(k, k), step < 3) << "step " << step;
    if (step < 3) full.append_in_place(k, k);
  }
}

// Where a tensor's bytes lie, without keeping its storage alive.
struct Bytes {
  explicit Bytes(const at::Tensor& t) : first(reinterpret_cast<uintptr_t>(t.data_ptr())), size(t.nbytes()) {}
  uintptr_t first;
  size_t size;
};

// How many of the first and the last page of `bytes` are mapped in this process (0, 1 or 2; msync
// answers ENOMEM where a page is not).
int mapped_ends(const Bytes& bytes) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  int mapped = 0;
  for (uintptr_t address : {bytes.first, bytes.first + bytes.size - 1}) {
    mapped += msync(reinterpret_cast<void*>(address / page * page), page, MS_ASYNC) == 0 || errno != ENOMEM;
  }
  return mapped;
}

// A cache kept in place holds its buffers on pages of their own: when it moves to larger buffers,
// leaves the in-place form (an eighth of its rows gone) or is dropped, their pages leave the
// process at once. From the allocator, freed pages stay resident until the batch ends (jemalloc
// with dirty_decay_ms -1; these 48 KiB would come from glibc's heap), beside the buffers that
// replace them (issue 37: 30-35 MiB at the peak of the fixture's translation).
TEST(AttentionCaches, BuffersKeptInPlaceLeaveTheProcessWhenLetGo) {
  if (!row_attention_kernel_applies(64)) GTEST_SKIP() << "the row kernel needs a CPU with AVX2 and FMA";
  torch::NoGradGuard no_grad;
  const at::Tensor sixteen = torch::tensor({0, 0, 1, 1, 1, 0, 1, 0, 0, 1, 1, 0, 0, 1, 0, 1}, torch::kLong);
  for (const bool leaves_in_place : {false, true}) {
    AttentionCache cache;
    cache.buffers = std::make_shared<CacheBuffers>(6);
    at::Tensor k = torch::randn({2, 2, 1, 64});
    cache.append_in_place(k, k);  // one position for 2 rows
    const Bytes first_key(cache.key_buffer), first_value(cache.value_buffer);
    cache.reorder(sixteen);
    k = torch::randn({16, 2, 1, 64});
    cache.append_in_place(k, k);  // 6 positions for 16 rows: 48 KiB each for the keys and the values
    EXPECT_EQ(mapped_ends(first_key), 0) << "the first step's buffers, outgrown";
    EXPECT_EQ(mapped_ends(first_value), 0);
    const Bytes key_pages(cache.key_buffer), value_pages(cache.value_buffer);
    EXPECT_EQ(mapped_ends(key_pages), 2);
    EXPECT_EQ(mapped_ends(value_pages), 2);
    if (leaves_in_place) {  // 14 rows of 16: gathered into the copying form
      cache.reorder(sixteen.narrow(0, 0, 14));
      k = torch::randn({14, 2, 1, 64});
      ASSERT_FALSE(cache.can_append_in_place(k, k));
      cache.append(k, k);
      EXPECT_EQ(cache.key.size(0), 14);
    } else {
      cache = AttentionCache();
    }
    EXPECT_EQ(mapped_ends(key_pages), 0) << "leaves the in-place form: " << leaves_in_place;
    EXPECT_EQ(mapped_ends(value_pages), 0) << "leaves the in-place form: " << leaves_in_place;
  }
}

// The module's incremental decoding with the caches in place against caches without buffers (each
// step copied): the same outputs up to float rounding, step after step, with reorders.
TEST(AttentionCaches, ModuleStepsWithCachesInPlaceEqualCopiedCaches) {
  if (!row_attention_kernel_applies(64)) GTEST_SKIP() << "the row kernel needs a CPU with AVX2 and FMA";
  torch::NoGradGuard no_grad;
  torch::manual_seed(7);
  MultiheadAttention attn(MultiheadAttentionOptions{128, 2, 0.0});
  attn->eval();
  AttentionCache in_place, copied;
  in_place.buffers = std::make_shared<CacheBuffers>(8);
  for (int64_t step = 0; step < 5; ++step) {
    at::Tensor x = torch::randn({step == 0 ? 2 : 4, 1, 128});
    if (step > 0) {  // the first step has 2 rows, the later ones 4
      at::Tensor order =
          step == 1 ? torch::tensor({1, 0, 1, 1}, torch::kLong) : torch::tensor({1, 1, 3, 0}, torch::kLong);
      in_place.reorder(order);
      copied.reorder(order);
    }
    at::Tensor a = attn->forward(x, x, at::Tensor(), at::Tensor(), &in_place);
    at::Tensor b = attn->forward(x, x, at::Tensor(), at::Tensor(), &copied);
    EXPECT_TRUE(in_place.positions.defined()) << "step " << step;
    EXPECT_FALSE(copied.positions.defined()) << "step " << step;
    // The copied caches' attention is LibTorch's own on 2.x (its sums in another order).
    EXPECT_LT((a - b).abs().max().item<double>(), 1e-5) << "step " << step;
  }
}

TEST_P(Attention, CausalMaskForbidsTheFuture) {
  at::Tensor m = causal_mask(3, device());
  EXPECT_EQ(m.device(), device());
  EXPECT_TRUE(
      torch::equal(m.to(torch::kCPU), torch::tensor({0, 1, 1, 0, 0, 1, 0, 0, 0}).view({3, 3}).to(torch::kBool)));
}

TEST(Attention, ModuleHasFairseqsParameterNamesAndInitialisation) {
  torch::manual_seed(0);
  MultiheadAttention mha(MultiheadAttentionOptions{256, 4, 0.0});
  std::vector<std::string> names;
  for (const auto& p : mha->named_parameters()) names.push_back(p.key());
  EXPECT_EQ(names, (std::vector<std::string>{"k_proj.weight", "k_proj.bias", "v_proj.weight", "v_proj.bias",
                                             "q_proj.weight", "q_proj.bias", "out_proj.weight", "out_proj.bias"}));
  auto params = mha->named_parameters();
  // xavier_uniform with gain 1/sqrt(2): bound = gain * sqrt(6 / (256 + 256)) = sqrt(3 / 512).
  const double bound = std::sqrt(3.0 / 512);
  EXPECT_LE(params["q_proj.weight"].abs().max().item<double>(), bound);
  EXPECT_GT(params["q_proj.weight"].abs().max().item<double>(), 0.95 * bound);
  EXPECT_GT(params["out_proj.weight"].abs().max().item<double>(), 1.3 * bound);  // plain xavier: sqrt(2) wider
  EXPECT_EQ(params["out_proj.bias"].abs().sum().item<double>(), 0.0);
}

TEST_P(Attention, PaddedKeysDoNotChangeTheResult) {
  torch::manual_seed(1);
  MultiheadAttention mha(MultiheadAttentionOptions{8, 2, 0.0});
  at::Tensor query = torch::randn({1, 3, 8});
  at::Tensor keys = torch::randn({1, 4, 8});
  at::Tensor padded = torch::cat({keys, torch::randn({1, 2, 8})}, 1);
  at::Tensor pad_mask = torch::tensor({false, false, false, false, true, true}).view({1, 6});
  mha->to(device());
  query = query.to(device()), keys = keys.to(device()), padded = padded.to(device()), pad_mask = pad_mask.to(device());
  at::Tensor a = mha->forward(query, keys, at::Tensor(), at::Tensor()).to(torch::kCPU);
  at::Tensor b = mha->forward(query, padded, pad_mask, at::Tensor()).to(torch::kCPU);
  EXPECT_LT((a - b).abs().max().item<double>(), tolerance(1e-6));
}

// Under autocast the module projects one input by several layers in one product (self-attention's
// q, k and v; the encoder attention's k and v): its output and every gradient stay within bf16's
// rounding of the float32 module's, which projects them one by one (a layer's weight or output
// taken for another's would be off by the whole value).
TEST_P(Attention, UnderAutocastJointProjectionsKeepEachLayersOutputAndGradients) {
  torch::manual_seed(2);
  MultiheadAttention mha(MultiheadAttentionOptions{16, 2, 0.0});
  mha->to(device());
  const at::Tensor x0 = torch::randn({2, 5, 16}).to(device()), memory0 = torch::randn({2, 7, 16}).to(device());
  const at::Tensor upstream = torch::randn({2, 5, 16}).to(device());
  for (bool self : {true, false}) {
    SCOPED_TRACE(self ? "self-attention" : "encoder attention");
    std::vector<at::Tensor> results[2];
    for (int bf16 = 0; bf16 < 2; ++bf16) {
      mha->zero_grad();
      at::Tensor x = x0.clone().requires_grad_(true), memory = memory0.clone().requires_grad_(true);
      at::Tensor out;
      {
        std::unique_ptr<optim::AutocastScope> autocast;
        if (bf16 == 1) autocast = std::make_unique<optim::AutocastScope>(optim::Precision::kBFloat16, device().type());
        out = mha->forward(x, self ? x : memory, at::Tensor(), at::Tensor());
      }
      if (bf16 == 1) {
        EXPECT_EQ(out.scalar_type(), at::kBFloat16);
      }
      out.to(at::kFloat).backward(upstream);
      results[bf16].push_back(out.to(at::kFloat).cpu());
      results[bf16].push_back(x.grad().cpu());
      results[bf16].push_back(self ? at::zeros({1}) : memory.grad().cpu());
      for (const auto& p : mha->named_parameters()) results[bf16].push_back(p.value().grad().cpu());
      ASSERT_EQ(mha->named_parameters()[1].key(), "k_proj.bias");
    }
    ASSERT_EQ(results[0].size(), results[1].size());
    for (size_t i = 0; i < results[0].size(); ++i) {
      // k_proj.bias (result 4) adds the same q.b to every score of a query, which softmax ignores:
      // its gradient is zero but for rounding, measured against k_proj.weight's (result 3)
      const double scale = results[0][i == 4 ? 3 : i].abs().max().item<double>();
      EXPECT_LE((results[1][i] - results[0][i]).abs().max().item<double>(), 0.03 * scale + 1e-6) << "result " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, Attention, ::testing::ValuesIn(testing::test_devices()), testing::device_name);
INSTANTIATE_TEST_SUITE_P(Devices, AttentionCaches, ::testing::ValuesIn(testing::test_devices()), testing::device_name);

}  // namespace
}  // namespace fairseq_cpp::nn
