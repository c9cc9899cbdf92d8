#include "fairseq_cpp/nn/bf16_gemm.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "fairseq_cpp/core/runtime.h"

#ifdef FSQ_AVX512_KERNELS
#include <immintrin.h>
#endif

namespace fairseq_cpp::nn {
namespace {

using Bits = uint16_t;             // a bf16 value's bits
constexpr int64_t kColumns = 32;   // columns of B per panel: two vectors of 16 float32 sums
constexpr int kRows = 12;          // rows of A per tile: 24 accumulators of the 32 vector registers
constexpr int64_t kRowBlock = 32;  // rows of A a thread packs at least, row by row

// The pair (x(2q), x(2q + 1)) as one 32-bit word, the first in its low half; zero past `k`.
inline uint32_t pair_of(const Bits* first, int64_t stride, int64_t q, int64_t k) {
  const uint32_t lo = first[2 * q * stride];
  const uint32_t hi = 2 * q + 1 < k ? first[(2 * q + 1) * stride] : 0;
  return lo | hi << 16;
}

// B (K, N), element (k, n) at b[k * sk + n * sn], into panels of kColumns columns: panel p holds,
// for each pair q of rows (2q, 2q + 1), word j = (B(2q, 32p + j), B(2q + 1, 32p + j)): the layout
// VDPBF16PS multiplies by a broadcast pair of A. Rows past K and columns past N are zero.
void pack_b(const Bits* b, int64_t sk, int64_t sn, int64_t k, int64_t n, int64_t pairs, uint32_t* out) {
  const int64_t panels = (n + kColumns - 1) / kColumns;
  at::parallel_for(0, panels, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int64_t columns = std::min(kColumns, n - p * kColumns);
      uint32_t* panel = out + p * pairs * kColumns;
      for (int64_t q = 0; q < pairs; ++q) {
        uint32_t* words = panel + q * kColumns;
        for (int64_t j = 0; j < columns; ++j) words[j] = pair_of(b + (p * kColumns + j) * sn, sk, q, k);
        std::fill(words + columns, words + kColumns, 0U);
      }
    }
  });
}

#ifdef FSQ_AVX512_KERNELS
// Where the pair (A(i, 2q), A(i, 2q + 1)) of A's row i is, as 32 bits (its first value in the low
// half): at a[i * row_stride + q * pair_stride], counted in bf16 values.
struct PackedA {
  int64_t row_stride, pair_stride;
};

// A (M, K), element (i, k) at a[i * si + k * sk], as words (i, q) = (A(i, 2q), A(i, 2q + 1)), zero
// past K, in `out`; returns where they are. Where A's rows are contiguous, row by row; else pair by
// pair (word (i, q) at out[q * M + i]), which reads two of A's columns as two contiguous rows where
// A is a transposed matrix (the weight's gradient g^T x): row by row, its writes 4 KiB apart would
// share the cache's sets.
PackedA pack_a(const Bits* a, int64_t si, int64_t sk, int64_t m, int64_t k, int64_t pairs, uint32_t* out) {
  if (sk == 1) {
    at::parallel_for(0, m, kRowBlock, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        for (int64_t q = 0; q < pairs; ++q) out[i * pairs + q] = pair_of(a + i * si, sk, q, k);
    });
    return {2 * pairs, 2};
  }
  at::parallel_for(0, pairs, 1, [&](int64_t begin, int64_t end) {
    for (int64_t q = begin; q < end; ++q)
      for (int64_t i = 0; i < m; ++i) out[q * m + i] = pair_of(a + i * si, sk, q, k);
  });
  return {2, 2 * m};
}

#define FSQ_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// The float32 values rounded to bf16 to nearest even, NaN to 0x7FC0 (c10::BFloat16's rounding).
FSQ_BF16_TARGET inline __m256i round_to_bf16(__m512 v) {
  // (the maskz forms: GCC 12 warns of the plain ones' undefined passthrough)
  const __mmask16 all = 0xFFFF;
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_maskz_srli_epi32(all, bits, 16), _mm512_set1_epi32(1));
  __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF)));
  rounded = _mm512_mask_mov_epi32(rounded, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_epi32(0x7FC00000));
  return _mm512_maskz_cvtepi32_epi16(all, _mm512_maskz_srli_epi32(all, rounded, 16));
}

// K float32 values rounded to bf16 as above, 16 at a time, as a row of words (zero past K).
FSQ_BF16_TARGET void round_row(const float* row, int64_t k, Bits* bits) {
  for (int64_t j = 0; j < k; j += 16) {
    const auto mask = static_cast<__mmask16>(k - j >= 16 ? 0xFFFF : (1U << (k - j)) - 1);
    _mm256_mask_storeu_epi16(bits + j, mask, round_to_bf16(_mm512_maskz_loadu_ps(mask, row + j)));
  }
  if (k % 2 != 0) bits[k] = 0;
}

