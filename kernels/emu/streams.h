// Streams and events of the emulated device. Every stream is a queue that runs lazily: work
// runs only when the host waits for it (a stream or device synchronize, an event synchronize,
// a copy to pageable memory, cudaFree). Then all queued work runs, one operation at a time,
// streams interleaved in an order drawn from SUBDP_EMU_SEED and constrained only by the
// stream order, cudaStreamWaitEvent and the legacy default stream's implicit barriers; so a
// missing synchronisation or a cross-stream race reads a stale value in a test. A `late`
// operation (where a collective's result lands in device memory) runs only when no other
// operation can: work not ordered after it reads the old contents, always, as it can on a GPU.
#pragma once
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "kernels/emu/types.h"

namespace subdp::emu {

struct Operation {
  std::string name;           // for error messages: "kernel fill_kernel", "cudaMemcpyAsync"
  std::function<void()> run;  // empty for a wait
  Stream* wait_on = nullptr;  // a wait: runnable once wait_on->completed >= wait_until
  uint64_t wait_until = 0;
  bool late = false;  // runs only when no operation that is not late can
};

struct Stream {
  unsigned flags = cudaStreamDefault;
  bool legacy = false;
  bool destroyed = false;
  std::deque<Operation> queue;
  uint64_t enqueued = 0;               // operations ever queued (waits included)
  std::atomic<uint64_t> completed{0};  // operations finished, in queue order (other threads may read it)
};

struct Event {
  Stream* stream = nullptr;  // null: never recorded (complete)
  uint64_t position = 0;     // complete once stream->completed >= position
  bool timing = true;        // false: created with cudaEventDisableTiming
  // Timing events: the host clock (seconds) when the stream reached the latest record, NaN
  // until then; a record of its own, so a later record or the event's destruction leaves the
  // queued stamp something to write.
  std::shared_ptr<double> stamp;
};

/// The stream object of a handle (null: the legacy default stream); null when destroyed.
Stream* stream_of(cudaStream_t s);
Stream* create_stream(unsigned flags);
/// Runs the stream's work, then retires it (its events stay valid).
void destroy_stream(Stream* s);
/// Queues `run` on s, after the legacy stream's implicit barriers; returns its position
/// (the stream's `completed` count once it has run).
uint64_t enqueue(Stream* s, std::string name, std::function<void()> run);
/// enqueue, as a late operation (see the file comment).
uint64_t enqueue_late(Stream* s, std::string name, std::function<void()> run);
/// Queues a wait on s for `on` reaching `position`.
void enqueue_wait(Stream* s, Stream* on, uint64_t position);
/// Runs queued work (all streams, seeded interleaving) until s has completed `position`.
void run_until(Stream* s, uint64_t position);
/// Runs everything queued on every stream.
void run_all();

}  // namespace subdp::emu
