// Winograd F(2x2, 3x3) convolution (Lavin and Gray 2016). With the transforms
//   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1],
//   A^T = [1 1 1 0; 0 1 -1 -1],
// a 2x2 output tile is Y = A^T [(G g G^T) . (B^T d B)] A for its 4x4 input patch d and each
// 3x3 filter g. Over the T tiles of a chunk of samples and all channel pairs this is, per
// transformed element xi (16),
//   M[xi] (T, Cout) = V[xi] (T, Cin) x U[xi] (Cin, Cout)
// and its backward is two more GEMMs per xi in the same domain:
//   dU[xi] (Cout, Cin) = E[xi]^T (Cout, T) x V[xi] (T, Cin),  E = A dY A^T,  dg = G^T dU G;
//   the input gradient is the forward convolution of dy with the flipped, transposed filters.
// Tiles are rows and channels are columns (channels-last): each sample is transposed to
// (H * W, C) once, and the transforms then run on whole vectors of channels, whatever the
// image width (tile rows are only 4-14 tiles wide on 28x28 inputs, which left the lanes of a
// transform vectorised along rows mostly idle).
#include "kernels/cpu/winograd.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include <omp.h>

#include "kernels/cpu/gemm.h"

namespace subdp::cpu {

namespace {

constexpr int kXi = 16;            // transformed elements per tile (4x4)
constexpr int kTargetTiles = 128;  // tiles per GEMM row block: chunks of samples reach it
constexpr int kLanes = 8;          // floats per Vec

// Eight floats as one value (GCC/Clang vector extension): the transforms run on whole
// channel vectors; with -march=native they compile to AVX2 or AVX-512 registers.
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));

template <class V> V load(const float* p);
template <> inline float load<float>(const float* p) { return *p; }
template <> inline Vec load<Vec>(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, float v) { *p = v; }
inline void store(float* p, Vec v) { std::memcpy(p, &v, sizeof v); }

// Calls f(c, Vec-or-float tag) for channel offsets c covering [0, C): whole vectors first,
// then single channels (channel counts of masked layers need not be multiples of 8).
template <class Fn>
inline void for_channels(int C, Fn&& f) {
  int c = 0;
  for (; c + kLanes <= C; c += kLanes) f(c, Vec{});
  for (; c < C; ++c) f(c, 0.f);
}

// Tile grid of one sample and the chunking of samples into GEMM row blocks.
struct Tiling {
  int th, tw, per_sample, chunk, T;
  explicit Tiling(const ConvShape& s)
      : th((s.H + 1) / 2), tw((s.W + 1) / 2), per_sample(th * tw),
        chunk(std::max(1, std::min(s.N, (kTargetTiles + per_sample - 1) / per_sample))),
        T(chunk * per_sample) {}
  int chunks(int N) const { return (N + chunk - 1) / chunk; }
};

int64_t max_channels(const ConvShape& s) { return std::max(s.Cin, s.Cout); }
int64_t filter_floats(const ConvShape& s) { return int64_t{kXi} * s.Cout * s.Cin; }
int64_t tile_buffer_floats(const ConvShape& s, const Tiling& t) { return kXi * max_channels(s) * t.T; }
// One sample channels-last (H * W, C), plus one zero pixel (the padding) of C floats.
int64_t plane_floats(const ConvShape& s) { return (int64_t{s.H} * s.W + 1) * max_channels(s); }
// Per-thread region: two transformed-tile buffers and one channels-last sample.
int64_t thread_floats(const ConvShape& s, const Tiling& t) { return 2 * tile_buffer_floats(s, t) + plane_floats(s); }

// Workspace layout: max_threads filter-sized slots, then max_threads thread regions. Slot 0
// holds the transformed filters U (forward, input gradient); in the weight-gradient phase,
// when U is dead, slot th holds thread th's partial dU, so U costs no slot of its own.
float* filter_slot(const ConvShape& s, float* ws, int th) { return ws + th * filter_floats(s); }
float* thread_regions(const ConvShape& s, float* ws) { return ws + omp_get_max_threads() * filter_floats(s); }

