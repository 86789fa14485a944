// Simulated communicator: rank w of a W-rank layout alone in one process (--simulate-rank,
// and the planner's dry runs). Collectives behave as if every other rank contributed the
// same values, so averaging returns the local values and every buffer has its real size.
#include <cstring>

#include "engine/core/backend.h"
#include "engine/comm/communicator.h"
#include "engine/core/error.h"

namespace subdp {

namespace {

class SimulatedCommunicator : public Communicator {
 public:
  SimulatedCommunicator(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allreduce_sum(float* data, int64_t n) override {
    CollectiveScope open;  // the buffers are backend memory
    scale(data, n);
  }
  void allreduce_sum(double* data, int64_t n) override { scale(data, n); }
  void allreduce_max(double*, int64_t) override {}
  void reduce_sum(const float* data, float* recv, int64_t n, int root) override {
    CollectiveScope open;  // the buffers are backend memory
    if (rank_ == root && recv != data) std::memcpy(recv, data, sizeof(float) * n);
  }
  void reduce_scatter_sum(float* data, const std::vector<int64_t>& counts) override {
    CollectiveScope open;  // the buffers are backend memory
    // As if every rank held these values: this rank's segment becomes size x itself.
    const int64_t off = segment_offset(counts, rank_, size_), n = counts[rank_];
    scale(data + off, n);
  }
  void allgather_segments(float*, const std::vector<int64_t>& counts) override {
    segment_offset(counts, rank_, size_);  // other segments stay as they are; checks the counts
  }
  void broadcast(void*, int64_t, int) override {}
  std::vector<std::string> allgather(const std::string& mine) override { return std::vector<std::string>(size_, mine); }
  void barrier() override {}
  std::unique_ptr<Communicator> subgroup(const std::vector<int>& ranks) override {
    for (size_t i = 0; i < ranks.size(); ++i)
      if (ranks[i] == rank_)
        return std::make_unique<SimulatedCommunicator>(static_cast<int>(i), static_cast<int>(ranks.size()));
    return nullptr;
  }
  CommKind kind() const override { return CommKind::simulated; }

 private:
  // Float buffers are backend memory (gradient buckets): scaled by the backend, on the device
  // where there is one. Doubles are host values (metrics).
  void scale(float* data, int64_t n) { ::subdp::backend().scale(data, static_cast<float>(size_), n); }
  void scale(double* data, int64_t n) {
    for (int64_t i = 0; i < n; ++i) data[i] *= static_cast<double>(size_);
  }
  int rank_, size_;
};

}  // namespace

std::unique_ptr<Communicator> make_simulated_communicator(int rank, int size) {
  SUBDP_CHECK(size >= 1 && rank >= 0 && rank < size, "--simulate-rank {}/{}: expected 0 <= w < W", rank, size);
  return std::make_unique<SimulatedCommunicator>(rank, size);
}

}  // namespace subdp
