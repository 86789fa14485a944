// NCCL communicator: subdp::Communicator over device buffers, one GPU per rank. Bootstrapped
// over an existing (MPI) communicator, which broadcasts rank 0's ncclUniqueId and carries
// the string all-gathers. Collectives run on a dedicated stream, ordered after the work
// already queued on the compute stream and before the work queued there afterwards (events,
// no host wait). Host pointers are accepted too: their collectives run on the bootstrap
// communicator (MPI), blocking, so no device buffer is allocated for them.
#pragma once
#include <cuda_runtime.h>

#include <memory>

#include "engine/comm/communicator.h"

namespace subdp {

/// The NCCL-specific part of the communicator made by make_nccl_communicator (kind()
/// "nccl"); reach it with dynamic_cast.
class NcclCommunicator : public Communicator {
 public:
  /// The GPU this rank drives.
  virtual int device() const = 0;
  /// The stream the collectives run on.
  virtual cudaStream_t stream() const = 0;
  /// Stream whose queued work a collective waits for, and which waits for the collective.
  /// Default: the run's backend's stream (Backend::cuda_stream(), read at each collective),
  /// the legacy default stream 0 under a host backend. Subgroups made afterwards inherit it.
  virtual void set_compute_stream(cudaStream_t s) = 0;
};

/// World communicator over NCCL, collective over `bootstrap` (which must outlive it): rank and
/// size are bootstrap's; the rank drives GPU <local rank> (OMPI_COMM_WORLD_LOCAL_RANK,
/// MPI_LOCALRANKID or SLURM_LOCALID, else its position among the ranks on its host).
/// Throws subdp::Error on every rank when a rank has no GPU or two ranks share one:
/// "NCCL 2.28 refuses two ranks on one GPU: run W = 1 or --simulate-rank".
/// collective_timeout_s > 0: a host wait on the device longer than that (a peer lost inside an
/// NCCL collective) ends the process (CollectiveWatchdog, engine/comm/watchdog.h).
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, double collective_timeout_s = 0);

}  // namespace subdp
