// Per-channel statistics and in-place normalisation of image datasets.
#include <algorithm>
#include <cmath>

#include "engine/data/dataset.h"
#include "engine/core/error.h"

namespace subdp {

void channel_stats(const ImageDataset& d, std::vector<float>& mean, std::vector<float>& stddev) {
  const int64_t plane = static_cast<int64_t>(d.height) * d.width;
  SUBDP_CHECK(d.n > 0 && d.channels > 0 && plane > 0, "channel_stats: empty dataset");
  SUBDP_CHECK(static_cast<int64_t>(d.images.size()) == d.n * d.sample_size(),
              "channel_stats: {} image values, expected n x C x H x W = {}", d.images.size(), d.n * d.sample_size());
  std::vector<double> sum(d.channels, 0.0), sq(d.channels, 0.0);
  for (int64_t i = 0; i < d.n; ++i) {
    for (int c = 0; c < d.channels; ++c) {
      const float* p = d.images.data() + (i * d.channels + c) * plane;
      double s = 0.0, q = 0.0;
      for (int64_t k = 0; k < plane; ++k) {
        s += p[k];
        q += double{p[k]} * p[k];
      }
      sum[c] += s;
      sq[c] += q;
    }
  }
  const double count = static_cast<double>(d.n) * plane;
  mean.assign(d.channels, 0.0f);
  stddev.assign(d.channels, 0.0f);
  for (int c = 0; c < d.channels; ++c) {
    const double m = sum[c] / count;
    mean[c] = static_cast<float>(m);
    stddev[c] = static_cast<float>(std::sqrt(std::max(0.0, sq[c] / count - m * m)));
  }
}

void normalize(ImageDataset& d, const std::vector<float>& mean, const std::vector<float>& stddev) {
  SUBDP_CHECK(static_cast<int>(mean.size()) == d.channels && static_cast<int>(stddev.size()) == d.channels,
              "normalize: {} means and {} stddevs for {} channels", mean.size(), stddev.size(), d.channels);
  for (int c = 0; c < d.channels; ++c)
    SUBDP_CHECK(stddev[c] > 0.0f,
                "normalize: stddev of channel {} is {}, must be > 0 (every training image holds one value there); "
                "set data.normalize = false to train on the values as they are",
                c, stddev[c]);
  SUBDP_CHECK(static_cast<int64_t>(d.images.size()) == d.n * d.sample_size(),
              "normalize: {} image values, expected n x C x H x W = {}", d.images.size(), d.n * d.sample_size());
  const int64_t plane = static_cast<int64_t>(d.height) * d.width;
  for (int64_t i = 0; i < d.n; ++i) {
    for (int c = 0; c < d.channels; ++c) {
      float* p = d.images.data() + (i * d.channels + c) * plane;
      const float m = mean[c], inv = 1.0f / stddev[c];
      for (int64_t k = 0; k < plane; ++k) p[k] = (p[k] - m) * inv;
    }
  }
}

}  // namespace subdp
