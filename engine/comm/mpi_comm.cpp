// MPI communicator over host buffers (Open MPI). Every MPI return code is checked; errors
// name the call, file and line.
#define OMPI_SKIP_MPICXX 1  // C API only: no Open MPI C++ bindings
#include <mpi.h>

#include <cstdlib>
#include <cstring>

#include "engine/core/backend.h"
#include "engine/comm/communicator.h"
#include "engine/comm/watchdog.h"
#include "engine/core/error.h"

#define MPI_CHECK(call)                                                                                     \
  do {                                                                                                      \
    int mpi_status_ = (call);                                                                               \
    if (mpi_status_ != MPI_SUCCESS) {                                                                       \
      char msg_[MPI_MAX_ERROR_STRING];                                                                      \
      int len_ = 0;                                                                                         \
      MPI_Error_string(mpi_status_, msg_, &len_);                                                           \
      throw ::subdp::Error(                                                                                 \
          fmt::format("MPI error in {} at {}:{}: {}", #call, __FILE__, __LINE__, std::string(msg_, len_))); \
    }                                                                                                       \
  } while (0)

namespace subdp {

namespace {

constexpr int64_t kMaxCount = 1 << 30;  // MPI counts are int: split larger messages

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, std::shared_ptr<CollectiveWatchdog> watchdog)
      : comm_(comm), watchdog_(std::move(watchdog)) {
    MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    MPI_CHECK(MPI_Comm_size(comm_, &size_));
    MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void allreduce_sum(float* data, int64_t n) override {
    CollectiveScope open;  // the buffers are backend memory
    CollectiveWatchdog::Guard guard(*watchdog_, "MPI_Allreduce");
    for (int64_t off = 0; off < n; off += kMaxCount)
      MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data + off, static_cast<int>(std::min(kMaxCount, n - off)), MPI_FLOAT,
                              MPI_SUM, comm_));
  }
  void allreduce_sum(double* data, int64_t n) override {
    CollectiveWatchdog::Guard guard(*watchdog_, "MPI_Allreduce");
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_DOUBLE, MPI_SUM, comm_));
  }
  void allreduce_max(double* data, int64_t n) override {
    CollectiveWatchdog::Guard guard(*watchdog_, "MPI_Allreduce(max)");
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_DOUBLE, MPI_MAX, comm_));
  }
  void reduce_sum(const float* data, float* recv, int64_t n, int root) override {
    CollectiveScope open;  // the buffers are backend memory
    CollectiveWatchdog::Guard guard(*watchdog_, "MPI_Reduce");
    for (int64_t off = 0; off < n; off += kMaxCount) {
      const int count = static_cast<int>(std::min(kMaxCount, n - off));
      if (rank_ == root)
        MPI_CHECK(
            MPI_Reduce(recv == data ? MPI_IN_PLACE : data + off, recv + off, count, MPI_FLOAT, MPI_SUM, root, comm_));
      else
        MPI_CHECK(MPI_Reduce(data + off, nullptr, count, MPI_FLOAT, MPI_SUM, root, comm_));
    }
  }
  void reduce_scatter_sum(float* data, const std::vector<int64_t>& counts) override {
    CollectiveScope open;  // the buffers are backend memory
    CollectiveWatchdog::Guard guard(*watchdog_, "MPI_Reduce_scatter");
    const auto ints = int_counts(counts);
    const int64_t off = segment_offset(counts, rank_, size_);
    // In place, MPI leaves this rank's result at the start of the buffer: moved to its segment.
    MPI_CHECK(MPI_Reduce_scatter(MPI_IN_PLACE, data, ints.data(), MPI_FLOAT, MPI_SUM, comm_));
    if (off > 0) std::memmove(data + off, data, sizeof(float) * counts[rank_]);
  }
  void allgather_segments(float* data, const std::vector<int64_t>& counts) override {
    CollectiveScope open;  // the buffers are backend memory
    CollectiveWatchdog::Guard guard(*watchdog_, "MPI_Allgatherv");
    const auto ints = int_counts(counts);
    std::vector<int> displs(size_);
    for (int r = 0; r < size_; ++r) displs[r] = static_cast<int>(segment_offset(counts, r, size_));
    MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, ints.data(), displs.data(), MPI_FLOAT, comm_));
  }
  void broadcast(void* data, int64_t bytes, int root) override {
    CollectiveScope open;  // the buffers are backend memory
    CollectiveWatchdog::Guard guard(*watchdog_, "MPI_Bcast");
    char* p = static_cast<char*>(data);
    for (int64_t off = 0; off < bytes; off += kMaxCount)
      MPI_CHECK(MPI_Bcast(p + off, static_cast<int>(std::min(kMaxCount, bytes - off)), MPI_BYTE, root, comm_));
  }
  std::vector<std::string> allgather(const std::string& mine) override {
    CollectiveWatchdog::Guard guard(*watchdog_, "MPI_Allgather");
    int len = static_cast<int>(mine.size());
    std::vector<int> lens(size_), displs(size_);
    MPI_CHECK(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm_));
    int total = 0;
    for (int r = 0; r < size_; ++r) {
      displs[r] = total;
      total += lens[r];
    }
    std::string all(total, '\0');
    MPI_CHECK(MPI_Allgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, comm_));
    std::vector<std::string> out;
    for (int r = 0; r < size_; ++r) out.push_back(all.substr(displs[r], lens[r]));
    return out;
  }
  void barrier() override {
    CollectiveWatchdog::Guard guard(*watchdog_, "MPI_Barrier");
    MPI_CHECK(MPI_Barrier(comm_));
  }
  void allow_longer_waits(double extra_s, const char* why) override { watchdog_->allow_longer(extra_s, why); }
  std::unique_ptr<Communicator> subgroup(const std::vector<int>& ranks) override {
    bool member = false;
    for (int r : ranks) member |= r == rank_;
    MPI_Comm sub = MPI_COMM_NULL;
    CollectiveWatchdog::Guard guard(*watchdog_, "MPI_Comm_split");
    MPI_CHECK(MPI_Comm_split(comm_, member ? 0 : MPI_UNDEFINED, rank_, &sub));
    if (!member) return nullptr;
    return std::make_unique<MpiCommunicator>(sub, watchdog_);
  }
  CommKind kind() const override { return CommKind::mpi; }

 private:
  /// MPI's int counts of a segment list whose total fits an int (callers cut larger buffers).
  std::vector<int> int_counts(const std::vector<int64_t>& counts) const {
    SUBDP_ASSERT(static_cast<int>(counts.size()) == size_);
    SUBDP_CHECK(segment_offset(counts, size_, size_) < kMaxCount,
                "reduce-scatter / all-gather of {} values: at most "
                "{} per call (cut the buffer: parallel.bucket_mb)",
                segment_offset(counts, size_, size_), kMaxCount);
    return std::vector<int>(counts.begin(), counts.end());
  }
  MPI_Comm comm_;
  std::shared_ptr<CollectiveWatchdog> watchdog_;
  int rank_ = 0, size_ = 1;
};

}  // namespace

