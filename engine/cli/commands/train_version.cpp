// run_train and run_version: choose the communicator backend, run the session.
#include "engine/core/backend.h"
#include "engine/cli/commands.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "engine/comm/communicator.h"
#include "engine/core/error.h"
#include "engine/train/trainer.h"

namespace subdp {

namespace {

/// NCCL for the CUDA device when several ranks run (parallel.backend "nccl", or "auto" under
/// an MPI launcher with more than one rank), bootstrapped over MPI.
bool wants_nccl(const Config& c) {
  if (c.parallel.backend == CommBackend::nccl) return true;
  return c.parallel.backend == CommBackend::automatic && c.device.type == DeviceType::cuda &&
         launcher_layout().size > 1;
}

std::unique_ptr<Communicator> make_world(const Config& c) {
  const ParallelConfig& p = c.parallel;
  if (p.backend == CommBackend::local) {
    // Each of mpirun's processes would train a world of its own, all writing the same outputs.
    // (Only the MPI launchers' own variables: a Slurm batch script has SLURM_NTASKS without
    // any srun.)
    int launched = 1;
    for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
      if (const char* v = std::getenv(var)) launched = std::max(launched, std::atoi(v));
    SUBDP_CHECK(launched <= 1,
                "[parallel] backend = \"local\" is one process, but the launcher started {} (mpirun -np {}): each "
                "would train alone; use \"auto\" or \"mpi\" under mpirun",
                launched, launched);
    return make_local_communicator();
  }
  if (wants_nccl(c)) {
    SUBDP_CHECK(c.device.type == DeviceType::cuda,
                "[parallel] backend = \"nccl\" needs [device] type = \"cuda\" (it is \"{}\"); "
                "use \"mpi\" or \"auto\"",
                c.device.type);
#ifdef SUBDP_WITH_NCCL
    std::unique_ptr<Communicator> bootstrap =
        launched_by_mpi() ? make_mpi_world(p.collective_timeout_s) : make_local_communicator();
    return make_nccl_world(std::move(bootstrap), p.collective_timeout_s);
#else
    throw Error(
        "[parallel] backend = \"nccl\": this build has no NCCL (libnccl and nccl.h were not found when it "
        "was configured)");
#endif
  }
  if (p.backend == CommBackend::mpi || launched_by_mpi()) return make_mpi_world(p.collective_timeout_s);
  return make_local_communicator();
}

}  // namespace

int run_train(const Config& config, TrainOptions options) {
  if (const char* dir = std::getenv("SUBDP_DUMP_LOCAL")) options.dump_local_dir = dir;  // tests/mpi: invariant 5
  std::unique_ptr<Communicator> world;
  if (!options.simulate_rank.empty()) {
    int w = 0, W = 0;
    SUBDP_CHECK(std::sscanf(options.simulate_rank.c_str(), "%d/%d", &w, &W) == 2,
                "--simulate-rank \"{}\": expected w/W", options.simulate_rank);
    // One rank alone holds only its subnetwork's units: a checkpoint written from it would
    // be a full model with holes, and a resume would need the other ranks' optimizer state.
    SUBDP_CHECK(config.checkpoint.dir.empty() && config.checkpoint.resume.empty(),
                "--simulate-rank {}: [checkpoint] dir / resume are not supported (this rank alone holds only "
                "its subnetwork's units); unset them to measure the rank's footprint",
                options.simulate_rank);
    SUBDP_CHECK(config.log.alignment_every == 0,
                "--simulate-rank {}: [log] alignment_every needs the full model, "
                "which one rank alone cannot assemble; set it to 0",
                options.simulate_rank);
    // A re-deal moves each unit's values from the ranks that held it; simulated, the others
    // send zeros and the model would silently train from a blank slate.
    SUBDP_CHECK(config.mask.redeal_every == 0,
                "--simulate-rank {}: [mask] redeal_every = {} moves units between ranks, and one rank alone "
                "has only its own; set it to 0, or run the real ranks under mpirun",
                options.simulate_rank, config.mask.redeal_every);
    world = make_simulated_communicator(w, W);
  } else {
    world = make_world(config);
  }
  SUBDP_CHECK(config.device.type != DeviceType::cuda || world->kind() != CommKind::mpi || world->size() == 1,
              "device.type = \"cuda\" with W = {} ranks over [parallel] backend = \"mpi\": MPI here carries host "
              "buffers, not GPU memory; use backend = \"nccl\" (or \"auto\")",
              world->size());
  const bool mpi = world->kind() == CommKind::mpi || (world->kind() == CommKind::nccl && launched_by_mpi());
  const int rank = world->rank(), size = world->size();
  int status = 0;
  try {
    Trainer trainer(config, std::move(world), options);
    status = trainer.run();
  } catch (const std::exception& e) {
    if (!mpi) throw;
    if (size == 1) {
      finalize_mpi();
      throw;
    }
    // Other ranks may be waiting in a collective: name the rank, then abort the whole job
    // so nobody hangs.
    std::fprintf(stderr, "subdp: error on rank %d of %d: %s\n", rank, size, e.what());
    std::fflush(stderr);
    abort_mpi(1);
  }
  if (mpi) finalize_mpi();
  return status;  // 0, or a stop signal's (engine/train/stop_signals.h)
}

int run_version() {
  std::printf("subdp %s\nbackends: cpu mpi local", SUBDP_VERSION);
#if defined(SUBDP_CUDA_EMULATED)
  std::printf(" cuda(emulated: kernels/emu, not a GPU)");
#elif defined(SUBDP_WITH_CUDA)
  std::printf(" cuda");
#endif
#ifdef SUBDP_WITH_NCCL
  std::printf(" nccl");
#endif
  std::printf("\n%s\n", backend().describe().c_str());
  return 0;
}

}  // namespace subdp