// A (M, K), float32 rows `si` apart (each contiguous), rounded to bf16: words (i, q) =
// (A(i, 2q), A(i, 2q + 1)) row by row, in `out` (pack_a's layout for contiguous rows).
void pack_a_rounded(const float* a, int64_t si, int64_t m, int64_t k, int64_t pairs, uint32_t* out) {
  at::parallel_for(0, m, kRowBlock, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) round_row(a + i * si, k, reinterpret_cast<Bits*>(out + i * pairs));
  });
}

// Where one tile's sums go: `columns` (up to kColumns) of each row, plus the bias, as float32 or bf16.
struct Output {
  void* data;
  int64_t stride;  // elements between rows
  bool bf16;
  const float* bias;  // at the tile's first column, or null
  int columns;
};

FSQ_BF16_TARGET inline void store_row(__m512 v0, __m512 v1, const Output& out, int64_t row) {
  const __mmask16 m0 = out.columns >= 16 ? 0xFFFF : static_cast<__mmask16>((1U << out.columns) - 1);
  const __mmask16 m1 = out.columns >= 32   ? 0xFFFF
                       : out.columns <= 16 ? 0
                                           : static_cast<__mmask16>((1U << (out.columns - 16)) - 1);
  if (out.bias != nullptr) {
    v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, out.bias));
    v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, out.bias + 16));
  }
  if (out.bf16) {
    Bits* c = static_cast<Bits*>(out.data) + row * out.stride;
    _mm256_mask_storeu_epi16(c, m0, round_to_bf16(v0));
    _mm256_mask_storeu_epi16(c + 16, m1, round_to_bf16(v1));
  } else {
    float* c = static_cast<float*>(out.data) + row * out.stride;
    _mm512_mask_storeu_ps(c, m0, v0);
    _mm512_mask_storeu_ps(c + 16, m1, v1);
  }
}

// R rows of A (their pairs where `layout` says) times one panel of B.
template <int R>
FSQ_BF16_TARGET void tile(const Bits* a, PackedA layout, const uint32_t* panel, int64_t pairs, const Output& out) {
  __m512 acc0[R], acc1[R];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
  for (int64_t q = 0; q < pairs; ++q) {
    const __m512bh b0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(panel + q * kColumns));
    const __m512bh b1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(panel + q * kColumns + 16));
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      uint32_t word;
      std::memcpy(&word, a + r * layout.row_stride + q * layout.pair_stride, sizeof(word));
      const __m512bh x = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(word)));
      acc0[r] = _mm512_dpbf16_ps(acc0[r], x, b0);
      acc1[r] = _mm512_dpbf16_ps(acc1[r], x, b1);
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) store_row(acc0[r], acc1[r], out, r);
}

using TileKernel = void (*)(const Bits*, PackedA, const uint32_t*, int64_t, const Output&);
template <size_t... R>
constexpr std::array<TileKernel, sizeof...(R)> tiles_of(std::index_sequence<R...>) {
  return {&tile<static_cast<int>(R) + 1>...};
}
constexpr auto kTiles = tiles_of(std::make_index_sequence<kRows>());
#endif

}  // namespace

bool bf16_gemm_supported() {
#ifdef FSQ_AVX512_KERNELS
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  return yes && core::cpu_has_avx512f();
#else
  return false;
#endif
}

Bf16PackedB bf16_pack_b(const at::Tensor& b) {
  TORCH_CHECK(bf16_gemm_supported(), "bf16_matmul: this CPU has no AVX512_BF16");
  TORCH_CHECK(b.dim() == 2 && b.is_cpu() && b.scalar_type() == at::kBFloat16,
              "bf16_pack_b: a bf16 (K, N) CPU tensor expected");
  const int64_t k = b.size(0), n = b.size(1);
  const int64_t pairs = (k + 1) / 2, panels = (n + kColumns - 1) / kColumns;
  Bf16PackedB packed{at::empty({panels * pairs * kColumns}, b.options().dtype(at::kInt)), k, n};
  if (packed.panels.numel() > 0) {
    pack_b(reinterpret_cast<const Bits*>(b.data_ptr<at::BFloat16>()), b.stride(0), b.stride(1), k, n, pairs,
           reinterpret_cast<uint32_t*>(packed.panels.data_ptr<int32_t>()));
  }
  return packed;
}

at::Tensor bf16_matmul(const at::Tensor& a, const at::Tensor& b, c10::ScalarType out_dtype, const at::Tensor& bias) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "bf16_matmul: (M, K) and (K, N) expected, got ",
              a.sizes(), " and ", b.sizes());
  return bf16_matmul(a, bf16_pack_b(b), out_dtype, bias);
}

