// The stand-in communicators' reduce-scatter and all-gather of segments: local (world 1)
// leaves data as it is; simulated (--simulate-rank, planner dry runs) acts as if every rank
// held this rank's values. (MPI: mpi.test_collectives.)
#include <gtest/gtest.h>

#include <vector>

#include "engine/comm/communicator.h"
#include "engine/core/error.h"

namespace subdp {
namespace {

TEST(Collectives, LocalAndSimulatedSegments) {
  auto local = make_local_communicator();
  std::vector<float> x = {1, 2, 3};
  local->reduce_scatter_sum(x.data(), {3});
  local->allgather_segments(x.data(), {3});
  EXPECT_EQ(x, (std::vector<float>{1, 2, 3}));

  auto sim = make_simulated_communicator(1, 3);  // rank 1 of 3: segment [2, 5)
  std::vector<float> y = {1, 1, 2, 2, 2, 9};
  sim->reduce_scatter_sum(y.data(), {2, 3, 1});
  EXPECT_EQ(std::vector<float>(y.begin() + 2, y.begin() + 5), (std::vector<float>{6, 6, 6}));
  EXPECT_EQ(segment_offset({2, 3, 1}, 2, 3), 5);
  EXPECT_THROW(segment_offset({2, 3}, 1, 3), Error);  // one count per rank
}

}  // namespace
}  // namespace subdp
