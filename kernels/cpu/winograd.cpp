// Winograd minimal filtering F(m x m, 3x3) (Lavin and Gray 2016, "Fast Algorithms for
// Convolutional Neural Networks", eq. 8), m = 2 or 4, alpha = m + 2 points. With the
// transforms B^T (alpha, alpha), G (alpha, 3) and A^T (m, alpha) of Minimal<m> below, an m x m
// output tile is Y = A^T [(G g G^T) . (B^T d B)] A for its alpha x alpha input patch d and
// each 3x3 filter g. Over the T tiles of a chunk of samples and all channel pairs this is,
// per transformed element xi (alpha^2 of them),
//   M[xi] (T, Cout) = V[xi] (T, Cin) x U[xi] (Cin, Cout)
// and its backward is two more GEMMs per xi in the same domain:
//   dU[xi] (Cout, Cin) = E[xi]^T (Cout, T) x V[xi] (T, Cin),  E = A dY A^T,  dg = G^T dU G;
//   the input gradient is the forward convolution of dy with the flipped, transposed filters.
// Tiles are rows and channels are columns (channels-last): each sample is transposed to
// (H * W, C) once, and the transforms then run on whole vectors of channels, whatever the
// image width (tile rows are only 2-14 tiles wide on 28x28 inputs).
#include "kernels/cpu/winograd.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include <omp.h>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/small_gemm.h"
#include "kernels/cpu/transpose.h"
#include "kernels/cpu/vec.h"

