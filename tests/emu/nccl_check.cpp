// The emulated NCCL's collectives against their definitions, on every rank of mpirun (tests/emu
// CMake: gpu.emu.nccl, 3 ranks): all-reduce, reduce, broadcast, reduce-scatter and all-gather,
// in place and out of place as NCCL allows, on a world communicator and on ncclCommSplit
// children; a result read on another stream only once ordered after the collective; then a
// collective issued differently on one rank must be an error on every rank, not a hang.
// Each rank takes the device of its MPI rank, as a real program must (NCCL refuses two ranks
// of one host on one GPU). With the argument "duplicate", every rank stays on device 0 and
// ncclCommInitRank must refuse, as NCCL does ("Duplicate GPU detected").
// Prints "ok" lines; exits 1 on the first wrong value.
#define OMPI_SKIP_MPICXX 1
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

int g_rank = 0;

void expect(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "FAIL on rank %d: %s\n", g_rank, what.c_str());
  std::exit(1);
}

void check_mpi(int status, const char* call) { expect(status == MPI_SUCCESS, std::string(call) + " failed"); }

void check(ncclResult_t r, const char* call) {
  expect(r == ncclSuccess, std::string(call) + ": " + ncclGetErrorString(r) + " (" + ncclGetLastError(nullptr) + ")");
}

/// A device array of n floats holding `values`, and its contents read back.
struct Buffer {
  float* d = nullptr;
  size_t n;
  explicit Buffer(const std::vector<float>& values) : n(values.size()) {
    cudaMalloc(reinterpret_cast<void**>(&d), n * sizeof(float));
    cudaMemcpy(d, values.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  }
  ~Buffer() { cudaFree(d); }
  std::vector<float> read() const {
    std::vector<float> h(n);
    cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost);
    return h;
  }
};

/// values[i] = 100 * rank + i: every rank's contribution is distinct.
std::vector<float> own(int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 100.f * rank + static_cast<float>(i);
  return v;
}

void collectives(ncclComm_t comm, const std::string& name) {
  int rank = 0, size = 0;
  check(ncclCommUserRank(comm, &rank), "ncclCommUserRank");
  check(ncclCommCount(comm, &size), "ncclCommCount");
  const size_t n = 6;
  float rank_sum = 0;
  for (int r = 0; r < size; ++r) rank_sum += 100.f * r;
  // All-reduce in place: sum of every rank's own values.
  Buffer a(own(rank, n));
  check(ncclAllReduce(a.d, a.d, n, ncclFloat, ncclSum, comm, nullptr), "ncclAllReduce");
  const auto sum = a.read();
  for (size_t i = 0; i < n; ++i) expect(sum[i] == rank_sum + size * static_cast<float>(i), name + " all-reduce");
  // Reduce to the last rank, out of place.
  Buffer r_in(own(rank, n)), r_out(std::vector<float>(n, -1.f));
  check(ncclReduce(r_in.d, r_out.d, n, ncclFloat, ncclMax, size - 1, comm, nullptr), "ncclReduce");
  if (rank == size - 1)
    for (size_t i = 0; i < n; ++i) expect(r_out.read()[i] == own(size - 1, n)[i], name + " reduce (max)");
  // Broadcast from rank 0.
  Buffer b(own(rank, n));
  check(ncclBroadcast(b.d, b.d, n, ncclFloat, 0, comm, nullptr), "ncclBroadcast");
  expect(b.read() == own(0, n), name + " broadcast");
  // Reduce-scatter in place (recvbuff = sendbuff + rank * count) and all-gather in place.
  const size_t count = 2;
  Buffer rs(own(rank, count * size));
  check(ncclReduceScatter(rs.d, rs.d + rank * count, count, ncclFloat, ncclSum, comm, nullptr), "ncclReduceScatter");
  const auto scattered = rs.read();
  for (size_t i = 0; i < count; ++i)
    expect(scattered[rank * count + i] == rank_sum + size * static_cast<float>(rank * count + i),
           name + " reduce-scatter in place");
  check(ncclAllGather(rs.d + rank * count, rs.d, count, ncclFloat, comm, nullptr), "ncclAllGather");
  const auto gathered = rs.read();
  for (size_t i = 0; i < count * size; ++i)
    expect(gathered[i] == rank_sum + size * static_cast<float>(i), name + " all-gather in place");
  if (rank == 0)
    std::printf("ok: %s (%d ranks): all-reduce, reduce, broadcast, reduce-scatter, all-gather\n", name.c_str(), size);
}

