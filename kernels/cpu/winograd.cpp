// Winograd F(2x2, 3x3) convolution (Lavin and Gray 2016). With the transforms
//   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1],
//   A^T = [1 1 1 0; 0 1 -1 -1],
// a 2x2 output tile is Y = A^T [(G g G^T) . (B^T d B)] A for its 4x4 input patch d and each
// 3x3 filter g. Over all tiles and channel pairs this is, per transformed element xi (16),
//   M[xi] (Cout, T) = U[xi] (Cout, Cin) x V[xi] (Cin, T)
// and its backward is two more GEMMs per xi in the same domain:
//   dU[xi] (Cout, Cin) = E[xi] (Cout, T) x V[xi]^T,  E = A dY A^T,  dg = G^T dU G;
//   the input gradient is the forward convolution of dy with the flipped, transposed filters.
#include "kernels/cpu/winograd.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include <omp.h>

#include "kernels/cpu/gemm.h"

namespace subdp::cpu {

namespace {

constexpr int kXi = 16;          // transformed elements per tile (4x4)
constexpr int kTargetTiles = 128;  // tiles per GEMM column block: chunks of samples reach it

// Tile grid of one sample and the chunking of samples into GEMM column blocks.
struct Tiling {
  int th, tw, per_sample, chunk, T;
  explicit Tiling(const ConvShape& s)
      : th((s.H + 1) / 2), tw((s.W + 1) / 2), per_sample(th * tw),
        chunk(std::max(1, std::min(s.N, (kTargetTiles + per_sample - 1) / per_sample))),
        T(chunk * per_sample) {}
  int chunks(int N) const { return (N + chunk - 1) / chunk; }
  // Transform scratch: five rows of a padded tile row (four of B^T d or A dY and one row
  // of zeros; the output transform's 10 * tw fits too).
  int64_t scratch() const { return 5 * (2 * static_cast<int64_t>(tw) + 2); }
};

int64_t max_channels(const ConvShape& s) { return std::max(s.Cin, s.Cout); }
int64_t filter_floats(const ConvShape& s) { return int64_t{kXi} * s.Cout * s.Cin; }
int64_t tile_buffer_floats(const ConvShape& s, const Tiling& t) { return kXi * max_channels(s) * t.T; }
// Per-thread tile region: two transformed-tile buffers and the transform scratch.
int64_t thread_floats(const ConvShape& s, const Tiling& t) { return 2 * tile_buffer_floats(s, t) + t.scratch(); }

// Workspace layout: max_threads filter-sized slots, then max_threads tile regions. Slot 0
// holds the transformed filters U (forward, input gradient); in the weight-gradient phase,
// when U is dead, slot th holds thread th's partial dU, so U costs no slot of its own.
float* filter_slot(const ConvShape& s, float* ws, int th) { return ws + th * filter_floats(s); }
float* tile_regions(const ConvShape& s, float* ws) { return ws + omp_get_max_threads() * filter_floats(s); }

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

// U (16, rows, cols) from filters w (Cout, Cin, 3, 3). transpose_flip: U of the input-gradient
// convolution, w'[ci][co] = w[co][ci] rotated by 180 degrees, so rows = Cin, cols = Cout.
void transform_filters(const ConvShape& s, const float* w, bool transpose_flip, float* U) {
  const int rows = transpose_flip ? s.Cin : s.Cout, cols = transpose_flip ? s.Cout : s.Cin;
#pragma omp parallel for schedule(static)
  for (int co = 0; co < s.Cout; ++co)
    for (int ci = 0; ci < s.Cin; ++ci) {
      const float* g = w + (static_cast<int64_t>(co) * s.Cin + ci) * 9;
      float flipped[9], u[kXi];
      if (transpose_flip)
        for (int i = 0; i < 9; ++i) flipped[i] = g[8 - i];
      transform_filter(transpose_flip ? flipped : g, u);
      const int r = transpose_flip ? ci : co, c = transpose_flip ? co : ci;
      for (int xi = 0; xi < kXi; ++xi) U[(static_cast<int64_t>(xi) * rows + r) * cols + c] = u[xi];
    }
}

// b (4 rows of Wp) = B^T d for the four padded rows d0..d3 of one tile row, read straight
// from the image: padded column j is image column j - 1 (zero at j = 0 and past the image),
// and a row outside the image is `zero` (W zeros). Replaces copying a padded plane.
// W is 2 * tw or 2 * tw - 1: the first 2 * tw - 1 columns run with a compile-time trip count
// when TW is known, which keeps the loop in whole vectors.
template <int TW>
inline void input_rows_transform(const float* __restrict d0, const float* __restrict d1,
                                 const float* __restrict d2, const float* __restrict d3, int tw, int W,
                                 float* __restrict b) {
  const int Wp = 2 * (TW ? TW : tw) + 2, full = 2 * (TW ? TW : tw) - 1;
  float *b0 = b, *b1 = b + Wp, *b2 = b + 2 * Wp, *b3 = b + 3 * Wp;
  auto column = [&](int j) {  // padded column j + 1 from image column j
    b0[j + 1] = d0[j] - d2[j];
    b1[j + 1] = d1[j] + d2[j];
    b2[j + 1] = d2[j] - d1[j];
    b3[j + 1] = d1[j] - d3[j];
  };
  b0[0] = b1[0] = b2[0] = b3[0] = 0.f;
  for (int j = 0; j < full; ++j) column(j);
  if (W > full) column(full);
  else b0[full + 1] = b1[full + 1] = b2[full + 1] = b3[full + 1] = 0.f;
  b0[Wp - 1] = b1[Wp - 1] = b2[Wp - 1] = b3[Wp - 1] = 0.f;
}

// o0..o3 (tw) = one row b of B^T d times B, for the tw tiles along it (stride-2 windows of 4).
inline void input_cols_transform(const float* __restrict b, int tw, float* __restrict o0,
                                 float* __restrict o1, float* __restrict o2, float* __restrict o3) {
  for (int tx = 0; tx < tw; ++tx) {
    const float a0 = b[2 * tx], a1 = b[2 * tx + 1], a2 = b[2 * tx + 2], a3 = b[2 * tx + 3];
    o0[tx] = a0 - a2;
    o1[tx] = a1 + a2;
    o2[tx] = a2 - a1;
    o3[tx] = a1 - a3;
  }
}

// For every channel c < C and chunk sample ln: calls f(p, v0) with p = the (sample, channel)
// plane index into an (N, C, H, W) tensor and v0 = that plane's first column in a
// transformed-tile buffer (16, C, T) (next xi at + C*T); the columns of the chunk's absent
// samples (ln >= count) are zeroed instead, so the GEMMs see zeros there.
template <class Fn>
void for_each_chunk_plane(const Tiling& t, int C, int n0, int count, float* buf, Fn&& f) {
  const int64_t step = static_cast<int64_t>(C) * t.T;
  for (int c = 0; c < C; ++c)
    for (int ln = 0; ln < t.chunk; ++ln) {
      float* v0 = buf + static_cast<int64_t>(c) * t.T + static_cast<int64_t>(ln) * t.per_sample;
      if (ln >= count) {
        for (int xi = 0; xi < kXi; ++xi) std::memset(v0 + xi * step, 0, sizeof(float) * t.per_sample);
        continue;
      }
      f(static_cast<int64_t>(n0 + ln) * C + c, v0);
    }
}

// V (16, C, T) for samples [n0, n0 + count) of x (N, C, H, W): V = B^T d B per 4x4 patch,
// patches at stride 2 over the image padded by one zero on the top and left (and as many
// as the tile grid needs on the bottom and right). Columns of absent samples are zero.
// B^T is applied to four whole padded rows at once, then B along each row to all the tiles
// of the tile row: every loop runs over contiguous or stride-2 data and vectorises.
template <int TW>
void transform_input(const ConvShape& s, const Tiling& t, const float* x, int C, int n0, int count,
                     float* scratch, float* V) {
  const int tw = TW ? TW : t.tw, Wp = 2 * tw + 2;
  const int64_t step = static_cast<int64_t>(C) * t.T;  // next xi
  float* rows = scratch;               // B^T d: 4 rows of Wp
  float* zero = scratch + 4 * Wp;      // one image row of zeros (the padding rows)
  std::fill(zero, zero + s.W, 0.f);
  for_each_chunk_plane(t, C, n0, count, V, [&](int64_t p, float* v0) {
    const float* img = x + p * s.H * s.W;
    auto row = [&](int h) { return h >= 0 && h < s.H ? img + static_cast<int64_t>(h) * s.W : zero; };
    for (int ty = 0; ty < t.th; ++ty) {
      const int h = 2 * ty - 1;  // image row of padded row 2 * ty
      input_rows_transform<TW>(row(h), row(h + 1), row(h + 2), row(h + 3), tw, s.W, rows);
      for (int i = 0; i < 4; ++i) {
        float* o = v0 + (i * 4) * step + ty * tw;
        input_cols_transform(rows + i * Wp, tw, o, o + step, o + 2 * step, o + 3 * step);
      }
    }
  });
}

// E (16, C, T) = A dY A^T per 2x2 tile of dy (N, C, H, W), zero beyond the image edge.
// Row-wise like transform_input: A on the two rows of a tile row, then A^T along them.
template <int TW>
void transform_output_gradient(const ConvShape& s, const Tiling& t, const float* dy, int C, int n0,
                               int count, float* rows, float* E) {
  const int64_t step = static_cast<int64_t>(C) * t.T;
  const int tw = TW ? TW : t.tw, Wt = 2 * tw;
  float* e = rows;                // 4 rows of Wt
  float* zero = rows + 4 * Wt;    // one image row of zeros (below an odd-height image)
  std::fill(zero, zero + s.W, 0.f);
  for (int i = 0; i < 4; ++i) std::fill(e + i * Wt + s.W, e + (i + 1) * Wt, 0.f);  // past an odd width
  for_each_chunk_plane(t, C, n0, count, E, [&](int64_t p, float* v0) {
    const float* img = dy + p * s.H * s.W;
    for (int ty = 0; ty < t.th; ++ty) {
      const float* __restrict g0 = img + 2 * ty * s.W;
      const float* __restrict g1 = 2 * ty + 1 < s.H ? g0 + s.W : zero;
      auto column = [&](int j) {
        e[j] = g0[j];
        e[Wt + j] = g0[j] + g1[j];
        e[2 * Wt + j] = g0[j] - g1[j];
        e[3 * Wt + j] = -g1[j];
      };
      for (int j = 0; j < Wt - 1; ++j) column(j);  // W is Wt or Wt - 1 (compile-time bound)
      if (s.W == Wt) column(Wt - 1);
      for (int i = 0; i < 4; ++i) {
        const float* r = e + i * Wt;
        float* o = v0 + (i * 4) * step + ty * tw;
        float *o1 = o + step, *o2 = o1 + step, *o3 = o2 + step;
        for (int tx = 0; tx < tw; ++tx) {
          const float a0 = r[2 * tx], a1 = r[2 * tx + 1];
          o[tx] = a0;
          o1[tx] = a0 + a1;
          o2[tx] = a0 - a1;
          o3[tx] = -a1;
        }
      }
    }
  });
}

// r (8 rows of tw): rows 0-3 = row 0 of A^T m for columns j = 0..3, rows 4-7 = row 1, for
// the tw tiles of one tile row; m(xi) = m[xi * step + tx].
inline void output_rows_transform(const float* __restrict m, int64_t step, int tw, float* __restrict r) {
  for (int j = 0; j < 4; ++j) {
    const float *p0 = m + j * step, *p1 = m + (4 + j) * step, *p2 = m + (8 + j) * step,
                *p3 = m + (12 + j) * step;
    float *r0 = r + j * tw, *r1 = r + (4 + j) * tw;
    for (int tx = 0; tx < tw; ++tx) {
      r0[tx] = p0[tx] + p1[tx] + p2[tx];
      r1[tx] = p1[tx] - p2[tx] - p3[tx];
    }
  }
}

// out (2*tw) = one output row: (r0, r1, r2, r3) (4 rows of tw) times A.
inline void output_cols_transform(const float* __restrict r, int tw, float* __restrict out) {
  const float *r0 = r, *r1 = r + tw, *r2 = r + 2 * tw, *r3 = r + 3 * tw;
  for (int tx = 0; tx < tw; ++tx) {
    out[2 * tx] = r0[tx] + r1[tx] + r2[tx];
    out[2 * tx + 1] = r1[tx] - r2[tx] - r3[tx];
  }
}

// y (N, C, H, W) samples [n0, n0 + count) = A^T M A per tile of M (16, C, T); overwritten,
// or added to when accumulate. scratch: 10 * tw floats (8 rows of A^T m and one output row
// of 2*tw).
template <int TW>
void transform_output(const ConvShape& s, const Tiling& t, const float* M, int C, int n0, int count,
                      float* scratch, float* y, bool accumulate) {
  const int64_t step = static_cast<int64_t>(C) * t.T;
  const int tw = TW ? TW : t.tw;
  float *r = scratch, *row = scratch + 8 * tw;
  for (int c = 0; c < C; ++c)
    for (int ln = 0; ln < count; ++ln) {
      float* img = y + (static_cast<int64_t>(n0 + ln) * C + c) * s.H * s.W;
      const float* m0 = M + static_cast<int64_t>(c) * t.T + static_cast<int64_t>(ln) * t.per_sample;
      for (int ty = 0; ty < t.th; ++ty) {
        output_rows_transform(m0 + ty * tw, step, tw, r);
        for (int a = 0; a < 2 && 2 * ty + a < s.H; ++a) {
          float* out = img + (2 * ty + a) * s.W;
          if (s.W % 2 == 0 && !accumulate) {  // the tiles cover the row exactly: write in place
            output_cols_transform(r + 4 * a * tw, tw, out);
          } else {
            output_cols_transform(r + 4 * a * tw, tw, row);
            if (accumulate) {
              for (int i = 0; i < s.W; ++i) out[i] += row[i];
            } else {
              std::memcpy(out, row, sizeof(float) * s.W);
            }
          }
        }
      }
    }
}

// Calls f(std::integral_constant<int, TW>) with TW = tw for the tile widths of common image
// sizes (28, 14, 7 for Fashion-MNIST; 32, 16, 8 for CIFAR), 0 (run-time width) otherwise.
// The transforms' loops run over one tile row (tw elements): with tw known at compile time
// they unroll into whole vectors instead of mostly scalar remainders.
template <class F>
void with_tile_width(int tw, F&& f) {
  switch (tw) {
    case 4: return f(std::integral_constant<int, 4>{});
    case 7: return f(std::integral_constant<int, 7>{});
    case 8: return f(std::integral_constant<int, 8>{});
    case 14: return f(std::integral_constant<int, 14>{});
    case 16: return f(std::integral_constant<int, 16>{});
    default: return f(std::integral_constant<int, 0>{});
  }
}

// out (16, rows, T) = U[xi] (rows, cols) x in[xi] (cols, T) for every xi.
void multiply_tiles(const float* U, int rows, int cols, const float* in, int T, float* out) {
  for (int xi = 0; xi < kXi; ++xi)
    sgemm(false, false, rows, T, cols, 1.f, U + static_cast<int64_t>(xi) * rows * cols, cols,
          in + static_cast<int64_t>(xi) * cols * T, T, 0.f, out + static_cast<int64_t>(xi) * rows * T, T);
}

// Forward-direction convolution of `in` (N, cin, H, W) with transformed filters U (16, cout,
// cin) into out (N, cout, H, W) (added to it when accumulate): shared by the forward pass and
// the input gradient.
void convolve(const ConvShape& s, const Tiling& t, const float* U, const float* in, int cin, int cout,
              float* out, float* ws_threads, bool accumulate = false) {
#pragma omp parallel
  {
    float* a = ws_threads + omp_get_thread_num() * thread_floats(s, t);
    float* b = a + tile_buffer_floats(s, t);
    float* scratch = b + tile_buffer_floats(s, t);
#pragma omp for schedule(static)
    for (int ch = 0; ch < t.chunks(s.N); ++ch) {
      const int n0 = ch * t.chunk, count = std::min(t.chunk, s.N - n0);
      with_tile_width(t.tw, [&](auto tw) {
        transform_input<tw()>(s, t, in, cin, n0, count, scratch, a);
        multiply_tiles(U, cout, cin, a, t.T, b);
        transform_output<tw()>(s, t, b, cout, n0, count, scratch, out, accumulate);
      });
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
  convolve(s, t, ws, x, s.Cin, s.Cout, y, tile_regions(s, ws));
}

void winograd_backward(const ConvShape& s, const float* x, const float* w, const float* dy,
                       float* dx, float* dw, int dw_cout, int dw_cin, float* ws, bool accumulate_dx) {
  const Tiling t(s);
  float* U = filter_slot(s, ws, 0);
  float* threads_ws = tile_regions(s, ws);
  if (dx) {
    transform_filters(s, w, true, U);
    convolve(s, t, U, dy, s.Cout, s.Cin, dx, threads_ws, accumulate_dx);
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
    float* du = filter_slot(s, ws, omp_get_thread_num());  // partial (16, dw_cout, dw_cin)
    std::memset(du, 0, sizeof(float) * du_n);
#pragma omp for schedule(static)
    for (int ch = 0; ch < t.chunks(s.N); ++ch) {
      const int n0 = ch * t.chunk, count = std::min(t.chunk, s.N - n0);
      with_tile_width(t.tw, [&](auto tw) {
        transform_input<tw()>(s, t, x, s.Cin, n0, count, scratch, v);
        transform_output_gradient<tw()>(s, t, dy, s.Cout, n0, count, scratch, e);
      });
      // du[xi] (dw_cout, dw_cin) += e[xi][:dw_cout] (dw_cout, T) x v[xi][:dw_cin]^T
      for (int xi = 0; xi < kXi; ++xi)
        sgemm(false, true, dw_cout, dw_cin, t.T, 1.f, e + static_cast<int64_t>(xi) * s.Cout * t.T, t.T,
              v + static_cast<int64_t>(xi) * s.Cin * t.T, t.T, 1.f, du + xi * dw_cout * dw_cin, dw_cin);
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