namespace subdp::cpu {

namespace {

constexpr int kTargetTiles = 128;               // tiles per GEMM row block: chunks of samples reach it...
constexpr int64_t kTileBufferFloats = 1 << 18;  // ...unless a tile buffer would pass 1 MiB
// F(4x4, 3x3) serves images at least 4 x 4 whose transformed filters (36 Cout Cin floats, one
// slot per thread) fit in a tile buffer's budget; wider layers keep F(2x2, 3x3). Filter
// slots and tile buffers of F(4x4) layers thus stay within 1 MiB each, as those of an F(2x2)
// layer of about 90 channels or more already are (winograd.h: winograd_tile).
constexpr int kMinTile4Side = 4;

// Transform matrices of F(m x m, 3x3) (Lavin and Gray 2016, section 4; interpolation points
// 0, 1, -1 for m = 2 and 0, 1, -1, 2, -2 for m = 4, plus the point at infinity). A is A^T
// transposed, kept as its own table so every transform reads matrix rows.
template <int M>
struct Minimal;
template <>
struct Minimal<2> {
  static constexpr int m = 2, alpha = 4;
  static constexpr float BT[4][4] = {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}};
  static constexpr float G[4][3] = {{1, 0, 0}, {.5f, .5f, .5f}, {.5f, -.5f, .5f}, {0, 0, 1}};
  static constexpr float AT[2][4] = {{1, 1, 1, 0}, {0, 1, -1, -1}};
  static constexpr float A[4][2] = {{1, 0}, {1, 1}, {1, -1}, {0, -1}};
};
template <>
struct Minimal<4> {
  static constexpr int m = 4, alpha = 6;
  static constexpr float BT[6][6] = {{4, 0, -5, 0, 1, 0},  {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
                                     {0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};
  static constexpr float G[6][3] = {{1.f / 4, 0, 0},
                                    {-1.f / 6, -1.f / 6, -1.f / 6},
                                    {-1.f / 6, 1.f / 6, -1.f / 6},
                                    {1.f / 24, 1.f / 12, 1.f / 6},
                                    {1.f / 24, -1.f / 12, 1.f / 6},
                                    {0, 0, 1}};
  static constexpr float AT[4][6] = {
      {1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}};
  static constexpr float A[6][4] = {{1, 0, 0, 0}, {1, 1, 1, 1},   {1, -1, 1, -1},
                                    {1, 2, 4, 8}, {1, -2, 4, -8}, {0, 0, 0, 1}};
};

// sum_k c[k] * x[k] over the nonzero c[k]. c is a row of a transform matrix: once the
// callers' loops are unrolled it is known at compile time, so zero terms vanish and +-1
// terms need no multiply.
template <int N, class V_>
inline V_ combine(const float* c, const V_* x) {
  V_ acc{};
  bool started = false;
#pragma GCC unroll 8
  for (int k = 0; k < N; ++k) {
    if (c[k] == 0.f) continue;
    const V_ term = c[k] == 1.f ? x[k] : c[k] == -1.f ? -x[k] : c[k] * x[k];
    acc = started ? acc + term : term;
    started = true;
  }
  return acc;
}

int64_t max_channels(const ConvShape& s) { return std::max(s.Cin, s.Cout); }

// Tile grid of one sample and the chunking of samples into GEMM row blocks: enough samples
// for kTargetTiles rows, as long as a tile buffer (alpha^2, T, max C) stays within
// kTileBufferFloats.
struct Tiling {
  int m, alpha, xis, th, tw, per_sample, chunk, T;
  Tiling(const ConvShape& s, int tile)
      : m(tile),
        alpha(tile + 2),
        xis(alpha * alpha),
        th((s.H + m - 1) / m),
        tw((s.W + m - 1) / m),
        per_sample(th * tw),
        chunk(samples_per_chunk(s)),
        T(chunk * per_sample) {}
  int chunks(int N) const { return (N + chunk - 1) / chunk; }

 private:
  int samples_per_chunk(const ConvShape& s) const {
    const int64_t for_target = (kTargetTiles + per_sample - 1) / per_sample;
    const int64_t within_budget = kTileBufferFloats / (int64_t{xis} * max_channels(s) * per_sample);
    return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({s.N, for_target, within_budget})));
  }
};

int64_t filter_floats(const ConvShape& s, const Tiling& t) { return int64_t{t.xis} * s.Cout * s.Cin; }
int64_t tile_buffer_floats(const ConvShape& s, const Tiling& t) { return t.xis * max_channels(s) * t.T; }
// One sample channels-last (H * W, C), plus one zero pixel (the padding) of C floats.
int64_t plane_floats(const ConvShape& s) { return (int64_t{s.H} * s.W + 1) * max_channels(s); }
// Per-thread region: two transformed-tile buffers and one channels-last sample.
int64_t thread_floats(const ConvShape& s, const Tiling& t) { return 2 * tile_buffer_floats(s, t) + plane_floats(s); }

// Workspace layout: max_threads filter-sized slots, then max_threads thread regions. Slot 0
// holds the transformed filters U (forward, input gradient); in the weight-gradient phase,
// when U is dead, slot th holds thread th's partial dU, so U costs no slot of its own.
float* filter_slot(const ConvShape& s, const Tiling& t, float* ws, int th) { return ws + th * filter_floats(s, t); }
float* thread_regions(const ConvShape& s, const Tiling& t, float* ws) {
  return ws + omp_get_max_threads() * filter_floats(s, t);
}

// coef (alpha^2, 9): u[xi = i * alpha + j] = sum_k coef[xi][k] g[k] for u = G g G^T, so
// coef[i * alpha + j][k * 3 + l] = G[i][k] G[j][l]; flipped: the same for g rotated by 180
// degrees (g[8 - k]). The filter transform is then a product with coef per channel, reading
// the filters in place (transform_filters), and the filter-gradient transform dg = G^T du G
// one GEMM with coef transposed.
template <class W>
struct FilterCoefficients {
  float c[W::alpha * W::alpha][9], flipped[W::alpha * W::alpha][9];
  FilterCoefficients() {
    for (int i = 0; i < W::alpha; ++i)
      for (int j = 0; j < W::alpha; ++j)
        for (int k = 0; k < 3; ++k)
          for (int l = 0; l < 3; ++l) {
            c[i * W::alpha + j][k * 3 + l] = W::G[i][k] * W::G[j][l];
            flipped[i * W::alpha + j][8 - (k * 3 + l)] = W::G[i][k] * W::G[j][l];
          }
  }
};

// Transformed filters U from filters w (Cout, Cin, 3, 3), laid out as the convolution that
// reads them wants its right-hand GEMM operand: forward (Cin to Cout channels) U (alpha^2, Cin,
// Cout); flip, the input gradient (Cout to Cin channels) with the filters rotated by 180
// degrees, U (alpha^2, Cout, Cin). Per outer channel o (cin, or cout when flip), one product
// U[:, o, :] (alpha^2, inner) = coef (alpha^2, 9) x W_o^T (9, inner), W_o (inner, 9) the
// filters w[:, o] (forward) or w[o] (flip), read in place through a stride. Each product is
// single-threaded, so U does not depend on the thread count.
template <class W>
void transform_filters(const ConvShape& s, const float* w, bool flip, float* U) {
  static const FilterCoefficients<W> coef;
  const int outer = flip ? s.Cout : s.Cin, inner = flip ? s.Cin : s.Cout;
  const int64_t outer_stride = flip ? int64_t{s.Cin} * 9 : 9;  // floats between w[o] and w[o + 1]
  const int inner_stride = flip ? 9 : s.Cin * 9;
#pragma omp parallel for schedule(static)
  for (int o = 0; o < outer; ++o)
    small_sgemm(W::alpha * W::alpha, inner, 9, flip ? &coef.flipped[0][0] : &coef.c[0][0], 9, 1, w + o * outer_stride,
                inner_stride, true, U + int64_t{o} * inner, outer * inner, false);
}

// dw (dw_cout, dw_cin, 3, 3) += G^T du G per filter, du (alpha^2, dw_cout, dw_cin): one GEMM,
// dw (pairs, 9) += du^T (pairs, alpha^2) x coef.
template <class W>
void accumulate_filter_gradients(const float* du, int dw_cout, int dw_cin, float* dw) {
  static const FilterCoefficients<W> coef;
  const int pairs = dw_cout * dw_cin;
  sgemm(true, false, pairs, 9, W::alpha * W::alpha, 1.f, du, pairs, &coef.c[0][0], 9, 1.f, dw, 9);
}

// One sample from planes src (C, P) to channels-last dst (P, C).
void to_channels_last(const float* src, int C, int P, float* dst) { transpose(src, C, P, P, dst, C, false); }
// One sample from channels-last src (P, C) to planes dst (C, P), or added to them.
void from_channels_last(const float* src, int C, int P, float* dst, bool accumulate) {
  transpose(src, P, C, C, dst, P, accumulate);
}

// ptr[k][l] = pixel (h0 + k, w0 + l) of the channels-last image img (H * W, C), or `zero`
// (C zeros) outside the image: the n x n window of one tile.
template <int n>
inline void window(const ConvShape& s, const float* img, int C, const float* zero, int h0, int w0,
                   const float* (&ptr)[n][n]) {
  for (int k = 0; k < n; ++k)
    for (int l = 0; l < n; ++l) {
      const int h = h0 + k, w = w0 + l;
      ptr[k][l] = h >= 0 && h < s.H && w >= 0 && w < s.W ? img + (static_cast<int64_t>(h) * s.W + w) * C : zero;
    }
}

// out(i, j, (L d L^T)[i][j]) for i, j < R, for the n x n patch d of channel vectors of type V_
// at ptr[k][l] + c and a compile-time matrix L (R, n): the pass over columns, then over rows.
// Every transform is one of these: B^T d B (L = B^T), A dY A^T (L = A), A^T m A (L = A^T).
template <class V_, int R, int n, class Out>
inline void two_sided(const float (&L)[R][n], const float* const (&ptr)[n][n], int c, Out&& out) {
  V_ b[R][n];  // L d
#pragma GCC unroll 8
  for (int l = 0; l < n; ++l) {
    V_ column[n];
#pragma GCC unroll 8
    for (int k = 0; k < n; ++k) column[k] = load<V_>(ptr[k][l] + c);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) b[i][l] = combine<n>(L[i], column);
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)  // (L d) L^T along row i
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) out(i, j, combine<n>(L[j], b[i]));
}

