#pragma once
// numpy's np.random.default_rng(seed), bit for bit: PCG64 (XSL-RR 128/64) seeded through
// SeedSequence, and the two draws sacreBLEU's significance tests make with it. Reproducing the
// generator, rather than only its distribution, gives the package's resamples, hence its p-values.
//
//   NumpyGenerator rng(12345);
//   auto idx = rng.integers(3000, 1000 * 3000);   // rng.choice(3000, size=(1000, 3000))
//   auto sel = rng.booleans(10000 * 3000);        // rng.integers(2, size=(10000, 3000), dtype=bool)

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fairseq_cpp::scoring {

class NumpyGenerator {
 public:
  explicit NumpyGenerator(uint64_t seed);

  uint64_t next_uint64();  // bit_generator.random_raw()
  uint32_t next_uint32();  // the low half of a 64-bit draw, then its high half

  // rng.integers(0, high, size=count) (also rng.choice(high, size=count)); high >= 1.
  std::vector<uint32_t> integers(uint32_t high, size_t count);
  // rng.integers(2, size=count, dtype=bool): 0 or 1.
  std::vector<uint8_t> booleans(size_t count);

 private:
  unsigned __int128 state_ = 0, increment_ = 0;
  bool has_uint32_ = false;
  uint32_t uint32_ = 0;
};

}  // namespace fairseq_cpp::scoring
