// The emulated NCCL (nccl.h): communicators as MPI communicators, collectives queued on their
// stream and run there over MPI. A communicator of one rank needs no MPI (a world of one, or
// the tests without mpirun): its collectives are copies.
#define OMPI_SKIP_MPICXX 1
#include "kernels/emu/nccl.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/emu/errors.h"
#include "kernels/emu/memory.h"
#include "kernels/emu/runtime.h"
#include "kernels/emu/streams.h"

struct ncclComm {
  MPI_Comm mpi = MPI_COMM_NULL;  // null for a communicator of one rank without MPI
  int rank = 0;
  int size = 1;
};

using namespace subdp::emu;

namespace {

std::string g_last_error;
int g_group_depth = 0;

/// A failed MPI call under the emulated NCCL: a sticky device error naming the call, file and
/// line (MPI's default handler usually aborts first; a communicator set to return errors lands here).
bool mpi_failed(int status, const char* call, const char* file, int line) {
  if (status == MPI_SUCCESS) return false;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(status, text, &len);
  set_error(cudaErrorLaunchFailure,
            std::string("emulated NCCL: ") + call + " at " + file + ":" + std::to_string(line) + ": " +
                std::string(text, static_cast<size_t>(len)),
            true);
  return true;
}
#define EMU_MPI_CHECK(call) mpi_failed((call), #call, __FILE__, __LINE__)

ncclResult_t fail(ncclResult_t code, const std::string& detail) {
  g_last_error = detail;
  return code;
}

bool mpi_ready() {
  int initialized = 0, finalized = 0;
  if (MPI_Initialized(&initialized) != MPI_SUCCESS || MPI_Finalized(&finalized) != MPI_SUCCESS) return false;
  return initialized && !finalized;
}

size_t type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    default: return 8;
  }
}

/// The MPI type of t; MPI_DATATYPE_NULL for the 16-bit floats, which MPI cannot reduce.
MPI_Datatype mpi_type(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return MPI_INT8_T;
    case ncclUint8: return MPI_UINT8_T;
    case ncclInt32: return MPI_INT32_T;
    case ncclUint32: return MPI_UINT32_T;
    case ncclInt64: return MPI_INT64_T;
    case ncclUint64: return MPI_UINT64_T;
    case ncclFloat32: return MPI_FLOAT;
    case ncclFloat64: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;
  }
}

MPI_Op mpi_op(ncclRedOp_t op) {
  switch (op) {
    case ncclSum: return MPI_SUM;
    case ncclProd: return MPI_PROD;
    case ncclMax: return MPI_MAX;
    case ncclMin: return MPI_MIN;
    default: return MPI_OP_NULL;  // ncclAvg: not emulated
  }
}

/// Checks what NCCL's argument rules and a GPU would: a live communicator, a stream that
/// exists, a type and op MPI can carry, and buffers of their full extent in device memory.
struct Call {
  const char* name;
  ncclComm_t comm;
  cudaStream_t stream;
  std::string error;

  bool buffer(const char* arg, const void* p, size_t bytes) {
    if (!error.empty() || bytes == 0) return error.empty();
    if (region_of(p, bytes) != Region::device)
      error = std::string(name) + ": " + arg + " points to " + describe_region(p, bytes) + ", not device memory of " +
              std::to_string(bytes) + " bytes";
    return error.empty();
  }
  bool check(size_t count, ncclDataType_t type, ncclRedOp_t op, bool reduces, int root) {
    if (comm == nullptr)
      error = std::string(name) + ": null communicator";
    else if (stream_of(stream) == nullptr)
      error = std::string(name) + ": destroyed stream";
    else if (mpi_type(type) == MPI_DATATYPE_NULL)
      error = std::string(name) + ": the emulator carries no 16-bit floats";
    else if (reduces && mpi_op(op) == MPI_OP_NULL)
      error = std::string(name) + ": the emulator has no ncclAvg";
    else if (count > static_cast<size_t>(INT_MAX))
      error = std::string(name) + ": count beyond the emulator's int range";
    else if (root < 0 || root >= comm->size)
      error = std::string(name) + ": root " + std::to_string(root) + " of " + std::to_string(comm->size) + " ranks";
    return error.empty();
  }
};

