// Under mpirun: reduce_scatter_sum and allgather_segments on the world and on a subgroup,
// with uneven (and zero) segment counts, against allreduce_sum of the same data. Exits 1
// with a message on the first mismatch. Run by mpi.test_collectives.
#include <cstdio>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/core/error.h"

namespace {

using subdp::Communicator;

/// Deterministic value of element i on rank r (small integers: sums are exact in float32).
float value(int r, int64_t i) { return static_cast<float>((r + 1) * 7 + i % 13); }

bool check(Communicator& comm, const char* what) {
  const int rank = comm.rank(), size = comm.size();
  std::vector<int64_t> counts(size);
  for (int r = 0; r < size; ++r) counts[r] = r == 1 ? 0 : 3 + 5 * r;  // rank 1's segment is empty
  const int64_t total = subdp::segment_offset(counts, size, size);
  std::vector<float> data(total), reference(total);
  for (int64_t i = 0; i < total; ++i) data[i] = reference[i] = value(rank, i);
  comm.allreduce_sum(reference.data(), total);
  comm.reduce_scatter_sum(data.data(), counts);
  const int64_t off = subdp::segment_offset(counts, rank, size);
  for (int64_t i = off; i < off + counts[rank]; ++i)
    if (data[i] != reference[i]) {
      std::printf("FAIL %s rank %d: reduce_scatter_sum element %lld = %g, all-reduce gives %g\n", what, rank,
                  static_cast<long long>(i), data[i], reference[i]);
      return false;
    }
  // All-gather: every segment from its rank (each rank's segment holds rank-specific values).
  for (int64_t i = 0; i < total; ++i) data[i] = i >= off && i < off + counts[rank] ? value(rank, i) : -1.f;
  comm.allgather_segments(data.data(), counts);
  for (int r = 0; r < size; ++r)
    for (int64_t i = subdp::segment_offset(counts, r, size); i < subdp::segment_offset(counts, r + 1, size); ++i)
      if (data[i] != value(r, i)) {
        std::printf("FAIL %s rank %d: allgather_segments element %lld = %g, rank %d holds %g\n", what, rank,
                    static_cast<long long>(i), data[i], r, value(r, i));
        return false;
      }
  return true;
}

}  // namespace

int main() {
  auto world = subdp::make_mpi_world(60);
  bool ok = check(*world, "world");
  std::vector<int> odd;
  for (int r = 1; r < world->size(); r += 2) odd.push_back(r);
  odd.insert(odd.begin(), 0);  // {0, 1, 3, ...}: a subgroup of uneven membership
  auto sub = world->subgroup(odd);
  if (sub) ok = check(*sub, "subgroup") && ok;
  const int rank = world->rank();
  world.reset();
  sub.reset();
  subdp::finalize_mpi();
  if (ok && rank == 0) std::printf("ok: reduce_scatter_sum and allgather_segments match the all-reduce\n");
  return ok ? 0 : 1;
}
