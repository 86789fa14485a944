// Local communicator: world size 1, collectives are the identity.
#include <cstring>

#include "engine/core/backend.h"
#include "engine/comm/communicator.h"
#include "engine/core/error.h"

namespace subdp {

namespace {

class LocalCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void allreduce_sum(float*, int64_t) override {}
  void allreduce_sum(double*, int64_t) override {}
  void allreduce_max(double*, int64_t) override {}
  void reduce_sum(const float* data, float* recv, int64_t n, int) override {
    CollectiveScope open;  // the buffers are backend memory
    if (recv != data) std::memcpy(recv, data, sizeof(float) * n);
  }
  void reduce_scatter_sum(float*, const std::vector<int64_t>& counts) override {
    segment_offset(counts, 1, 1);  // checks that there is one count, this rank's
  }
  void allgather_segments(float*, const std::vector<int64_t>& counts) override { segment_offset(counts, 1, 1); }
  void broadcast(void*, int64_t, int) override {}
  std::vector<std::string> allgather(const std::string& mine) override { return {mine}; }
  void barrier() override {}
  std::unique_ptr<Communicator> subgroup(const std::vector<int>&) override {
    return std::make_unique<LocalCommunicator>();
  }
  CommKind kind() const override { return CommKind::local; }
};

}  // namespace

std::unique_ptr<Communicator> make_local_communicator() { return std::make_unique<LocalCommunicator>(); }

int64_t segment_offset(const std::vector<int64_t>& counts, int r, int size) {
  SUBDP_ASSERT(static_cast<int>(counts.size()) == size && r >= 0 && r <= size);
  int64_t off = 0;
  for (int i = 0; i < r; ++i) off += counts[i];
  return off;
}

}  // namespace subdp
