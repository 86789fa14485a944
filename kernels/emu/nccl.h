// NCCL of the emulated device: the subset kernels/cuda/nccl_comm.cpp calls, with the library's
// types and argument rules, carried over MPI so that several ranks under mpirun run NCCL on one
// CPU. Each communicator is an MPI communicator (ncclCommInitRank splits MPI_COMM_WORLD by the
// given rank, ncclCommSplit splits its parent); a collective checks that its buffers are
// device memory of their full extent, then is queued on its stream like a kernel and runs in
// stream order: whatever the stream has not been ordered after (an event from the compute
// stream) may not have run yet, and the collective reads stale data, as on a GPU. The
// emulator runs the stream up to the collective when it is queued (the host cannot run
// another rank's part of it later, as a GPU would), and checks first that every rank of the
// communicator issued the same collective (kind, count, type, op, root): a mismatch is a
// sticky error on every rank naming its own call, where NCCL would hang or mix buffers (a
// mismatch across two communicators still hangs, as it would on a GPU).
#pragma once
#include <cstddef>

#include "kernels/emu/types.h"

struct ncclComm;
using ncclComm_t = ncclComm*;

constexpr int NCCL_UNIQUE_ID_BYTES = 128;
struct ncclUniqueId {
  char internal[NCCL_UNIQUE_ID_BYTES];
};

enum ncclResult_t {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
};

enum ncclDataType_t {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
};

enum ncclRedOp_t { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 };

constexpr int NCCL_SPLIT_NOCOLOR = -1;
struct ncclConfig_t;  // only null configs are accepted

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
/// Frees the communicator without waiting for other ranks (an error path).
ncclResult_t ncclCommAbort(ncclComm_t comm);

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();

const char* ncclGetErrorString(ncclResult_t result);
/// The detail of the latest failed call ("ncclAllReduce: recvbuff points to pageable host ...").
const char* ncclGetLastError(ncclComm_t comm);