// u (4x4) = G g G^T for one 3x3 filter g (row-major).
void transform_filter(const float* g, float* u) {
  float t[4][3];  // G g
  for (int j = 0; j < 3; ++j) {
    const float g0 = g[j], g1 = g[3 + j], g2 = g[6 + j];
    t[0][j] = g0;
    t[1][j] = 0.5f * (g0 + g1 + g2);
    t[2][j] = 0.5f * (g0 - g1 + g2);
    t[3][j] = g2;
  }
  for (int i = 0; i < 4; ++i) {
    const float a = t[i][0], b = t[i][1], c = t[i][2];
    u[i * 4 + 0] = a;
    u[i * 4 + 1] = 0.5f * (a + b + c);
    u[i * 4 + 2] = 0.5f * (a - b + c);
    u[i * 4 + 3] = c;
  }
}

// dg (3x3) += G^T du G for one 4x4 transformed-filter gradient du.
void accumulate_filter_gradient(const float* du, float* dg) {
  float t[3][4];  // G^T du
  for (int j = 0; j < 4; ++j) {
    const float d0 = du[j], d1 = du[4 + j], d2 = du[8 + j], d3 = du[12 + j];
    t[0][j] = d0 + 0.5f * (d1 + d2);
    t[1][j] = 0.5f * (d1 - d2);
    t[2][j] = 0.5f * (d1 + d2) + d3;
  }
  for (int i = 0; i < 3; ++i) {
    const float a = t[i][0], b = t[i][1], c = t[i][2], d = t[i][3];
    dg[i * 3 + 0] += a + 0.5f * (b + c);
    dg[i * 3 + 1] += 0.5f * (b - c);
    dg[i * 3 + 2] += 0.5f * (b + c) + d;
  }
}

// U (16, in, out) from filters w (Cout, Cin, 3, 3), laid out as the right-hand GEMM operand
// of a convolution from `in` to `out` channels. transpose_flip: U of the input-gradient
// convolution, w'[ci][co] = w[co][ci] rotated by 180 degrees, so in = Cout, out = Cin.
void transform_filters(const ConvShape& s, const float* w, bool transpose_flip, float* U) {
  const int in = transpose_flip ? s.Cout : s.Cin, out = transpose_flip ? s.Cin : s.Cout;
#pragma omp parallel for schedule(static)
  for (int co = 0; co < s.Cout; ++co)
    for (int ci = 0; ci < s.Cin; ++ci) {
      const float* g = w + (static_cast<int64_t>(co) * s.Cin + ci) * 9;
      float flipped[9], u[kXi];
      if (transpose_flip)
        for (int i = 0; i < 9; ++i) flipped[i] = g[8 - i];
      transform_filter(transpose_flip ? flipped : g, u);
      const int a = transpose_flip ? co : ci, b = transpose_flip ? ci : co;
      for (int xi = 0; xi < kXi; ++xi) U[(static_cast<int64_t>(xi) * in + a) * out + b] = u[xi];
    }
}