// V rows of one sample's tiles, V (alpha^2, T, C) from tile t0: V = B^T d B per alpha x alpha
// patch d of the channels-last sample xt (H * W, C), patches at stride m over the image
// padded by one zero on the top and left (and as far as the tile grid needs on the bottom
// and right). `zero` is C zeros.
template <class W>
void transform_input(const ConvShape& s, const Tiling& t, const float* xt, int C, const float* zero, int t0, float* V) {
  constexpr int a = W::alpha;
  const int64_t step = static_cast<int64_t>(t.T) * C;  // next xi
  for (int ty = 0; ty < t.th; ++ty)
    for (int tx = 0; tx < t.tw; ++tx) {
      const float* d[a][a];
      window<a>(s, xt, C, zero, W::m * ty - 1, W::m * tx - 1, d);
      float* v = V + static_cast<int64_t>(t0 + ty * t.tw + tx) * C;
      for_channels(C, [&](int c, auto tag) {
        two_sided<decltype(tag)>(W::BT, d, c, [&](int i, int j, auto x) { store(v + (i * a + j) * step + c, x); });
      });
    }
}

// E rows of one sample's tiles, E (alpha^2, T, C) from tile t0: E = A dY A^T per m x m tile of
// the channels-last gradient gt (H * W, C), zero beyond the image edge (`zero` is C zeros).
template <class W>
void transform_output_gradient(const ConvShape& s, const Tiling& t, const float* gt, int C, const float* zero, int t0,
                               float* E) {
  constexpr int a = W::alpha, m = W::m;
  const int64_t step = static_cast<int64_t>(t.T) * C;
  for (int ty = 0; ty < t.th; ++ty)
    for (int tx = 0; tx < t.tw; ++tx) {
      const float* g[m][m];
      window<m>(s, gt, C, zero, m * ty, m * tx, g);
      float* e = E + static_cast<int64_t>(t0 + ty * t.tw + tx) * C;
      for_channels(C, [&](int c, auto tag) {
        two_sided<decltype(tag)>(W::A, g, c, [&](int i, int j, auto x) { store(e + (i * a + j) * step + c, x); });
      });
    }
}

