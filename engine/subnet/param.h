// Parameters of a local (possibly masked) model and their relation to the full model.
// Each rank orders the units of a maskable layer as "kept units first, ascending global
// index, then dropped units": forward masking allocates only the kept prefix, backward
// masking allocates the full value but gradients for the kept prefix only, so every
// masked GEMM runs on a prefix with a leading dimension (no gathers).
#pragma once
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "engine/subnet/plan.h"
#include "engine/core/tensor.h"

namespace subdp {

struct FloatSpan;  // engine/core/backend.h

/// Local unit order of one maskable layer: order[p] = global unit at local position p;
/// the first `kept` positions are this rank's kept units.
struct LayerMask {
  std::vector<int> order;
  int kept = 0;
  int units() const { return static_cast<int>(order.size()); }
};

/// One run of a parameter's sharded or updated elements: `len` values at value_off of its
/// value, at grad_off of its gradient layout, at state_off of a state tensor laid out in
/// runs (optimizer state; FSDP's Param::shard_value).
struct StateRun {
  int64_t value_off, grad_off, state_off, len;
};

/// Everything a model needs to build rank-local parameters for one subnetwork.
struct SubnetMask {
  Regime regime = Regime::none;
  Granularity granularity = Granularity::block;
  std::vector<LayerMask> layers;  // neuron level (always filled, identity when unmasked)
  std::vector<char> block_kept;   // block level (all 1 when unmasked)
  std::vector<char> block_dense;  // pinned or undroppable blocks: never scaled
  float scale = 1.f;              // forward masking: 1 / keep (inverted dropout), else 1
  bool forward_masked() const { return regime == Regime::forward; }
  /// True when the forward pass should skip block b (forward masking, dropped block).
  bool skips_block(int b) const { return regime == Regime::forward && !block_kept.at(b); }
  /// Scale of block b's residual branch at block level: 1/keep for a kept masked block,
  /// 1 for pinned (dense) blocks and outside forward masking.
  float block_scale(int b) const { return block_dense.empty() || block_dense.at(b) ? 1.f : scale; }
};

/// Local mask of subnetwork s. `scale_kept` = false implements mask.scale = "none".
SubnetMask make_subnet_mask(const SubnetworkPlan& plan, const ModelUnits& units, int s, bool scale_kept);
/// The full, unmasked model (DP, evaluation, checkpoints).
SubnetMask full_mask(const ModelUnits& units);

/// Where a parameter sits in the unit structure.
struct UnitRef {
  int layer = -1;     // maskable layer id, -1 = not unit-sliced
  int axis = 0;       // tensor axis carrying the unit index
  int unit_size = 1;  // entries along `axis` per unit (head_dim for heads)
};

/// How a parameter is initialised, from a counter-based hash of (seed, name, full index) so
/// every layout draws the same full-model values.
struct InitSpec {
  enum Kind { uniform, normal, constant } kind = constant;
  float a = 0.f;  // uniform: bound (U(-a, a)); normal: std; constant: value
};

/// One parameter (or buffer) tensor of the local model.
struct Param {
  std::string name;  // full-model name, the safetensors / PyTorch state_dict key
  Shape full_shape;
  Tensor value;          // local values, (kept prefix along unit axis when forward masked)
  Tensor grad;           // kept prefix along unit axis; undefined when this rank holds no gradient
  Shape local_shape;     // the local value's shape, known before `value` is allocated (FSDP)
  Shape grad_shape;      // the gradient's shape when trained (set by ParamSet::add, before allocation)
  bool trained = false;  // this rank holds a gradient for it (trainable, in a block it keeps)
  /// FSDP (ParamLayout::shared_block_params, a trained block parameter): this rank's shard of
  /// the value, the only copy kept between steps, laid out as sharded optimizer state: pieces
  /// one after another, mapped by shard_runs (state_off = offset in shard_value). `value` is
  /// then a view into the buffer the blocks share, valid from the block's gather
  /// (GradientSync::gather_block) until the next block's. Undefined otherwise.
  Tensor shard_value;
  std::vector<StateRun> shard_runs;
  UnitRef unit;
  const LayerMask* mask = nullptr;  // for unit.layer >= 0
  int block = -1;                   // residual block whose branch holds it, -1 = outside any branch
  bool trainable = true;            // false for buffers (BatchNorm running statistics)
  InitSpec init;