// Rows r[0..7] of an 8 x 8 block replaced by its columns (unpack, then 2x2 and 4x4 block
// swaps: the classic AVX sequence, written as generic shuffles).
inline void transpose8x8(Vec r[8]) {
  Vec t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int i = 0; i < 8; i += 4)  // u[i + j] holds column j (and j + 4) of rows i..i+3
    for (int k = 0; k < 2; ++k) {
      u[i + 2 * k] = __builtin_shufflevector(t[i + k], t[i + k + 2], 0, 1, 8, 9, 4, 5, 12, 13);
      u[i + 2 * k + 1] = __builtin_shufflevector(t[i + k], t[i + k + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    }
  for (int k = 0; k < 4; ++k) {
    r[k] = __builtin_shufflevector(u[k], u[k + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    r[k + 4] = __builtin_shufflevector(u[k], u[k + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  }
}

// dst (cols, rows) = src (rows, cols)^T, or dst += src^T when accumulate: a sample between
// planes (C, H * W) and channels-last (H * W, C). Whole 8 x 8 blocks in registers, the
// ragged edges element by element.
void transpose(const float* __restrict src, int rows, int cols, float* __restrict dst, bool accumulate) {
  const int rows8 = rows - rows % 8, cols8 = cols - cols % 8;
  for (int r0 = 0; r0 < rows8; r0 += 8)
    for (int c0 = 0; c0 < cols8; c0 += 8) {
      Vec v[8];
      for (int i = 0; i < 8; ++i) v[i] = load<Vec>(src + static_cast<int64_t>(r0 + i) * cols + c0);
      transpose8x8(v);
      for (int i = 0; i < 8; ++i) {
        float* d = dst + static_cast<int64_t>(c0 + i) * rows + r0;
        store(d, accumulate ? load<Vec>(d) + v[i] : v[i]);
      }
    }
  auto element = [&](int r, int c) {
    float& d = dst[static_cast<int64_t>(c) * rows + r];
    const float x = src[static_cast<int64_t>(r) * cols + c];
    d = accumulate ? d + x : x;
  };
  for (int r = 0; r < rows; ++r)
    for (int c = r < rows8 ? cols8 : 0; c < cols; ++c) element(r, c);
}

// One sample from planes src (C, P) to channels-last dst (P, C).
void to_channels_last(const float* src, int C, int P, float* dst) { transpose(src, C, P, dst, false); }
// One sample from channels-last src (P, C) to planes dst (C, P), or added to them.
void from_channels_last(const float* src, int C, int P, float* dst, bool accumulate) {
  transpose(src, P, C, dst, accumulate);
}

// V rows of one sample's tiles, V (16, T, C) starting at tile t0: V = B^T d B per 4x4
// patch d of the channels-last sample xt (H * W, C) padded by one zero on the top and left
// (and as far as the tile grid needs on the bottom and right). `zero` is C zeros.
void transform_input(const ConvShape& s, const Tiling& t, const float* xt, int C, const float* zero,
                     int t0, float* V) {
  const int64_t step = static_cast<int64_t>(t.T) * C;  // next xi
  for (int ty = 0; ty < t.th; ++ty)
    for (int tx = 0; tx < t.tw; ++tx) {
      const float* d[4][4];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) {
          const int h = 2 * ty - 1 + i, w = 2 * tx - 1 + j;
          d[i][j] = h >= 0 && h < s.H && w >= 0 && w < s.W ? xt + (static_cast<int64_t>(h) * s.W + w) * C : zero;
        }
      float* v = V + static_cast<int64_t>(t0 + ty * t.tw + tx) * C;
      for_channels(C, [&](int c, auto tag) {
        using V_ = decltype(tag);
        V_ b[4][4];  // B^T d: column j of rows 0..3
        for (int j = 0; j < 4; ++j) {
          const V_ d0 = load<V_>(d[0][j] + c), d1 = load<V_>(d[1][j] + c), d2 = load<V_>(d[2][j] + c),
                   d3 = load<V_>(d[3][j] + c);
          b[0][j] = d0 - d2;
          b[1][j] = d1 + d2;
          b[2][j] = d2 - d1;
          b[3][j] = d1 - d3;
        }
        for (int i = 0; i < 4; ++i) {  // (B^T d) B along row i
          float* o = v + (i * 4) * step + c;
          store(o, b[i][0] - b[i][2]);
          store(o + step, b[i][1] + b[i][2]);
          store(o + 2 * step, b[i][2] - b[i][1]);
          store(o + 3 * step, b[i][1] - b[i][3]);
        }
      });
    }
}

// E rows of one sample's tiles, E (16, T, C) from tile t0: E = A dY A^T per 2x2 tile of the
// channels-last gradient gt (H * W, C), zero beyond the image edge (`zero` is C zeros).
void transform_output_gradient(const ConvShape& s, const Tiling& t, const float* gt, int C,
                               const float* zero, int t0, float* E) {
  const int64_t step = static_cast<int64_t>(t.T) * C;
  for (int ty = 0; ty < t.th; ++ty)
    for (int tx = 0; tx < t.tw; ++tx) {
      const float* g[2][2];
      for (int a = 0; a < 2; ++a)
        for (int b = 0; b < 2; ++b) {
          const int h = 2 * ty + a, w = 2 * tx + b;
          g[a][b] = h < s.H && w < s.W ? gt + (static_cast<int64_t>(h) * s.W + w) * C : zero;
        }
      float* e = E + static_cast<int64_t>(t0 + ty * t.tw + tx) * C;
      for_channels(C, [&](int c, auto tag) {
        using V_ = decltype(tag);
        V_ r[4][2];  // A dY: rows 0..3, columns 0..1
        for (int b = 0; b < 2; ++b) {
          const V_ g0 = load<V_>(g[0][b] + c), g1 = load<V_>(g[1][b] + c);
          r[0][b] = g0;
          r[1][b] = g0 + g1;
          r[2][b] = g0 - g1;
          r[3][b] = -g1;
        }
        for (int i = 0; i < 4; ++i) {  // (A dY) A^T along row i
          float* o = e + (i * 4) * step + c;
          store(o, r[i][0]);
          store(o + step, r[i][0] + r[i][1]);
          store(o + 2 * step, r[i][0] - r[i][1]);
          store(o + 3 * step, -r[i][1]);
        }
      });
    }
}

// yt (H * W, C) of one sample = A^T m A per tile of M (16, T, C) from tile t0 (the part of
// each 2x2 tile inside the image).
void transform_output(const ConvShape& s, const Tiling& t, const float* M, int C, int t0, float* yt) {
  const int64_t step = static_cast<int64_t>(t.T) * C;
  for (int ty = 0; ty < t.th; ++ty)
    for (int tx = 0; tx < t.tw; ++tx) {
      const float* m = M + static_cast<int64_t>(t0 + ty * t.tw + tx) * C;
      const bool right = 2 * tx + 1 < s.W, below = 2 * ty + 1 < s.H;
      float* y00 = yt + (static_cast<int64_t>(2 * ty) * s.W + 2 * tx) * C;
      float* y10 = y00 + static_cast<int64_t>(s.W) * C;
      for_channels(C, [&](int c, auto tag) {
        using V_ = decltype(tag);
        V_ r[2][4];  // A^T m: rows 0..1, columns 0..3
        for (int j = 0; j < 4; ++j) {
          const V_ m0 = load<V_>(m + j * step + c), m1 = load<V_>(m + (4 + j) * step + c),
                   m2 = load<V_>(m + (8 + j) * step + c), m3 = load<V_>(m + (12 + j) * step + c);
          r[0][j] = m0 + m1 + m2;
          r[1][j] = m1 - m2 - m3;
        }
        store(y00 + c, r[0][0] + r[0][1] + r[0][2]);
        if (right) store(y00 + C + c, r[0][1] - r[0][2] - r[0][3]);
        if (below) {
          store(y10 + c, r[1][0] + r[1][1] + r[1][2]);
          if (right) store(y10 + C + c, r[1][1] - r[1][2] - r[1][3]);
        }
      });
    }
}

// Per-thread buffers: a and b (16, T, max C) each, one channels-last sample and C zeros.
struct ThreadBuffers {
  float *a, *b, *plane, *zero;
  ThreadBuffers(const ConvShape& s, const Tiling& t, float* regions) {
    a = regions + omp_get_thread_num() * thread_floats(s, t);
    b = a + tile_buffer_floats(s, t);
    plane = b + tile_buffer_floats(s, t);
    zero = plane + int64_t{s.H} * s.W * max_channels(s);
    std::fill(zero, zero + max_channels(s), 0.f);
  }
};

// V (16, T, C) for samples [n0, n0 + count) of x (N, C, H, W); tiles of absent samples are
// left alone (the GEMMs only read count * per_sample rows).
void transform_chunk_input(const ConvShape& s, const Tiling& t, const float* x, int C, int n0, int count,
                           const ThreadBuffers& tb, float* V) {
  const int P = s.H * s.W;
  for (int ln = 0; ln < count; ++ln) {
    to_channels_last(x + static_cast<int64_t>(n0 + ln) * C * P, C, P, tb.plane);
    transform_input(s, t, tb.plane, C, tb.zero, ln * t.per_sample, V);
  }
}

// Forward-direction convolution of `in` (N, cin, H, W) with transformed filters U (16, cin,
// cout) into out (N, cout, H, W) (added to it when accumulate): shared by the forward pass
// and the input gradient. Per chunk and xi: M (rows, cout) = V (rows, cin) x U[xi].
void convolve(const ConvShape& s, const Tiling& t, const float* U, const float* in, int cin, int cout,
              float* out, float* regions, bool accumulate = false) {
  const int P = s.H * s.W;
#pragma omp parallel
  {
    const ThreadBuffers tb(s, t, regions);
#pragma omp for schedule(static)
    for (int ch = 0; ch < t.chunks(s.N); ++ch) {
      const int n0 = ch * t.chunk, count = std::min(t.chunk, s.N - n0), rows = count * t.per_sample;
      transform_chunk_input(s, t, in, cin, n0, count, tb, tb.a);
      for (int xi = 0; xi < kXi; ++xi)
        sgemm(false, false, rows, cout, cin, 1.f, tb.a + static_cast<int64_t>(xi) * t.T * cin, cin,
              U + static_cast<int64_t>(xi) * cin * cout, cout, 0.f, tb.b + static_cast<int64_t>(xi) * t.T * cout,
              cout);
      for (int ln = 0; ln < count; ++ln) {
        transform_output(s, t, tb.b, cout, ln * t.per_sample, tb.plane);
        from_channels_last(tb.plane, cout, P, out + static_cast<int64_t>(n0 + ln) * cout * P, accumulate);
      }
    }
  }
}

}  // namespace

bool winograd_applies(const ConvShape& s) {
  return s.k == 3 && s.stride == 1 && s.pad == 1 && s.Cin >= 8 && s.Cout >= 8;
}

int64_t winograd_workspace_floats(const ConvShape& s) {
  const Tiling t(s);
  return static_cast<int64_t>(omp_get_max_threads()) * (filter_floats(s) + thread_floats(s, t));
}

void winograd_forward(const ConvShape& s, const float* x, const float* w, float* y, float* ws) {
  const Tiling t(s);
  transform_filters(s, w, false, ws);
  convolve(s, t, ws, x, s.Cin, s.Cout, y, thread_regions(s, ws));
}

void winograd_backward(const ConvShape& s, const float* x, const float* w, const float* dy,
                       float* dx, float* dw, int dw_cout, int dw_cin, float* ws, bool accumulate_dx) {
  const Tiling t(s);
  float* U = filter_slot(s, ws, 0);
  float* regions = thread_regions(s, ws);
  if (dx) {
    transform_filters(s, w, true, U);
    convolve(s, t, U, dy, s.Cout, s.Cin, dx, regions, accumulate_dx);
  }
  if (!dw || dw_cout <= 0 || dw_cin <= 0) return;
  const int64_t du_n = int64_t{kXi} * dw_cout * dw_cin;
  const int P = s.H * s.W;
  int threads = 1;
#pragma omp parallel
  {
#pragma omp single
    threads = omp_get_num_threads();
    const ThreadBuffers tb(s, t, regions);
    float* du = filter_slot(s, ws, omp_get_thread_num());  // partial (16, dw_cout, dw_cin)
    std::memset(du, 0, sizeof(float) * du_n);
#pragma omp for schedule(static)
    for (int ch = 0; ch < t.chunks(s.N); ++ch) {
      const int n0 = ch * t.chunk, count = std::min(t.chunk, s.N - n0), rows = count * t.per_sample;
      transform_chunk_input(s, t, x, s.Cin, n0, count, tb, tb.a);  // V (16, T, Cin)
      for (int ln = 0; ln < count; ++ln) {                         // E (16, T, Cout)
        to_channels_last(dy + static_cast<int64_t>(n0 + ln) * s.Cout * P, s.Cout, P, tb.plane);
        transform_output_gradient(s, t, tb.plane, s.Cout, tb.zero, ln * t.per_sample, tb.b);
      }
      // du[xi] (dw_cout, dw_cin) += E[xi][:, :dw_cout]^T (dw_cout, rows) x V[xi][:, :dw_cin]
      for (int xi = 0; xi < kXi; ++xi)
        sgemm(true, false, dw_cout, dw_cin, rows, 1.f, tb.b + static_cast<int64_t>(xi) * t.T * s.Cout, s.Cout,
              tb.a + static_cast<int64_t>(xi) * t.T * s.Cin, s.Cin, 1.f, du + xi * dw_cout * dw_cin, dw_cin);
    }
  }
  // dw += G^T du G per filter, du summed over the threads' partials in thread order
  // (deterministic); filters are independent, so output channels run in parallel.
  const float* parts = filter_slot(s, ws, 0);
  const int64_t part_stride = filter_floats(s);
#pragma omp parallel for schedule(static)
  for (int co = 0; co < dw_cout; ++co)
    for (int ci = 0; ci < dw_cin; ++ci) {
      float du[kXi];
      for (int xi = 0; xi < kXi; ++xi) {
        const int64_t at = (static_cast<int64_t>(xi) * dw_cout + co) * dw_cin + ci;
        du[xi] = parts[at];
        for (int th = 1; th < threads; ++th) du[xi] += parts[th * part_stride + at];
      }
      accumulate_filter_gradient(du, dw + (static_cast<int64_t>(co) * dw_cin + ci) * 9);
    }
}

}  // namespace subdp::cpu