// yt (H * W, C) of one sample = A^T m A per tile of M (alpha^2, T, C) from tile t0 (the part
// of each m x m tile inside the image).
template <class W>
void transform_output(const ConvShape& s, const Tiling& t, const float* M, int C, int t0, float* yt) {
  constexpr int a = W::alpha, m = W::m;
  const int64_t step = static_cast<int64_t>(t.T) * C;
  for (int ty = 0; ty < t.th; ++ty)
    for (int tx = 0; tx < t.tw; ++tx) {
      const float* mt[a][a];  // element xi = i * a + j of this tile
      for (int i = 0; i < a; ++i)
        for (int j = 0; j < a; ++j) mt[i][j] = M + (i * a + j) * step + static_cast<int64_t>(t0 + ty * t.tw + tx) * C;
      const int rows = std::min(m, s.H - m * ty), cols = std::min(m, s.W - m * tx);
      float* y0 = yt + (static_cast<int64_t>(m * ty) * s.W + m * tx) * C;
      for_channels(C, [&](int c, auto tag) {
        two_sided<decltype(tag)>(W::AT, mt, c, [&](int p, int q, auto x) {
          if (p < rows && q < cols) store(y0 + (static_cast<int64_t>(p) * s.W + q) * C + c, x);
        });
      });
    }
}

// Per-thread buffers: a and b (alpha^2, T, max C) each, one channels-last sample and C zeros.
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

