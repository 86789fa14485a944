// Communicator interface (after PyTorch c10d's process group): collectives over a fixed
// set of ranks. Backends: MPI (host buffers), local (world size 1, no MPI), NCCL (CUDA).
// Every rank issues collectives in one global order fixed by the plan.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace subdp {

/// The communicator's implementation: MPI, one process (local), --simulate-rank's stand-in
/// for one rank of a larger world (simulated), or NCCL (kernels/cuda/nccl_comm).
enum class CommKind { mpi, local, simulated, nccl };

/// "mpi", "local", "simulated" or "nccl" (messages).
inline const char* name_of(CommKind kind) {
  constexpr const char* names[] = {"mpi", "local", "simulated", "nccl"};
  return names[static_cast<int>(kind)];
}

class Communicator {
 public:
  virtual ~Communicator() = default;
  /// This process's rank in the communicator, 0 <= rank() < size().
  virtual int rank() const = 0;
  /// Number of ranks (world size for the world communicator, holders for a holder group).
  virtual int size() const = 0;
  /// In-place sum all-reduce of n float32 values.
  virtual void allreduce_sum(float* data, int64_t n) = 0;
  /// In-place sum all-reduce of n float64 values (metrics, norms, hashes).
  virtual void allreduce_sum(double* data, int64_t n) = 0;
  /// In-place max all-reduce of n float64 values (the step's device flags, peak bytes, counts).
  virtual void allreduce_max(double* data, int64_t n) = 0;
  /// allreduce_sum that may still be running when it returns (parallel.overlap on a device):
  /// NCCL orders it after the work already queued on the compute stream, but the compute
  /// stream's later work only after join(); until then `data` must be neither read nor
  /// written. Default (host communicators): the blocking allreduce_sum.
  virtual void allreduce_sum_deferred(float* data, int64_t n) { allreduce_sum(data, n); }
  /// Orders the compute stream's later work after every deferred collective issued so far on
  /// this communicator; no host wait. Default: nothing (nothing was deferred).
  virtual void join() {}
  /// Sum-reduce n float32 values to `root` (recv used on root only; may alias data). data and
  /// the root's recv are both host or both device memory (NCCL: the transport follows data,
  /// which every rank sees alike; a device data into a host recv is an error on the root).
  virtual void reduce_sum(const float* data, float* recv, int64_t n, int root) = 0;
  /// Reduce-scatter (sum) in place: `data` holds sum(counts) float32 values on every rank,
  /// cut into consecutive segments, segment r of counts[r] values for rank r (counts the same
  /// on every rank, one per rank). On return this rank's segment holds the sum over ranks of
  /// that segment; the rest of `data` is undefined. Payload counted: this rank's segment.
  virtual void reduce_scatter_sum(float* data, const std::vector<int64_t>& counts) = 0;
  /// All-gather in place: segment r (as for reduce_scatter_sum) of rank r's `data` is copied
  /// into segment r of every rank's. Payload counted: this rank's segment.
  virtual void allgather_segments(float* data, const std::vector<int64_t>& counts) = 0;
  /// Broadcast `bytes` bytes from root.
  virtual void broadcast(void* data, int64_t bytes, int root) = 0;
  /// Gathers every rank's variable-size byte block to all ranks, in rank order.
  virtual std::vector<std::string> allgather(const std::string& mine) = 0;
  /// Returns on every rank once every rank has entered it (watchdog-guarded like a collective).
  virtual void barrier() = 0;
  /// Collective over this communicator: returns a communicator over `ranks` (sorted ranks
  /// of this communicator) on members, nullptr elsewhere.
  virtual std::unique_ptr<Communicator> subgroup(const std::vector<int>& ranks) = 0;
  /// Lets this rank's waits in later collectives run extra_s seconds past
  /// parallel.collective_timeout_s (0: no more), naming `why` (a literal) if they time out:
  /// rank 0's checkpoint I/O, which the other ranks wait on. Default: nothing (no watchdog).
  virtual void allow_longer_waits(double extra_s, const char* why) {
    (void)extra_s;
    (void)why;
  }
  /// Which implementation this is.
  virtual CommKind kind() const = 0;
  /// True for --simulate-rank's communicator: collectives return this rank's own data.
  bool simulated() const { return kind() == CommKind::simulated; }
};

/// Communicator::allow_longer_waits for a scope (every rank of the communicator makes one).
class LongerWaits {
 public:
  LongerWaits(Communicator& comm, double extra_s, const char* why) : comm_(comm) {
    comm_.allow_longer_waits(extra_s, why);
  }
  ~LongerWaits() { comm_.allow_longer_waits(0, nullptr); }
  LongerWaits(const LongerWaits&) = delete;
  LongerWaits& operator=(const LongerWaits&) = delete;

 private:
  Communicator& comm_;
};

/// Offset of segment r of `counts` (the sum of counts[0..r)); checks counts.size() == size.
int64_t segment_offset(const std::vector<int64_t>& counts, int r, int size);

/// World size 1 without MPI: every collective is the identity.
std::unique_ptr<Communicator> make_local_communicator();

/// Rank `rank` of a `size`-rank layout alone in this process: collectives act as if every
/// other rank contributed the same values (--simulate-rank, planner dry runs).
std::unique_ptr<Communicator> make_simulated_communicator(int rank, int size);

/// True when this process was started by an MPI launcher (mpirun, srun).
bool launched_by_mpi();

/// World size and rank that an MPI launcher gave this process, read from its environment
/// (Open MPI, PMI, Slurm) without initialising MPI: {1, 0} when none did.
struct LauncherLayout {
  int size = 1, rank = 0;
};
/// The launcher's layout (see LauncherLayout); never throws: {1, 0} when no
/// launcher set its variables or they disagree (a rank outside [0, size)).
LauncherLayout launcher_layout();

/// Initialises MPI (once) and returns the world communicator. Errors name the MPI call.
/// A collective that waits longer than collective_timeout_s ends the process (watchdog).
std::unique_ptr<Communicator> make_mpi_world(double collective_timeout_s);

/// The NCCL world (kernels/cuda/nccl_comm.cpp; CUDA builds with NCCL only): one GPU per rank
/// (the local rank's), collectives on device buffers over NCCL, ordered after the CUDA
/// backend's stream; `bootstrap` (the MPI world, or local for one process) carries the unique
/// id and the string gathers and is owned by the result. Throws on every rank when a rank has
/// no GPU of its own. A host wait on the device longer than collective_timeout_s (a peer lost
/// inside an NCCL collective stalls the stream) ends the process, as the MPI watchdog does.
std::unique_ptr<Communicator> make_nccl_world(std::unique_ptr<Communicator> bootstrap, double collective_timeout_s);

/// Finalises MPI if it was initialised (call once at exit).
void finalize_mpi();

/// Aborts every rank of the MPI job (after a fatal error on one rank), if MPI is running.
void abort_mpi(int code);

}  // namespace subdp
