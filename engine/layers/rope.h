// The rotation tables of rotary position embeddings (Su et al. 2021, "RoFormer", section
// 3.4): cos and sin of t * theta^(-2i/hd) for positions t < context and i < hd/2, each
// (context, hd/2) in backend memory, read by Backend::rope_rotate (kernels/cpu/rope.h).
#pragma once
#include "engine/core/tensor.h"

namespace subdp {

class RopeTables {
 public:
  /// Allocates the two tables (workspace bytes); hd even. Values are written by fill().
  RopeTables(int context, int hd, double theta);
  /// Writes the tables (computed in double, rounded to float once, so every backend reads the
  /// same values) unless done already. Not in the constructor: a model is also built in the
  /// planner's dry runs, which allocate nothing to write to.
  void fill();
  Tensor cos, sin;

 private:
  int context_, hd_;
  double theta_;
  bool filled_ = false;
};

}  // namespace subdp
