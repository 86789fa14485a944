// run_train and run_version: choose the communicator backend, run the session.
#include "engine/backend.h"
#include "engine/cli/commands.h"

#include <cstdio>

#include "engine/comm/communicator.h"
#include "engine/error.h"
#include "engine/trainer.h"

namespace subdp {

namespace {

std::unique_ptr<Communicator> make_world(const ParallelConfig& p) {
  if (p.backend == "local") return make_local_communicator();
  // The NCCL communicator (kernels/cuda/nccl_comm) is built and tested on its own but not
  // wired to the trainer yet (holder-group communicators, the backend's stream).
  if (p.backend == "nccl")
    throw Error("parallel.backend = \"nccl\": the NCCL communicator is not wired to the trainer yet; use \"mpi\" "
                "(or \"auto\"), and with device.type = \"cuda\" one rank or --simulate-rank w/W");
  if (p.backend == "mpi" || launched_by_mpi()) return make_mpi_world(p.collective_timeout_s);
  return make_local_communicator();
}

}  // namespace

int run_train(const Config& config, const TrainOptions& options) {
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
    SUBDP_CHECK(config.log.alignment_every == 0, "--simulate-rank {}: [log] alignment_every needs the full model, "
                "which one rank alone cannot assemble; set it to 0", options.simulate_rank);
    world = make_simulated_communicator(w, W);
  } else {
    world = make_world(config.parallel);
  }
  SUBDP_CHECK(config.device.type != "cuda" || world->backend() != "mpi" || world->size() == 1,
              "device.type = \"cuda\" with W = {} ranks: the ranks would all-reduce GPU buffers through MPI, and the "
              "NCCL communicator is not wired to the CUDA backend yet; run one rank, or --simulate-rank w/{} to "
              "measure one rank of the layout on one GPU", world->size(), world->size());
  const bool mpi = world->backend() == "mpi";
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
  return status;  // 0, or a stop signal's (engine/stop_signals.h)
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
