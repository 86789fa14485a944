// Dry-run prediction of a rank's memory.
#include "engine/train/footprint.h"

#include "engine/comm/communicator.h"
#include "engine/core/backend.h"
#include "engine/core/error.h"
#include "engine/data/data_source.h"
#include "engine/parallel/grad_sync.h"
#include "engine/optim/optimizer.h"

namespace subdp {

OverlapMode overlap_mode_of(const Config& c) {
  if (!c.parallel.overlap) return OverlapMode::off;
  return c.device.type == DeviceType::cuda ? OverlapMode::streams : OverlapMode::thread;
}

MemStats predict_rank_memory(const Config& c, int world, int rank) {
  const int S = c.parallel.subnetworks;
  SUBDP_CHECK(world % S == 0, "{}[parallel] subnetworks = {} does not divide the world size W = {}", config_origin(c),
              S, world);
  const ModelUnits units = model_units(c.model);
  const SubnetworkPlan plan = make_plan(units, c.mask, S);
  Layout layout{world, S, rank};
  return MemoryTracker::global().measure([&] {
    auto comm = make_simulated_communicator(rank, world);
    const Sharding sharding = c.parallel.shard;
    auto model =
        make_model(c.model, make_subnet_mask(plan, units, layout.subnet(), c.mask.scale == MaskScale::inverse_keep),
                   c.train.batch_size, c.train.seed, c.train.recompute == Recompute::blocks, param_layout_of(sharding));
    GradientSync sync(*comm, layout, plan, model->params().all(), c.parallel.bucket_mb, sharding,
                      static_cast<int>(units.blocks.size()),
                      // The device's per-chunk buffers; the CPU's thread allocates nothing.
                      overlap_mode_of(c) == OverlapMode::streams ? OverlapMode::streams : OverlapMode::off);
    auto opt = make_optimizer(c.optim, model->params().trainable(), sync.sharded() ? &sync.shard_pieces() : nullptr);
    Batch batch = allocate_batch(c);
    // The libraries' workspace the backend takes at its first GEMM (CUDA: cuBLASLt's).
    const int64_t library = backend().library_workspace_bytes();
    Tensor library_workspace;
    if (library > 0) library_workspace = Tensor::empty({library}, MemCategory::workspace, DType::u8);
  });
}

}  // namespace subdp
