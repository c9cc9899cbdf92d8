// numpy's SeedSequence, PCG64 and bounded integers, after numpy/random/bit_generator.pyx,
// numpy/random/src/pcg64/pcg64.h and numpy/random/src/distributions/distributions.c.
#include "fairseq_cpp/scoring/numpy_random.h"

#include <array>

namespace fairseq_cpp::scoring {
namespace {

using u128 = unsigned __int128;

constexpr u128 kMultiplier = (u128{0x2360ED051FC65DA4ULL} << 64) | 0x4385DF649FCCF645ULL;

// SeedSequence(seed).generate_state(n_words) with a pool of 4 words; numpy's uint32 arithmetic.
std::vector<uint32_t> seed_sequence(uint64_t seed, size_t n_words) {
  constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875, kInitB = 0x8b51f9dd, kMultB = 0x58f38ded;
  constexpr uint32_t kMixL = 0xca01f9dd, kMixR = 0x4973f715;
  // The seed as 32-bit words, least significant first (0 is one word).
  std::vector<uint32_t> entropy{static_cast<uint32_t>(seed)};
  if (seed >> 32 != 0) entropy.push_back(static_cast<uint32_t>(seed >> 32));
  uint32_t hash_const = kInitA;
  auto hashmix = [&](uint32_t value) {
    value ^= hash_const;
    hash_const *= kMultA;
    value *= hash_const;
    return value ^ (value >> 16);
  };
  auto mix = [](uint32_t x, uint32_t y) {
    uint32_t r = kMixL * x - kMixR * y;
    return r ^ (r >> 16);
  };
  std::array<uint32_t, 4> pool{};
  for (size_t i = 0; i < pool.size(); ++i) pool[i] = hashmix(i < entropy.size() ? entropy[i] : 0);
  for (size_t src = 0; src < pool.size(); ++src)
    for (size_t dst = 0; dst < pool.size(); ++dst)
      if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src]));
  for (size_t src = pool.size(); src < entropy.size(); ++src)
    for (auto& word : pool) word = mix(word, hashmix(entropy[src]));
  std::vector<uint32_t> out(n_words);
  uint32_t h = kInitB;
  for (size_t i = 0; i < n_words; ++i) {
    uint32_t v = pool[i % pool.size()] ^ h;
    h *= kMultB;
    v *= h;
    out[i] = v ^ (v >> 16);
  }
  return out;
}

}  // namespace

NumpyGenerator::NumpyGenerator(uint64_t seed) {
  // PCG64's seeding: generate_state(4, uint64), then pcg64_set_seed(state=[0:2], inc=[2:4]).
  const std::vector<uint32_t> w = seed_sequence(seed, 8);
  std::array<uint64_t, 4> words{};
  for (size_t k = 0; k < words.size(); ++k) words[k] = w[2 * k] | static_cast<uint64_t>(w[2 * k + 1]) << 32;
  const u128 init_state = (u128{words[0]} << 64) | words[1];
  const u128 init_sequence = (u128{words[2]} << 64) | words[3];
  increment_ = init_sequence << 1 | 1;
  state_ = increment_;  // one step from 0
  state_ += init_state;
  state_ = state_ * kMultiplier + increment_;
}

uint64_t NumpyGenerator::next_uint64() {
  state_ = state_ * kMultiplier + increment_;
  const auto high = static_cast<uint64_t>(state_ >> 64), low = static_cast<uint64_t>(state_);
  const uint64_t x = high ^ low;
  const unsigned rot = static_cast<unsigned>(high >> 58);
  return (x >> rot) | (x << ((64 - rot) & 63));
}

uint32_t NumpyGenerator::next_uint32() {
  if (has_uint32_) {
    has_uint32_ = false;
    return uint32_;
  }
  const uint64_t next = next_uint64();
  has_uint32_ = true;
  uint32_ = static_cast<uint32_t>(next >> 32);
  return static_cast<uint32_t>(next);
}

std::vector<uint32_t> NumpyGenerator::integers(uint32_t high, size_t count) {
  std::vector<uint32_t> out(count, 0);
  if (high <= 1) return out;
  // Lemire's method on 32-bit draws (buffered_bounded_lemire_uint32), as numpy does for a range
  // below 2^32.
  const uint32_t range = high - 1;  // inclusive
  const uint32_t exclusive = high;
  for (auto& value : out) {
    uint64_t m = static_cast<uint64_t>(next_uint32()) * exclusive;
    auto leftover = static_cast<uint32_t>(m);
    if (leftover < exclusive) {
      const uint32_t threshold = (UINT32_MAX - range) % exclusive;
      while (leftover < threshold) {
        m = static_cast<uint64_t>(next_uint32()) * exclusive;
        leftover = static_cast<uint32_t>(m);
      }
    }
    value = static_cast<uint32_t>(m >> 32);
  }
  return out;
}

std::vector<uint8_t> NumpyGenerator::booleans(size_t count) {
  // buffered_bounded_bool: one 32-bit draw gives 32 booleans, lowest bit first.
  std::vector<uint8_t> out(count);
  uint32_t buffer = 0;
  int left = 0;
  for (auto& value : out) {
    if (left == 0) {
      buffer = next_uint32();
      left = 31;
    } else {
      buffer >>= 1;
      --left;
    }
    value = static_cast<uint8_t>(buffer & 1U);
  }
  return out;
}

}  // namespace fairseq_cpp::scoring
