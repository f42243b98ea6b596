// A small seeded pseudo-random generator (xoshiro256**, seeded through
// SplitMix64) whose every output is defined here, not by the standard
// library: the same seed gives the same sequence on every build, which is
// what lets a simulation replay exactly.
#ifndef MYCEL_MESH_MEMBERSHIP_PRNG_H_
#define MYCEL_MESH_MEMBERSHIP_PRNG_H_

#include <cstdint>
#include <utility>
#include <vector>

namespace mycel::membership {

// One step of SplitMix64: a good 64-bit mixer, also used to derive seeds.
inline uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Not thread-safe; each owner keeps its own.
class Prng {
 public:
  explicit Prng(uint64_t seed) {
    for (uint64_t& word : s_) word = SplitMix64(&seed);
  }

  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, n). REQUIRES: n > 0. Lemire's multiply-shift with
  // rejection, so there is no modulo bias.
  uint64_t Uniform(uint64_t n) {
    unsigned __int128 m = static_cast<unsigned __int128>(Next()) * n;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < n) {
      const uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(Next()) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

  // Uniform in [0, 1) with 53 bits.
  double UniformDouble() { return (Next() >> 11) * 0x1.0p-53; }

  // True with probability p.
  bool Bernoulli(double p) { return UniformDouble() < p; }

  // Fisher-Yates.
  template <typename T>
  void Shuffle(std::vector<T>* v) {
    for (size_t i = v->size(); i > 1; --i) {
      std::swap((*v)[i - 1], (*v)[Uniform(i)]);
    }
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

  uint64_t s_[4];
};

}  // namespace mycel::membership

#endif  // MYCEL_MESH_MEMBERSHIP_PRNG_H_