/// Every rank of comm must issue the same collective: compares (kind, count, type, op, root)
/// across the ranks; a mismatch is reported instead of a hang.
bool same_collective_everywhere(const ncclComm& c, const char* name, size_t count, int type, int op, int root) {
  if (c.mpi == MPI_COMM_NULL) return true;
  const int64_t mine[5] = {static_cast<int64_t>(std::hash<std::string>()(name) & 0xffffffff),
                           static_cast<int64_t>(count), type, op, root};
  int64_t both[10], out[10];
  for (int i = 0; i < 5; ++i) both[i] = mine[i], both[5 + i] = -mine[i];
  if (EMU_MPI_CHECK(MPI_Allreduce(both, out, 10, MPI_INT64_T, MPI_MAX, c.mpi))) return false;
  for (int i = 0; i < 5; ++i)
    if (out[i] != -out[5 + i]) {
      set_error(cudaErrorLaunchFailure,
                std::string(name) + " (count " + std::to_string(count) + ", root " + std::to_string(root) +
                    ") on rank " + std::to_string(c.rank) +
                    ": another rank of the communicator issued a different collective "
                    "(NCCL needs the same collectives in the same order on every rank)",
                true);
      return false;
    }
  return true;
}

/// Queues `body` on the call's stream and runs the stream up to it; what body writes to the
/// `bytes` at `out` (the collective's results) lands there only in a late operation queued
/// after it, so that work not ordered after the collective reads the old contents.
template <class F>
ncclResult_t queue(const Call& call, size_t count, ncclDataType_t type, int op, int root, void* out, size_t bytes,
                   F body) {
  Stream* s = stream_of(call.stream);
  ncclComm c = *call.comm;
  const char* name = call.name;
  auto result = std::make_shared<std::vector<char>>();
  char* dst = static_cast<char*>(out);
  const uint64_t at = enqueue(s, std::string(name), [=] {
    if (!same_collective_everywhere(c, name, count, type, op, root)) return;
    std::vector<char> before(dst, dst + bytes);
    body(c);
    result->assign(dst, dst + bytes);
    std::copy(before.begin(), before.end(), dst);
  });
  enqueue_late(s, std::string(name) + " (its result landing)", [=] {
    if (!result->empty()) std::copy(result->begin(), result->end(), dst);
  });
  run_until(s, at);
  return sticky_error() == cudaSuccess ? ncclSuccess : fail(ncclUnhandledCudaError, error_string(sticky_error()));
}