// Transformed tiles (alpha^2, T, C) for samples [n0, n0 + count) of x (N, C, H, W): each
// sample to channels-last, then `transform` (transform_input<W>: V; or
// transform_output_gradient<W>: E) from its first tile. Tiles of absent samples are left
// alone (the GEMMs only read count * per_sample rows).
using TileTransform = void (*)(const ConvShape&, const Tiling&, const float*, int, const float*, int, float*);
void transform_chunk(TileTransform transform, const ConvShape& s, const Tiling& t, const float* x, int C, int n0,
                     int count, const ThreadBuffers& tb, float* out) {
  const int P = s.H * s.W;
  for (int ln = 0; ln < count; ++ln) {
    to_channels_last(x + static_cast<int64_t>(n0 + ln) * C * P, C, P, tb.plane);
    transform(s, t, tb.plane, C, tb.zero, ln * t.per_sample, out);
  }
}

// Forward-direction convolution of `in` (N, cin, H, W) with transformed filters U into out
// (N, cout, H, W) (added to it when accumulate): shared by the forward pass and the input
// gradient. U is (alpha^2, cin, cout) (transform_filters). Per chunk
// and xi: M (rows, cout) = V (rows, cin) x U[xi].
template <class W>
void convolve(const ConvShape& s, const Tiling& t, const float* U, const float* in, int cin, int cout, float* out,
              float* regions, bool accumulate) {
  const int P = s.H * s.W;
#pragma omp parallel
  {
    const ThreadBuffers tb(s, t, regions);
#pragma omp for schedule(static)
    for (int ch = 0; ch < t.chunks(s.N); ++ch) {
      const int n0 = ch * t.chunk, count = std::min(t.chunk, s.N - n0), rows = count * t.per_sample;
      transform_chunk(transform_input<W>, s, t, in, cin, n0, count, tb, tb.a);
      for (int xi = 0; xi < t.xis; ++xi)
        small_sgemm(rows, cout, cin, tb.a + static_cast<int64_t>(xi) * t.T * cin, cin, 1,
                    U + static_cast<int64_t>(xi) * cin * cout, cout, false,
                    tb.b + static_cast<int64_t>(xi) * t.T * cout, cout, false);
      for (int ln = 0; ln < count; ++ln) {
        transform_output<W>(s, t, tb.b, cout, ln * t.per_sample, tb.plane);
        from_channels_last(tb.plane, cout, P, out + static_cast<int64_t>(n0 + ln) * cout * P, accumulate);
      }
    }
  }
}

template <class W>
void forward(const ConvShape& s, const float* x, const float* w, float* y, float* ws) {
  const Tiling t(s, W::m);
  transform_filters<W>(s, w, false, ws);
  convolve<W>(s, t, ws, x, s.Cin, s.Cout, y, thread_regions(s, t, ws), false);
}