at::Tensor bf16_matmul(const at::Tensor& a, const Bf16PackedB& b, c10::ScalarType out_dtype, const at::Tensor& bias) {
  TORCH_CHECK(bf16_gemm_supported(), "bf16_matmul: this CPU has no AVX512_BF16");
  TORCH_CHECK(a.dim() == 2 && a.size(1) == b.k, "bf16_matmul: (M, ", b.k, ") expected, got ", a.sizes());
  const bool rounds = a.scalar_type() == at::kFloat;  // float32 A: rounded to bf16 as it is packed
  TORCH_CHECK(a.is_cpu() && (a.scalar_type() == at::kBFloat16 || rounds),
              "bf16_matmul: a bf16 or float32 CPU A expected");
  TORCH_CHECK(out_dtype == at::kFloat || out_dtype == at::kBFloat16, "bf16_matmul: float32 or bf16 output expected");
  const int64_t m = a.size(0), k = b.k, n = b.n;
  TORCH_CHECK(!bias.defined() || bias.numel() == n, "bf16_matmul: a bias of ", n, " values expected");
  at::Tensor out = at::empty({m, n}, a.options().dtype(out_dtype));
  if (m == 0 || n == 0) return out;
  const at::Tensor bias32 = bias.defined() ? bias.to(at::kFloat).contiguous() : at::Tensor();
  if (k == 0) return bias.defined() ? out.copy_(bias32.expand({m, n})) : out.zero_();
#ifdef FSQ_AVX512_KERNELS
  const int64_t pairs = (k + 1) / 2, panels = (n + kColumns - 1) / kColumns;
  const auto* panels_of_b = reinterpret_cast<const uint32_t*>(b.panels.data_ptr<int32_t>());
  // A's rows as they are where they are bf16 and hold whole pairs (contiguous, K even), else packed.
  const Bits* words = nullptr;
  PackedA layout{a.stride(0), 2};
  at::Tensor packed_a;
  if (rounds || a.stride(1) != 1 || k % 2 != 0) {
    packed_a = at::empty({m * pairs}, a.options().dtype(at::kInt));
    auto* packed = reinterpret_cast<uint32_t*>(packed_a.data_ptr<int32_t>());
    if (rounds) {
      const at::Tensor rows = a.stride(1) == 1 ? a : a.contiguous();
      pack_a_rounded(rows.data_ptr<float>(), rows.stride(0), m, k, pairs, packed);
      layout = {2 * pairs, 2};
    } else {
      layout = pack_a(reinterpret_cast<const Bits*>(a.data_ptr<at::BFloat16>()), a.stride(0), a.stride(1), m, k, pairs,
                      packed);
    }
    words = reinterpret_cast<const Bits*>(packed);
  } else {
    words = reinterpret_cast<const Bits*>(a.data_ptr<at::BFloat16>());
  }
  const bool bf16_out = out_dtype == at::kBFloat16;
  char* c = static_cast<char*>(out.data_ptr());
  const int64_t elem = bf16_out ? 2 : 4;
  const float* bias_values = bias32.defined() ? bias32.data_ptr<float>() : nullptr;
  const int64_t tiles = (m + kRows - 1) / kRows;
  auto multiply = [&](int64_t t, int64_t p) {
    const int64_t row = t * kRows;
    const Output o{c + (row * n + p * kColumns) * elem, n, bf16_out,
                   bias_values != nullptr ? bias_values + p * kColumns : nullptr,
                   static_cast<int>(std::min(kColumns, n - p * kColumns))};
    kTiles[std::min<int64_t>(kRows, m - row) - 1](words + row * layout.row_stride, layout,
                                                  panels_of_b + p * pairs * kColumns, pairs, o);
  };
  if (tiles < 4 * at::get_num_threads()) {  // few rows (a decoding step's last ones): the threads share (tile, panel)s
    at::parallel_for(0, tiles * panels, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) multiply(i % tiles, i / tiles);
    });
    return out;
  }
  // The threads share the tiles. Where B is larger than the cache's share of a core (half a MiB)
  // and its panels are small (K up to 1,024), the panels go in blocks of 256 KiB, each multiplied
  // by every tile before the next; otherwise every panel by one tile (whose rows stay in cache)
  // before the next tile.
  const int64_t panel_bytes = pairs * kColumns * 4;
  const int64_t block = panels * panel_bytes <= (512 << 10) || panel_bytes > (64 << 10)
                            ? panels
                            : std::max<int64_t>(1, (256 << 10) / panel_bytes);
  at::parallel_for(0, tiles, 1, [&](int64_t begin, int64_t end) {
    for (int64_t first = 0; first < panels; first += block)
      for (int64_t t = begin; t < end; ++t)
        for (int64_t p = first; p < std::min(panels, first + block); ++p) multiply(t, p);
  });
#endif
  return out;
}

}  // namespace fairseq_cpp::nn