  int64_t value_extent() const { return local_shape.at(unit.axis); }
  int64_t grad_extent() const { return grad.defined() ? grad.dim(unit.axis) : 0; }
  /// Elements per index of the unit axis (product of the trailing dimensions).
  int64_t inner() const;
  /// Product of the leading dimensions before the unit axis.
  int64_t outer() const;
};

/// How a model's values and gradients are laid out in memory. Parameters outside blocks,
/// and buffers, keep their own tensors in every layout.
enum class ParamLayout {
  per_param,            // a value and a zeroed gradient tensor per trained parameter
  shared_block_grads,   // the gradients of trained parameters inside residual blocks share one
                        // buffer sized for the largest block's (parallel.shard = "gradients",
                        // ZeRO-2): a block's gradient lives from its backward until
                        // GradientSync::reduce_block has taken this rank's shard of it
  shared_block_params,  // the same, and their values share one buffer too (parallel.shard =
                        // "parameters", FSDP): a block's values live from its gather until the
                        // next block's; between steps only Param::shard_value holds them
};

/// Owns a model's parameters with stable addresses, in creation order (identical on every rank).
class ParamSet {
 public:
  /// mask: kept by reference (must outlive the set); seed: train.seed, from which every
  /// parameter's full initial tensor is drawn (init_value).
  ParamSet(const SubnetMask& mask, uint64_t seed, ParamLayout layout = ParamLayout::per_param)
      : mask_(mask), seed_(seed), layout_(layout) {}
  /// Creates a parameter: local shape from the mask, initialised values, a zeroed gradient
  /// where this rank trains it. For a trained block parameter under a shared layout, the
  /// shared tensors come from allocate_shared_blocks (FSDP: no value until then; its shard
  /// is initialised by GradientSync).
  Param& add(const std::string& name, const Shape& full_shape, InitSpec init, UnitRef unit = {}, int block = -1,
             bool trainable = true);
  /// Shared layouts: allocates the buffers the blocks share (gradients; FSDP: values too)
  /// and points each trained block parameter into them, once every parameter exists
  /// (make_model calls it; a no-op for ParamLayout::per_param).
  void allocate_shared_blocks();
  /// The trainable parameters, in creation order, including those this rank holds no
  /// gradient for (Param::trained false; Optimizer::params() holds only the trained ones).
  std::vector<Param*> trainable();
  /// The non-trainable ones (BatchNorm running statistics), in creation order.
  std::vector<Param*> buffers();
  /// Every parameter, in creation order.
  std::vector<Param*> all();
  const SubnetMask& mask() const { return mask_; }

 private:
  const SubnetMask& mask_;
  uint64_t seed_;
  /// True when p's value lives in the shared block buffer (FSDP, trained block parameter).
  bool shares_value(const Param& p) const {
    return layout_ == ParamLayout::shared_block_params && p.trained && p.block >= 0;
  }
  ParamLayout layout_;
  std::deque<Param> params_;
  Tensor block_grads_;   // shared layouts: the buffer the blocks' gradients share
  Tensor block_values_;  // ParamLayout::shared_block_params: the buffer the blocks' values share
};

/// Calls fn(local_offset, full_offset, length) for every contiguous run of the local value
/// of p, mapping local unit positions to full-model positions.
void for_each_value_run(const Param& p, const std::function<void(int64_t, int64_t, int64_t)>& fn);
/// The same runs with fn(local_offset, full_offset, length, unit_position): unit_position is
/// the run's local unit position (< p.mask->kept: a unit this rank trains), -1 when p is not
/// unit-sliced (one run, the whole tensor).
void for_each_value_run_at(const Param& p, const std::function<void(int64_t, int64_t, int64_t, int)>& fn);
/// Calls fn(value_offset, grad_offset, length, unit_position) for every run of the gradient
/// (kept prefix); unit_position is the local unit position (-1 when not unit-sliced).
void for_each_grad_run(const Param& p, const std::function<void(int64_t, int64_t, int64_t, int)>& fn);
/// Calls fn(value_offset, grad_offset, length) for the gradient in the fewest contiguous
/// spans: one per outer row when the gradient covers a kept prefix of the value, one in all
/// when it covers the whole value. For element-wise work (optimizer updates) where the unit
/// position does not matter: unit-by-unit runs cost a call per neuron (1024 per MLP column).
void for_each_grad_span(const Param& p, const std::function<void(int64_t, int64_t, int64_t)>& fn);

/// Offset in p's gradient layout of the value run at local offset `local_off` and unit
/// position `pos` (as for_each_value_run_at gives them); pos must be a kept position
/// (< p.mask->kept) for a unit-sliced p, whose gradient holds the kept prefix only.
int64_t grad_offset_of(const Param& p, int64_t local_off, int pos);

/// Full-model flat offset of element `grad_off` of p's gradient (kept prefix along the unit
/// axis mapped through p.mask->order; the identity for a parameter that is not unit-sliced).
int64_t full_offset_of_grad(const Param& p, int64_t grad_off);

/// "element (i, j) of the full (shape) tensor[, unit u of maskable layer l]" for element
/// `grad_off` of p's gradient layout (messages).
std::string describe_grad_element(const Param& p, int64_t grad_off);

/// Where the first non-finite (inf or NaN) value of `data`, p's local value, sits: "" when
/// every value is finite, else "element (i, j, ...) of the full (shape) tensor[, unit u of
/// maskable layer l]". One pass over the tensor: for error messages only (optimizer state,
/// laid out by Optimizer::state_runs, is located with describe_grad_element).
std::string locate_nonfinite(const Param& p, const float* data);

/// Each parameter's whole gradient (grad.numel() floats), in order: the spans a step's
/// non-finite count reads (Backend::count_nonfinite_spans). The gradients must be allocated.
std::vector<FloatSpan> grad_spans(const std::vector<Param*>& params);

/// Deterministic initial value of element `full_index` (row-major in the full, unmasked
/// shape) of parameter `name`, so every rank and layout draws the same full tensor: a key
/// mix64-hashed from seed, the name's bytes and the index gives u in (0, 1); uniform:
/// (2u - 1) a; normal: a sqrt(-2 ln u1) cos(2 pi u2) (Box-Muller, two keyed draws); constant: a.
float init_value(uint64_t seed, const std::string& name, int64_t full_index, InitSpec init);

}  // namespace subdp