/// A copy on another stream reads an all-reduce's result only when ordered after it by an
/// event: without the wait it reads the values from before (the emulator lands a collective's
/// result as late as a GPU may).
void stream_order(ncclComm_t comm) {
  int rank = 0, size = 0;
  check(ncclCommUserRank(comm, &rank), "ncclCommUserRank");
  check(ncclCommCount(comm, &size), "ncclCommCount");
  const size_t n = 4;
  cudaStream_t comm_stream = nullptr, compute = nullptr;
  cudaEvent_t done = nullptr;
  cudaStreamCreateWithFlags(&comm_stream, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking);
  cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
  Buffer a(own(rank, n)), unordered(std::vector<float>(n, 0.f)), ordered(std::vector<float>(n, 0.f));
  check(ncclAllReduce(a.d, a.d, n, ncclFloat, ncclSum, comm, comm_stream), "ncclAllReduce");
  cudaMemcpyAsync(unordered.d, a.d, n * sizeof(float), cudaMemcpyDeviceToDevice, compute);
  cudaEventRecord(done, comm_stream);
  cudaStreamWaitEvent(compute, done, 0);
  cudaMemcpyAsync(ordered.d, a.d, n * sizeof(float), cudaMemcpyDeviceToDevice, compute);
  cudaStreamSynchronize(compute);
  expect(unordered.read() == own(rank, n), "a copy not ordered after the all-reduce read its result");
  float rank_sum = 0;
  for (int r = 0; r < size; ++r) rank_sum += 100.f * r;
  const auto sum = ordered.read();
  for (size_t i = 0; i < n; ++i) expect(sum[i] == rank_sum + size * static_cast<float>(i), "ordered copy");
  cudaEventDestroy(done);
  cudaStreamDestroy(compute);
  cudaStreamDestroy(comm_stream);
  if (rank == 0) std::printf("ok: an all-reduce's result is read only by work ordered after it\n");
}

}  // namespace

int main(int argc, char** argv) {
  check_mpi(MPI_Init(&argc, &argv), "MPI_Init");
  int size = 0;
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &g_rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
  ncclUniqueId id{};
  if (g_rank == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  check_mpi(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast");
  ncclComm_t world = nullptr;
  if (argc > 1 && std::string(argv[1]) == "duplicate") {
    const ncclResult_t r = ncclCommInitRank(&world, size, id, g_rank);
    const std::string why = ncclGetLastError(nullptr);
    expect(r == ncclInvalidUsage, "ranks sharing device 0 were not refused");
    expect(why.find("Duplicate GPU detected: rank 0 and rank 1 both on") != std::string::npos,
           "the refusal does not say why: " + why);
    if (g_rank == 0) std::printf("ok: ranks of one host on one GPU are refused\n");
    check_mpi(MPI_Finalize(), "MPI_Finalize");
    return 0;
  }
  expect(cudaSetDevice(g_rank) == cudaSuccess, "cudaSetDevice to the rank's device");
  check(ncclCommInitRank(&world, size, id, g_rank), "ncclCommInitRank");
  collectives(world, "world");
  stream_order(world);
  // Even ranks form one child, odd ranks another; keys reverse the order within each.
  ncclComm_t child = nullptr;
  check(ncclCommSplit(world, g_rank % 2, size - g_rank, &child, nullptr), "ncclCommSplit");
  expect(child != nullptr, "ncclCommSplit gave no communicator");
  collectives(child, g_rank % 2 ? "odd ranks" : "even ranks");
  // Rank 0 broadcasts from another root than the others: an error on every rank, not a hang.
  Buffer x(own(g_rank, 4));
  const ncclResult_t r = ncclBroadcast(x.d, x.d, 4, ncclFloat, g_rank == 0 ? 1 : 0, world, nullptr);
  expect(r != ncclSuccess, "a broadcast from different roots was not refused");
  expect(std::string(ncclGetLastError(nullptr))
                 .find("another rank of the communicator issued a different "
                       "collective") != std::string::npos,
         std::string("the refusal does not say why: ") + ncclGetLastError(nullptr));
  if (g_rank == 0) std::printf("ok: a collective issued differently on one rank is refused on every rank\n");
  ncclCommAbort(child);
  ncclCommAbort(world);
  check_mpi(MPI_Finalize(), "MPI_Finalize");
  return 0;
}
