// Rotary position embeddings (Su et al. 2021, "RoFormer", section 3.4), in the rotate-half
// form of GPT-NeoX and Hugging Face's LLaMA: each head's dimensions i and i + hd/2 form a
// pair rotated by the angle t * theta^(-2i/hd) of the row's position t.
#pragma once
#include <cstdint>

namespace subdp::cpu {

/// Rotates, in place, the first `heads` heads (hd columns each) of every row of x (rows, ld),
/// row r at position r % T: (a, b) = (x[i], x[i + hd/2]) becomes (a c - b s, b c + a s), with
/// c, s = cos, sin (context, hd/2) at (r % T, i): the tables of engine/layers/rope.h. inverse: rotates by the negative
/// angle, which is the backward pass (the rotation's transpose): dx from dy, in place.
void rope_rotate(float* x, int64_t rows, int T, int64_t ld, int heads, int hd, const float* cos, const float* sin,
                 bool inverse);

}  // namespace subdp::cpu
