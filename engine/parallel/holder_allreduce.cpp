// Holder all-reduce of one bucket.
#include "engine/parallel/holder_allreduce.h"

namespace subdp {

void HolderAllReduce::reduce(Bucket& b) {
  if (!set_.reduces(b)) return;
  Communicator& comm = set_.comm_of(b);
  set_.through_buffer(b.runs, set_.chunk_cap(), 1.f / static_cast<float>(b.ranks.size()), [&](float* buf, int64_t n) {
    comm.allreduce_sum(buf, n);
    set_.count_bytes(n * static_cast<int64_t>(sizeof(float)));
  });
}

}  // namespace subdp
