// Deterministic samplers: EpochSampler (seeded per-epoch permutation, disjoint
// rank shares) and WindowSampler (random token windows).
// Every draw is mix64 plus integer arithmetic, so results are identical on all platforms.
#include <utility>

#include "engine/core/hash.h"
#include "engine/data/dataset.h"
#include "engine/core/error.h"

namespace subdp {
namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

/// Hash of the pair (h, v): order-sensitive, used to derive independent streams.
uint64_t combine(uint64_t h, uint64_t v) { return mix64(h ^ mix64(v)); }

/// High 64 bits of the 128-bit product a * b, in portable integer arithmetic.
uint64_t mul_high(uint64_t a, uint64_t b) {
  const uint64_t a_lo = a & 0xffffffffULL, a_hi = a >> 32, b_lo = b & 0xffffffffULL, b_hi = b >> 32;
  const uint64_t lo_lo = a_lo * b_lo, hi_lo = a_hi * b_lo, lo_hi = a_lo * b_hi;
  const uint64_t mid = (lo_lo >> 32) + (hi_lo & 0xffffffffULL) + lo_hi;
  return a_hi * b_hi + (hi_lo >> 32) + (mid >> 32);
}

/// Maps a 64-bit hash onto [0, range) by multiply-shift: floor(h * range / 2^64).
uint64_t to_range(uint64_t h, uint64_t range) { return mul_high(h, range); }

}  // namespace

EpochSampler::EpochSampler(int64_t n, int batch, int rank, int world, uint64_t seed)
    : n_(n), batch_(batch), rank_(rank), world_(world), seed_(seed) {
  SUBDP_CHECK(batch > 0, "EpochSampler: batch size {} must be positive", batch);
  SUBDP_CHECK(world > 0 && rank >= 0 && rank < world, "EpochSampler: rank {} out of range for world size {}", rank,
              world);
  SUBDP_CHECK(n >= 0, "EpochSampler: example count {} must be >= 0", n);
}

// Throws (rather than the constructor) so that an empty placeholder sampler can exist.
int64_t EpochSampler::steps_per_epoch() const {
  const int64_t per_step = static_cast<int64_t>(batch_) * world_;
  SUBDP_CHECK(n_ >= per_step,
              "dataset too small: {} examples cannot fill one step of train.batch_size = {} x world {} = {}; lower "
              "train.batch_size",
              n_, batch_, world_, per_step);
  return n_ / per_step;
}

/// Fisher–Yates shuffle of 0..n-1 driven by the splitmix64 stream of (seed, epoch).
static std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> perm(n);
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  const uint64_t key = combine(seed, static_cast<uint64_t>(epoch));
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t h = mix64(key + static_cast<uint64_t>(i) * kGolden);
    std::swap(perm[i], perm[to_range(h, static_cast<uint64_t>(i) + 1)]);
  }
  return perm;
}

std::vector<int64_t> EpochSampler::batch_indices(int64_t epoch, int64_t step) const {
  SUBDP_CHECK(epoch >= 0, "EpochSampler: epoch {} must be >= 0", epoch);
  SUBDP_CHECK(step >= 0 && step < steps_per_epoch(), "EpochSampler: step {} out of range [0, {})", step,
              steps_per_epoch());
  if (epoch != cached_epoch_) {
    perm_ = epoch_permutation(n_, seed_, epoch);
    cached_epoch_ = epoch;
  }
  const int64_t first = (step * world_ + rank_) * static_cast<int64_t>(batch_);
  return std::vector<int64_t>(perm_.begin() + first, perm_.begin() + first + batch_);
}

WindowSampler::WindowSampler(int64_t n_tokens, int T, int batch, int rank, uint64_t seed)
    : n_tokens_(n_tokens), T_(T), batch_(batch), rank_(rank), seed_(seed) {
  SUBDP_CHECK(T > 0 && batch > 0 && rank >= 0,
              "WindowSampler: need T > 0, batch > 0, rank >= 0 (got T={}, batch={}, rank={})", T, batch, rank);
  SUBDP_CHECK(n_tokens >= static_cast<int64_t>(T) + 2,
              "token stream too short: {} tokens, need at least T + 2 = {} for windows of T + 1", n_tokens,
              static_cast<int64_t>(T) + 2);
}

std::vector<int64_t> WindowSampler::starts(int64_t step) const {
  SUBDP_CHECK(step >= 0, "WindowSampler: step {} must be >= 0", step);
  const uint64_t key = combine(combine(seed_, static_cast<uint64_t>(step)), static_cast<uint64_t>(rank_));
  const uint64_t range = static_cast<uint64_t>(n_tokens_ - T_);  // starts 0 .. n - T - 1
  std::vector<int64_t> out(batch_);
  for (int b = 0; b < batch_; ++b)
    out[b] = static_cast<int64_t>(to_range(combine(key, static_cast<uint64_t>(b)), range));
  return out;
}

}  // namespace subdp
