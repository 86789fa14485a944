// Winograd minimal filtering F(m x m, 3x3) (Lavin and Gray 2016, "Fast Algorithms for
// Convolutional Neural Networks", eq. 8), m = 2 or 4, tiles of alpha = m + 2. An m x m
// output tile is Y = A^T [(G g G^T) . (B^T d B)] A for its alpha x alpha input patch d and
// each 3x3 filter g. Over all tiles and channel pairs this is, per transformed element xi
// (alpha^2 of them),
//   M[xi] (Cout, T) = U[xi] (Cout, Cin) x V[xi] (Cin, T)
// and its backward is two more GEMMs per xi in the same domain:
//   dU[xi] (Cout, Cin) = E[xi] (Cout, T) x V[xi]^T,  E = A dY A^T,  dg = G^T dU G;
//   the input gradient is the forward convolution of dy with the flipped, transposed filters.
// Each 2-D transform runs as a pass over rows (whole padded image rows) and a pass along
// them (every tile of a tile row), so the inner loops run over contiguous or strided data.
#include "kernels/cpu/winograd.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include <omp.h>

#include "engine/error.h"
#include "kernels/cpu/gemm.h"

namespace subdp::cpu {

namespace {

// F(2x2, 3x3): B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], G = [1 0 0; .5 .5 .5;
// .5 -.5 .5; 0 0 1], A^T = [1 1 1 0; 0 1 -1 -1]. Each function applies one matrix to
// vectors given element-wise (the compiler keeps them in registers).
struct F2 {
  static constexpr int m = 2, alpha = 4;
  static void input(const float* d, float* b) {  // b = B^T d
    b[0] = d[0] - d[2];
    b[1] = d[1] + d[2];
    b[2] = d[2] - d[1];
    b[3] = d[1] - d[3];
  }
  static void output(const float* x, float* y) {  // y = A^T x
    y[0] = x[0] + x[1] + x[2];
    y[1] = x[1] - x[2] - x[3];
  }
  static void output_grad(const float* g, float* e) {  // e = A g
    e[0] = g[0];
    e[1] = g[0] + g[1];
    e[2] = g[0] - g[1];
    e[3] = -g[1];
  }
  static void filter(const float* g, float* u) {  // u = G g
    u[0] = g[0];
    u[1] = 0.5f * (g[0] + g[1] + g[2]);
    u[2] = 0.5f * (g[0] - g[1] + g[2]);
    u[3] = g[2];
  }
  static void filter_grad(const float* d, float* g) {  // g = G^T d
    g[0] = d[0] + 0.5f * (d[1] + d[2]);
    g[1] = 0.5f * (d[1] - d[2]);
    g[2] = 0.5f * (d[1] + d[2]) + d[3];
  }
};

// F(4x4, 3x3) with interpolation points 0, +-1, +-2 (Lavin and Gray 2016, section 4.2).
struct F4 {
  static constexpr int m = 4, alpha = 6;
  static void input(const float* d, float* b) {  // b = B^T d
    b[0] = 4.f * d[0] - 5.f * d[2] + d[4];
    b[1] = -4.f * (d[1] + d[2]) + d[3] + d[4];
    b[2] = 4.f * (d[1] - d[2]) - d[3] + d[4];
    b[3] = 2.f * (d[3] - d[1]) - d[2] + d[4];
    b[4] = 2.f * (d[1] - d[3]) - d[2] + d[4];
    b[5] = 4.f * d[1] - 5.f * d[3] + d[5];
  }
  static void output(const float* x, float* y) {  // y = A^T x
    const float s12 = x[1] + x[2], d12 = x[1] - x[2], s34 = x[3] + x[4], d34 = x[3] - x[4];
    y[0] = x[0] + s12 + s34;
    y[1] = d12 + 2.f * d34;
    y[2] = s12 + 4.f * s34;
    y[3] = d12 + 8.f * d34 + x[5];
  }
  static void output_grad(const float* g, float* e) {  // e = A g
    const float s02 = g[0] + g[2], s13 = g[1] + g[3];
    e[0] = g[0];
    e[1] = s02 + s13;
    e[2] = s02 - s13;
    e[3] = g[0] + 2.f * g[1] + 4.f * g[2] + 8.f * g[3];
    e[4] = g[0] - 2.f * g[1] + 4.f * g[2] - 8.f * g[3];
    e[5] = g[3];
  }
  static void filter(const float* g, float* u) {  // u = G g
    u[0] = g[0] / 4.f;
    u[1] = -(g[0] + g[1] + g[2]) / 6.f;
    u[2] = -(g[0] - g[1] + g[2]) / 6.f;
    u[3] = g[0] / 24.f + g[1] / 12.f + g[2] / 6.f;
    u[4] = g[0] / 24.f - g[1] / 12.f + g[2] / 6.f;
    u[5] = g[2];
  }
  static void filter_grad(const float* d, float* g) {  // g = G^T d
    g[0] = d[0] / 4.f - (d[1] + d[2]) / 6.f + (d[3] + d[4]) / 24.f;
    g[1] = (d[2] - d[1]) / 6.f + (d[3] - d[4]) / 12.f;
    g[2] = (d[3] + d[4] - d[1] - d[2]) / 6.f + d[5];
  }
};

constexpr int kTargetTiles = 128;  // tiles per GEMM column block: chunks of samples reach it

// Tile grid of one sample and the chunking of samples into GEMM column blocks.
template <class F>
struct Tiling {
  static constexpr int kXi = F::alpha * F::alpha;  // transformed elements per tile
  int th, tw, per_sample, chunk, T;
  explicit Tiling(const ConvShape& s)
      : th((s.H + F::m - 1) / F::m), tw((s.W + F::m - 1) / F::m), per_sample(th * tw),
        chunk(std::max(1, std::min(s.N, (kTargetTiles + per_sample - 1) / per_sample))),
        T(chunk * per_sample) {}
  int chunks(int N) const { return (N + chunk - 1) / chunk; }
  int padded_width() const { return F::m * tw + 2; }
  int64_t padded_plane() const { return static_cast<int64_t>(F::m * th + 2) * padded_width(); }
  // The padded plane followed by 2 * alpha rows of transform scratch.
  int64_t plane_and_rows() const { return padded_plane() + 2 * F::alpha * padded_width(); }
};

int64_t max_channels(const ConvShape& s) { return std::max(s.Cin, s.Cout); }
template <class F>
int64_t filter_floats(const ConvShape& s) { return int64_t{Tiling<F>::kXi} * s.Cout * s.Cin; }
template <class F>
int64_t tile_buffer_floats(const ConvShape& s, const Tiling<F>& t) { return Tiling<F>::kXi * max_channels(s) * t.T; }
template <class F>
int64_t thread_floats(const ConvShape& s, const Tiling<F>& t) {
  return 2 * tile_buffer_floats(s, t) + t.plane_and_rows() + filter_floats<F>(s);
}

// U (alpha^2, rows, cols) from filters w (Cout, Cin, 3, 3): U = G g G^T. transpose_flip: U of
// the input-gradient convolution, w'[ci][co] = w[co][ci] rotated by 180 degrees, so
// rows = Cin, cols = Cout.
template <class F>
void transform_filters(const ConvShape& s, const float* w, bool transpose_flip, float* U) {
  constexpr int a = F::alpha;
  const int rows = transpose_flip ? s.Cin : s.Cout, cols = transpose_flip ? s.Cout : s.Cin;
#pragma omp parallel for schedule(static)
  for (int co = 0; co < s.Cout; ++co)
    for (int ci = 0; ci < s.Cin; ++ci) {
      const float* g = w + (static_cast<int64_t>(co) * s.Cin + ci) * 9;
      float k[9], t[a][3], col[3], u[a];
      for (int i = 0; i < 9; ++i) k[i] = transpose_flip ? g[8 - i] : g[i];
      for (int j = 0; j < 3; ++j) {  // t = G k, column by column
        const float kc[3] = {k[j], k[3 + j], k[6 + j]};
        float gc[a];
        F::filter(kc, gc);
        for (int i = 0; i < a; ++i) t[i][j] = gc[i];
      }
      const int r = transpose_flip ? ci : co, c = transpose_flip ? co : ci;
      for (int i = 0; i < a; ++i) {  // U = t G^T, row by row
        for (int j = 0; j < 3; ++j) col[j] = t[i][j];
        F::filter(col, u);
        for (int j = 0; j < a; ++j) U[(static_cast<int64_t>(i * a + j) * rows + r) * cols + c] = u[j];
      }
    }
}

// dg (3x3) += G^T du G for one alpha x alpha transformed-filter gradient du.
template <class F>
void accumulate_filter_gradient(const float* du, float* dg) {
  constexpr int a = F::alpha;
  float t[3][a];  // G^T du, column by column
  for (int j = 0; j < a; ++j) {
    float dc[a], gc[3];
    for (int i = 0; i < a; ++i) dc[i] = du[i * a + j];
    F::filter_grad(dc, gc);
    for (int i = 0; i < 3; ++i) t[i][j] = gc[i];
  }
  for (int i = 0; i < 3; ++i) {  // dg = t G
    float gr[3];
    F::filter_grad(t[i], gr);
    for (int j = 0; j < 3; ++j) dg[i * 3 + j] += gr[j];
  }
}

// plane ((m*th+2) x Wp) = img (H, W) at offset (1, 1), zeros elsewhere (only the border is
// cleared: the interior is overwritten).
template <class F>
void pad_plane(const ConvShape& s, const Tiling<F>& t, const float* img, float* plane) {
  const int Wp = t.padded_width(), Hp = F::m * t.th + 2;
  std::memset(plane, 0, sizeof(float) * Wp);
  for (int h = 0; h < s.H; ++h) {
    float* row = plane + (h + 1) * Wp;
    row[0] = 0.f;
    std::memcpy(row + 1, img + h * s.W, sizeof(float) * s.W);
    for (int j = s.W + 1; j < Wp; ++j) row[j] = 0.f;
  }
  std::memset(plane + (s.H + 1) * Wp, 0, sizeof(float) * (Hp - s.H - 1) * Wp);
}

// V (alpha^2, C, T) for samples [n0, n0 + count) of x (N, C, H, W): V = B^T d B per patch,
// patches of alpha at stride m over the image padded by one zero on the top and left (and as
// many as the tile grid needs on the bottom and right). Columns of absent samples are zero.
// scratch: the padded plane, then alpha rows of B^T d.
template <class F, int TW>
void transform_input(const ConvShape& s, const Tiling<F>& t, const float* x, int C, int n0, int count,
                     float* scratch, float* V) {
  constexpr int a = F::alpha, m = F::m;
  const int tw = TW ? TW : t.tw, Wp = m * tw + 2;
  const int64_t step = static_cast<int64_t>(C) * t.T;  // next xi
  float* plane = scratch;
  float* rows = scratch + t.padded_plane();  // B^T d: alpha rows of Wp
  for (int c = 0; c < C; ++c)
    for (int ln = 0; ln < t.chunk; ++ln) {
      float* v0 = V + static_cast<int64_t>(c) * t.T + static_cast<int64_t>(ln) * t.per_sample;
      if (ln >= count) {
        for (int xi = 0; xi < a * a; ++xi) std::memset(v0 + xi * step, 0, sizeof(float) * t.per_sample);
        continue;
      }
      pad_plane(s, t, x + (static_cast<int64_t>(n0 + ln) * C + c) * s.H * s.W, plane);
      for (int ty = 0; ty < t.th; ++ty) {
        const float* d = plane + m * ty * Wp;
        for (int j = 0; j < Wp; ++j) {  // rows pass: B^T on alpha plane rows
          float in[a], out[a];
          for (int r = 0; r < a; ++r) in[r] = d[r * Wp + j];
          F::input(in, out);
          for (int i = 0; i < a; ++i) rows[i * Wp + j] = out[i];
        }
        for (int i = 0; i < a; ++i) {  // along the row: B on each tile's alpha-window
          const float* b = rows + i * Wp;
          float* o = v0 + (i * a) * step + ty * tw;
          for (int tx = 0; tx < tw; ++tx) {
            float out[a];
            F::input(b + m * tx, out);
            for (int k = 0; k < a; ++k) o[k * step + tx] = out[k];
          }
        }
      }
    }
}

// E (alpha^2, C, T) = A dY A^T per m x m tile of dy (N, C, H, W), zero beyond the image edge.
// scratch: m padded rows of dy, then alpha rows of A dY.
template <class F, int TW>
void transform_output_gradient(const ConvShape& s, const Tiling<F>& t, const float* dy, int C, int n0,
                               int count, float* scratch, float* E) {
  constexpr int a = F::alpha, m = F::m;
  const int64_t step = static_cast<int64_t>(C) * t.T;
  const int tw = TW ? TW : t.tw, Wt = m * tw;
  float *g = scratch, *e = scratch + m * Wt;
  for (int c = 0; c < C; ++c)
    for (int ln = 0; ln < t.chunk; ++ln) {
      float* o0 = E + static_cast<int64_t>(c) * t.T + static_cast<int64_t>(ln) * t.per_sample;
      if (ln >= count) {
        for (int xi = 0; xi < a * a; ++xi) std::memset(o0 + xi * step, 0, sizeof(float) * t.per_sample);
        continue;
      }
      const float* img = dy + (static_cast<int64_t>(n0 + ln) * C + c) * s.H * s.W;
      for (int ty = 0; ty < t.th; ++ty) {
        std::memset(g, 0, sizeof(float) * m * Wt);
        for (int r = 0; r < m && m * ty + r < s.H; ++r)
          std::memcpy(g + r * Wt, img + (m * ty + r) * s.W, sizeof(float) * s.W);
        for (int j = 0; j < Wt; ++j) {  // rows pass: A on the m rows
          float in[m], out[a];
          for (int r = 0; r < m; ++r) in[r] = g[r * Wt + j];
          F::output_grad(in, out);
          for (int i = 0; i < a; ++i) e[i * Wt + j] = out[i];
        }
        for (int i = 0; i < a; ++i) {  // along the row: A on each tile's m-window
          const float* r = e + i * Wt;
          float* o = o0 + (i * a) * step + ty * tw;
          for (int tx = 0; tx < tw; ++tx) {
            float out[a];
            F::output_grad(r + m * tx, out);
            for (int k = 0; k < a; ++k) o[k * step + tx] = out[k];
          }
        }
      }
    }
}

// y (N, C, H, W) samples [n0, n0 + count) = A^T M A per tile of M (alpha^2, C, T); overwritten.
// scratch: m * alpha rows of tw (A^T M per column j) and one output row of m * tw.
template <class F, int TW>
void transform_output(const ConvShape& s, const Tiling<F>& t, const float* M, int C, int n0, int count,
                      float* scratch, float* y) {
  constexpr int a = F::alpha, m = F::m;
  const int64_t step = static_cast<int64_t>(C) * t.T;
  const int tw = TW ? TW : t.tw;
  float *r = scratch, *row = scratch + m * a * tw;  // r[(q * a + j) * tw + tx]
  for (int c = 0; c < C; ++c)
    for (int ln = 0; ln < count; ++ln) {
      float* img = y + (static_cast<int64_t>(n0 + ln) * C + c) * s.H * s.W;
      const float* m0 = M + static_cast<int64_t>(c) * t.T + static_cast<int64_t>(ln) * t.per_sample;
      for (int ty = 0; ty < t.th; ++ty) {
        const float* mt = m0 + ty * tw;
        for (int j = 0; j < a; ++j)  // A^T over the tile's rows i, for each column j
          for (int tx = 0; tx < tw; ++tx) {
            float in[a], out[m];
            for (int i = 0; i < a; ++i) in[i] = mt[(i * a + j) * step + tx];
            F::output(in, out);
            for (int q = 0; q < m; ++q) r[(q * a + j) * tw + tx] = out[q];
          }
        for (int q = 0; q < m && m * ty + q < s.H; ++q) {
          float* out_row = img + (m * ty + q) * s.W;
          float* dst = s.W == m * tw ? out_row : row;  // tiles cover the row exactly: in place
          for (int tx = 0; tx < tw; ++tx) {
            float in[a], out[m];
            for (int j = 0; j < a; ++j) in[j] = r[(q * a + j) * tw + tx];
            F::output(in, out);
            for (int p = 0; p < m; ++p) dst[m * tx + p] = out[p];
          }
          if (dst == row) std::memcpy(out_row, row, sizeof(float) * s.W);
        }
      }
    }
}

// Calls f(std::integral_constant<int, TW>) with TW = tw for the tile-row widths of common
// image sizes (28, 14, 7 and 32, 16, 8 at m = 2 or 4), 0 (run-time width) otherwise: with tw
// known at compile time the loops along a tile row unroll into whole vectors.
template <class Fn>
void with_tile_width(int tw, Fn&& f) {
  switch (tw) {
    case 2: return f(std::integral_constant<int, 2>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 7: return f(std::integral_constant<int, 7>{});
    case 8: return f(std::integral_constant<int, 8>{});
    case 14: return f(std::integral_constant<int, 14>{});
    case 16: return f(std::integral_constant<int, 16>{});
    default: return f(std::integral_constant<int, 0>{});
  }
}

// out (xis, rows, T) = U[xi] (rows, cols) x in[xi] (cols, T) for every xi.
void multiply_tiles(int xis, const float* U, int rows, int cols, const float* in, int T, float* out) {
  for (int xi = 0; xi < xis; ++xi)
    sgemm(false, false, rows, T, cols, 1.f, U + static_cast<int64_t>(xi) * rows * cols, cols,
          in + static_cast<int64_t>(xi) * cols * T, T, 0.f, out + static_cast<int64_t>(xi) * rows * T, T);
}

// Forward-direction convolution of `in` (N, cin, H, W) with transformed filters U (alpha^2,
// cout, cin) into out (N, cout, H, W): shared by the forward pass and the input gradient.
template <class F>
void convolve(const ConvShape& s, const Tiling<F>& t, const float* U, const float* in, int cin, int cout,
              float* out, float* ws_threads) {
#pragma omp parallel
  {
    float* a = ws_threads + omp_get_thread_num() * thread_floats(s, t);
    float* b = a + tile_buffer_floats(s, t);
    float* scratch = b + tile_buffer_floats(s, t);
#pragma omp for schedule(static)
    for (int ch = 0; ch < t.chunks(s.N); ++ch) {
      const int n0 = ch * t.chunk, count = std::min(t.chunk, s.N - n0);
      with_tile_width(t.tw, [&](auto tw) {
        transform_input<F, tw()>(s, t, in, cin, n0, count, scratch, a);
        multiply_tiles(Tiling<F>::kXi, U, cout, cin, a, t.T, b);
        transform_output<F, tw()>(s, t, b, cout, n0, count, scratch, out);
      });
    }
  }
}

template <class F>
void forward(const ConvShape& s, const float* x, const float* w, float* y, float* ws) {
  const Tiling<F> t(s);
  transform_filters<F>(s, w, false, ws);
  convolve(s, t, ws, x, s.Cin, s.Cout, y, ws + filter_floats<F>(s));
}

template <class F>
void backward(const ConvShape& s, const float* x, const float* w, const float* dy, float* dx, float* dw,
              int dw_cout, int dw_cin, float* ws) {
  constexpr int kXi = Tiling<F>::kXi;
  const Tiling<F> t(s);
  float* U = ws;
  float* threads_ws = ws + filter_floats<F>(s);
  if (dx) {
    transform_filters<F>(s, w, true, U);
    convolve(s, t, U, dy, s.Cout, s.Cin, dx, threads_ws);
  }
  if (!dw || dw_cout <= 0 || dw_cin <= 0) return;
  const int64_t du_n = int64_t{kXi} * dw_cout * dw_cin;
  int threads = 1;
#pragma omp parallel
  {
#pragma omp single
    threads = omp_get_num_threads();
    float* v = threads_ws + omp_get_thread_num() * thread_floats(s, t);
    float* e = v + tile_buffer_floats(s, t);
    float* scratch = e + tile_buffer_floats(s, t);
    float* du = scratch + t.plane_and_rows();  // this thread's partial (alpha^2, dw_cout, dw_cin)
    std::memset(du, 0, sizeof(float) * du_n);
#pragma omp for schedule(static)
    for (int ch = 0; ch < t.chunks(s.N); ++ch) {
      const int n0 = ch * t.chunk, count = std::min(t.chunk, s.N - n0);
      with_tile_width(t.tw, [&](auto tw) {
        transform_input<F, tw()>(s, t, x, s.Cin, n0, count, scratch, v);
        transform_output_gradient<F, tw()>(s, t, dy, s.Cout, n0, count, scratch, e);
      });
      // du[xi] (dw_cout, dw_cin) += e[xi][:dw_cout] (dw_cout, T) x v[xi][:dw_cin]^T
      for (int xi = 0; xi < kXi; ++xi)
        sgemm(false, true, dw_cout, dw_cin, t.T, 1.f, e + static_cast<int64_t>(xi) * s.Cout * t.T, t.T,
              v + static_cast<int64_t>(xi) * s.Cin * t.T, t.T, 1.f, du + xi * dw_cout * dw_cin, dw_cin);
    }
  }
  // dw += G^T du G per filter, du summed over the threads' partials in thread order
  // (deterministic); filters are independent, so output channels run in parallel.
  const float* parts = threads_ws + t.plane_and_rows() + 2 * tile_buffer_floats(s, t);
  const int64_t part_stride = thread_floats(s, t);
#pragma omp parallel for schedule(static)
  for (int co = 0; co < dw_cout; ++co)
    for (int ci = 0; ci < dw_cin; ++ci) {
      float du[kXi];
      for (int xi = 0; xi < kXi; ++xi) {
        const int64_t at = (static_cast<int64_t>(xi) * dw_cout + co) * dw_cin + ci;
        du[xi] = parts[at];
        for (int th = 1; th < threads; ++th) du[xi] += parts[th * part_stride + at];
      }
      accumulate_filter_gradient<F>(du, dw + (static_cast<int64_t>(co) * dw_cin + ci) * 9);
    }
}

}  // namespace

bool winograd_applies(const ConvShape& s) {
  return s.k == 3 && s.stride == 1 && s.pad == 1 && s.Cin >= 8 && s.Cout >= 8;
}

int winograd_tile(const ConvShape& s) { return s.H >= 4 && s.W >= 4 ? 4 : 2; }

namespace {
bool use_f4(const ConvShape& s, int tile) {
  const int m = tile ? tile : winograd_tile(s);
  SUBDP_ASSERT(m == 2 || m == 4);
  return m == 4;
}
}  // namespace

int64_t winograd_workspace_floats(const ConvShape& s, int tile) {
  auto floats = [&](auto f) {
    using F = decltype(f);
    const Tiling<F> t(s);
    return filter_floats<F>(s) + static_cast<int64_t>(omp_get_max_threads()) * thread_floats(s, t);
  };
  return use_f4(s, tile) ? floats(F4{}) : floats(F2{});
}

void winograd_forward(const ConvShape& s, const float* x, const float* w, float* y, float* ws, int tile) {
  if (use_f4(s, tile)) return forward<F4>(s, x, w, y, ws);
  forward<F2>(s, x, w, y, ws);
}

void winograd_backward(const ConvShape& s, const float* x, const float* w, const float* dy,
                       float* dx, float* dw, int dw_cout, int dw_cin, float* ws, int tile) {
  if (use_f4(s, tile)) return backward<F4>(s, x, w, dy, dx, dw, dw_cout, dw_cin, ws);
  backward<F2>(s, x, w, dy, dx, dw, dw_cout, dw_cin, ws);
}

}  // namespace subdp::cpu