bool launched_by_mpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_PROCID"})
    if (std::getenv(var)) return true;
  return false;
}

LauncherLayout launcher_layout() {
  // Pairs of (size, rank) variables: Open MPI, PMI (MPICH, Intel MPI), Slurm.
  const std::pair<const char*, const char*> vars[] = {
      {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"}, {"PMI_SIZE", "PMI_RANK"}, {"SLURM_NTASKS", "SLURM_PROCID"}};
  for (const auto& [size, rank] : vars) {
    const char* s = std::getenv(size);
    const char* r = std::getenv(rank);
    if (s && r && std::atoi(s) >= 1 && std::atoi(r) >= 0 && std::atoi(r) < std::atoi(s))
      return {std::atoi(s), std::atoi(r)};
  }
  return {};
}

std::unique_ptr<Communicator> make_mpi_world(double collective_timeout_s) {
  // Made before MPI_Init, which waits for every rank of the job: a rank stuck or lost during
  // start-up would otherwise hang the others there. The launcher's rank names it.
  auto watchdog = std::make_shared<CollectiveWatchdog>(collective_timeout_s, launcher_layout().rank);
  int initialized = 0;
  MPI_CHECK(MPI_Initialized(&initialized));
  if (!initialized) {
    int provided = 0;
    // SERIALIZED: parallel.overlap's communication thread makes MPI calls too, never at the
    // same time as the main thread (engine/parallel/overlap.h).
    {
      CollectiveWatchdog::Guard guard(*watchdog, "MPI_Init");
      MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
    }
    SUBDP_CHECK(provided >= MPI_THREAD_SERIALIZED,
                "this MPI library gives thread level {} (MPI_THREAD_SERIALIZED = {} needed)", provided,
                static_cast<int>(MPI_THREAD_SERIALIZED));
  }
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, std::move(watchdog));
}

void finalize_mpi() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();
}

void abort_mpi(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
}

}  // namespace subdp