/// NCCL's refusal of two ranks of one host on one GPU ("Duplicate GPU detected"): every rank
/// of c gathers each rank's host and current device's PCI bus id. Empty when each has its own.
std::string duplicate_gpu(const ncclComm& c) {
  constexpr int kEntry = 128;
  char mine[kEntry] = {0}, bus[32] = {0};
  int device = 0;
  cudaGetDevice(&device);
  cudaDeviceGetPCIBusId(bus, sizeof(bus), device);
  gethostname(mine, kEntry / 2);
  mine[kEntry / 2 - 1] = '\0';
  std::strncat(mine, " GPU ", kEntry - std::strlen(mine) - 1);
  std::strncat(mine, bus, kEntry - std::strlen(mine) - 1);
  std::vector<char> all(static_cast<size_t>(kEntry) * c.size);
  if (EMU_MPI_CHECK(MPI_Allgather(mine, kEntry, MPI_CHAR, all.data(), kEntry, MPI_CHAR, c.mpi)))
    return error_string(sticky_error());
  for (int r = 0; r < c.size; ++r)
    for (int q = 0; q < r; ++q)
      if (std::strncmp(&all[q * kEntry], &all[r * kEntry], kEntry) == 0)
        return "ncclCommInitRank: Duplicate GPU detected: rank " + std::to_string(q) + " and rank " +
               std::to_string(r) + " both on " + std::string(&all[r * kEntry]);
  return {};
}

}  // namespace

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (uniqueId == nullptr) return fail(ncclInvalidArgument, "ncclGetUniqueId: null id");
  std::memset(uniqueId->internal, 0, sizeof(uniqueId->internal));
  std::strcpy(uniqueId->internal, "subdp-emulated-nccl");
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  if (comm == nullptr || nranks < 1 || rank < 0 || rank >= nranks)
    return fail(ncclInvalidArgument,
                "ncclCommInitRank: rank " + std::to_string(rank) + " of " + std::to_string(nranks));
  if (std::strcmp(commId.internal, "subdp-emulated-nccl") != 0)
    return fail(ncclInvalidArgument, "ncclCommInitRank: the id did not come from ncclGetUniqueId (not broadcast?)");
  auto* c = new ncclComm;
  c->rank = rank;
  c->size = nranks;
  if (nranks > 1) {
    int world = 0;
    if (!mpi_ready() || MPI_Comm_size(MPI_COMM_WORLD, &world) != MPI_SUCCESS || world != nranks) {
      delete c;
      return fail(ncclInvalidUsage,
                  "ncclCommInitRank: the emulator carries NCCL over MPI and needs the MPI world "
                  "(" +
                      std::to_string(nranks) + " ranks) to be the communicator");
    }
    if (EMU_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, 0, rank, &c->mpi))) {
      delete c;
      return fail(ncclSystemError, error_string(sticky_error()));
    }
    if (const std::string why = duplicate_gpu(*c); !why.empty()) {
      MPI_Comm_free(&c->mpi);
      delete c;
      return fail(ncclInvalidUsage, why);
    }
  }
  *comm = c;
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  if (comm == nullptr || newcomm == nullptr) return fail(ncclInvalidArgument, "ncclCommSplit: null communicator");
  if (config != nullptr) return fail(ncclInvalidArgument, "ncclCommSplit: the emulator takes a null config only");
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR) return fail(ncclInvalidArgument, "ncclCommSplit: negative color");
  *newcomm = nullptr;
  if (comm->mpi == MPI_COMM_NULL) {  // one rank
    if (color != NCCL_SPLIT_NOCOLOR) *newcomm = new ncclComm;
    return ncclSuccess;
  }
  MPI_Comm sub = MPI_COMM_NULL;
  if (EMU_MPI_CHECK(MPI_Comm_split(comm->mpi, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &sub)))
    return fail(ncclSystemError, error_string(sticky_error()));
  if (sub == MPI_COMM_NULL) return ncclSuccess;
  auto* c = new ncclComm;
  c->mpi = sub;
  EMU_MPI_CHECK(MPI_Comm_rank(sub, &c->rank));
  EMU_MPI_CHECK(MPI_Comm_size(sub, &c->size));
  *newcomm = c;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr || rank == nullptr) return fail(ncclInvalidArgument, "ncclCommUserRank: null argument");
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr || count == nullptr) return fail(ncclInvalidArgument, "ncclCommCount: null argument");
  *count = comm->size;
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (comm == nullptr) return fail(ncclInvalidArgument, "ncclCommFinalize: null communicator");
  run_all();  // every collective queued on the communicator completes
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return fail(ncclInvalidArgument, "ncclCommDestroy: null communicator");
  if (comm->mpi != MPI_COMM_NULL && mpi_ready()) EMU_MPI_CHECK(MPI_Comm_free(&comm->mpi));
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return fail(ncclInvalidArgument, "ncclCommAbort: null communicator");
  delete comm;  // its MPI communicator is left to MPI_Finalize: freeing it may wait for other ranks
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  Call call{"ncclAllReduce", comm, stream, {}};
  const size_t bytes = count * type_bytes(datatype);
  if (!call.check(count, datatype, op, true, 0) || !call.buffer("sendbuff", sendbuff, bytes) ||
      !call.buffer("recvbuff", recvbuff, bytes))
    return fail(ncclInvalidArgument, call.error);
  return queue(call, count, datatype, op, 0, recvbuff, bytes, [=](const ncclComm& c) {
    if (sendbuff != recvbuff) std::memmove(recvbuff, sendbuff, bytes);
    if (c.mpi != MPI_COMM_NULL && count > 0)
      EMU_MPI_CHECK(
          MPI_Allreduce(MPI_IN_PLACE, recvbuff, static_cast<int>(count), mpi_type(datatype), mpi_op(op), c.mpi));
  });
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  Call call{"ncclReduce", comm, stream, {}};
  const size_t bytes = count * type_bytes(datatype);
  if (!call.check(count, datatype, op, true, root) || !call.buffer("sendbuff", sendbuff, bytes) ||
      (comm->rank == root && !call.buffer("recvbuff", recvbuff, bytes)))
    return fail(ncclInvalidArgument, call.error);
  return queue(call, count, datatype, op, root, comm->rank == root ? recvbuff : nullptr, comm->rank == root ? bytes : 0,
               [=](const ncclComm& c) {
                 const bool is_root = c.rank == root;
                 if (is_root && sendbuff != recvbuff) std::memmove(recvbuff, sendbuff, bytes);
                 if (c.mpi == MPI_COMM_NULL || count == 0) return;
                 EMU_MPI_CHECK(MPI_Reduce(is_root ? MPI_IN_PLACE : sendbuff, is_root ? recvbuff : nullptr,
                                          static_cast<int>(count), mpi_type(datatype), mpi_op(op), root, c.mpi));
               });
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  Call call{"ncclBroadcast", comm, stream, {}};
  const size_t bytes = count * type_bytes(datatype);
  if (!call.check(count, datatype, ncclSum, false, root) ||
      (comm->rank == root && !call.buffer("sendbuff", sendbuff, bytes)) || !call.buffer("recvbuff", recvbuff, bytes))
    return fail(ncclInvalidArgument, call.error);
  return queue(call, count, datatype, -1, root, recvbuff, bytes, [=](const ncclComm& c) {
    if (c.rank == root && sendbuff != recvbuff) std::memmove(recvbuff, sendbuff, bytes);
    if (c.mpi != MPI_COMM_NULL && count > 0)
      EMU_MPI_CHECK(MPI_Bcast(recvbuff, static_cast<int>(count), mpi_type(datatype), root, c.mpi));
  });
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  Call call{"ncclReduceScatter", comm, stream, {}};
  const size_t bytes = recvcount * type_bytes(datatype);
  if (!call.check(recvcount, datatype, op, true, 0) ||
      !call.buffer("sendbuff", sendbuff, bytes * static_cast<size_t>(comm->size)) ||
      !call.buffer("recvbuff", recvbuff, bytes))
    return fail(ncclInvalidArgument, call.error);
  return queue(call, recvcount, datatype, op, 0, recvbuff, bytes, [=](const ncclComm& c) {
    if (c.mpi == MPI_COMM_NULL) {
      if (sendbuff != recvbuff) std::memmove(recvbuff, sendbuff, bytes);
      return;
    }
    // NCCL allows recvbuff = sendbuff + rank * recvcount (in place); MPI forbids aliased
    // buffers, so the result goes through a temporary.
    if (recvcount == 0) return;
    std::vector<char> result(bytes);
    if (!EMU_MPI_CHECK(MPI_Reduce_scatter_block(sendbuff, result.data(), static_cast<int>(recvcount),
                                                mpi_type(datatype), mpi_op(op), c.mpi)))
      std::memcpy(recvbuff, result.data(), bytes);
  });
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  Call call{"ncclAllGather", comm, stream, {}};
  const size_t bytes = sendcount * type_bytes(datatype);
  if (!call.check(sendcount, datatype, ncclSum, false, 0) || !call.buffer("sendbuff", sendbuff, bytes) ||
      !call.buffer("recvbuff", recvbuff, bytes * static_cast<size_t>(comm->size)))
    return fail(ncclInvalidArgument, call.error);
  return queue(call, sendcount, datatype, -1, 0, recvbuff, bytes * static_cast<size_t>(comm->size),
               [=](const ncclComm& c) {
                 char* mine = static_cast<char*>(recvbuff) + bytes * static_cast<size_t>(c.rank);
                 if (sendbuff != mine) std::memmove(mine, sendbuff, bytes);
                 if (c.mpi != MPI_COMM_NULL && sendcount > 0)
                   EMU_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recvbuff,
                                               static_cast<int>(sendcount), mpi_type(datatype), c.mpi));
               });
}

// Collectives in a group run one after another in the order issued, the same on every rank,
// which is what a group guarantees NCCL's progress needs; the depth only checks nesting.
ncclResult_t ncclGroupStart() {
  ++g_group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (g_group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  --g_group_depth;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
  }
  return "unknown result code";
}

const char* ncclGetLastError(ncclComm_t) { return g_last_error.c_str(); }