// Weight gradient: per chunk and xi, du[xi] (dw_cout, dw_cin) += E[xi]^T x V[xi] into
// per-thread partials, then dw += G^T du G with the partials summed in thread order.
template <class W>
void weight_gradient(const ConvShape& s, const float* x, const float* dy, float* dw, int dw_cout, int dw_cin,
                     float* ws) {
  const Tiling t(s, W::m);
  float* regions = thread_regions(s, t, ws);
  const int64_t du_n = int64_t{t.xis} * dw_cout * dw_cin;
  int threads = 1;
#pragma omp parallel
  {
#pragma omp single
    threads = omp_get_num_threads();
    const ThreadBuffers tb(s, t, regions);
    float* du = filter_slot(s, t, ws, omp_get_thread_num());  // partial (alpha^2, dw_cout, dw_cin)
    std::memset(du, 0, sizeof(float) * du_n);
#pragma omp for schedule(static)
    for (int ch = 0; ch < t.chunks(s.N); ++ch) {
      const int n0 = ch * t.chunk, count = std::min(t.chunk, s.N - n0), rows = count * t.per_sample;
      transform_chunk(transform_input<W>, s, t, x, s.Cin, n0, count, tb, tb.a);              // V
      transform_chunk(transform_output_gradient<W>, s, t, dy, s.Cout, n0, count, tb, tb.b);  // E
      // du[xi] (dw_cout, dw_cin) += E[xi][:, :dw_cout]^T (dw_cout, rows) x V[xi][:, :dw_cin]
      for (int xi = 0; xi < t.xis; ++xi)
        small_sgemm(dw_cout, dw_cin, rows, tb.b + static_cast<int64_t>(xi) * t.T * s.Cout, 1, s.Cout,
                    tb.a + static_cast<int64_t>(xi) * t.T * s.Cin, s.Cin, false, du + xi * dw_cout * dw_cin, dw_cin,
                    true);
    }
  }
  // Sum the partials into slot 0 in thread order (deterministic for a fixed thread count),
  // then dw += G^T du G.
  float* total = filter_slot(s, t, ws, 0);
  for (int th = 1; th < threads; ++th) {
    const float* part = filter_slot(s, t, ws, th);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < du_n; ++i) total[i] += part[i];
  }
  accumulate_filter_gradients<W>(total, dw_cout, dw_cin, dw);
}

template <class W>
void backward(const ConvShape& s, const float* x, const float* w, const float* dy, float* dx, float* dw, int dw_cout,
              int dw_cin, float* ws, bool accumulate_dx) {
  const Tiling t(s, W::m);
  if (dx) {
    float* U = filter_slot(s, t, ws, 0);
    transform_filters<W>(s, w, true, U);
    convolve<W>(s, t, U, dy, s.Cout, s.Cin, dx, thread_regions(s, t, ws), accumulate_dx);
  }
  if (dw && dw_cout > 0 && dw_cin > 0) weight_gradient<W>(s, x, dy, dw, dw_cout, dw_cin, ws);
}

}  // namespace

bool winograd_applies(const ConvShape& s) {
  return s.k == 3 && s.stride == 1 && s.pad == 1 && s.Cin >= 8 && s.Cout >= 8;
}

namespace {
int g_max_tile = 2;  // set_winograd_max_tile
}  // namespace

void set_winograd_max_tile(int m) {
  if (m != 2 && m != 4) throw std::invalid_argument("Winograd tile side must be 2 or 4, got " + std::to_string(m));
  g_max_tile = m;
}

int winograd_tile(const ConvShape& s) {
  if (g_max_tile < 4) return 2;
  const bool filters_fit = int64_t{Minimal<4>::alpha * Minimal<4>::alpha} * s.Cout * s.Cin <= kTileBufferFloats;
  return s.H >= kMinTile4Side && s.W >= kMinTile4Side && filters_fit ? 4 : 2;
}

int64_t winograd_workspace_floats(const ConvShape& s) {
  const Tiling t(s, winograd_tile(s));
  return static_cast<int64_t>(omp_get_max_threads()) * (filter_floats(s, t) + thread_floats(s, t));
}

void winograd_forward(const ConvShape& s, const float* x, const float* w, float* y, float* ws) {
  if (winograd_tile(s) == 4) return forward<Minimal<4>>(s, x, w, y, ws);
  forward<Minimal<2>>(s, x, w, y, ws);
}

void winograd_backward(const ConvShape& s, const float* x, const float* w, const float* dy, float* dx, float* dw,
                       int dw_cout, int dw_cin, float* ws, bool accumulate_dx) {
  if (winograd_tile(s) == 4) return backward<Minimal<4>>(s, x, w, dy, dx, dw, dw_cout, dw_cin, ws, accumulate_dx);
  backward<Minimal<2>>(s, x, w, dy, dx, dw, dw_cout, dw_cin, ws, accumulate_dx);
}

}  // namespace subdp::cpu
