// Lazy streams with a seeded interleaving (streams.h).
#include "kernels/emu/streams.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "kernels/emu/errors.h"
#include "kernels/emu/memory.h"
#include "kernels/emu/seed.h"

namespace subdp::emu {

namespace {

struct Streams {
  Stream legacy;
  std::vector<std::unique_ptr<Stream>> all;  // never freed: events may outlive their stream
  std::mt19937_64 order{seed() ^ 0x5eedu};
  Streams() { legacy.legacy = true; }
};

Streams& streams() {
  static Streams& s = *new Streams;  // never destroyed: the run's backend, a static, is torn down after it
  return s;
}

bool pending(const Stream& s) { return !s.queue.empty(); }

bool runnable(const Stream& s) {
  if (s.queue.empty()) return false;
  const Operation& op = s.queue.front();
  return op.wait_on == nullptr || op.wait_on->completed >= op.wait_until;
}

/// Runs the head of s: work is skipped once a sticky error has poisoned the device.
void run_head(Stream& s) {
  Operation op = std::move(s.queue.front());
  s.queue.pop_front();
  if (op.run && sticky_error() == cudaSuccess) op.run();
  ++s.completed;
}

/// One step: a runnable stream drawn at random runs its head, a late head only when no other
/// can run; false when none can.
bool step() {
  Streams& all = streams();
  std::vector<Stream*> ready, late;
  auto consider = [&](Stream& s) {
    if (runnable(s)) (s.queue.front().late ? late : ready).push_back(&s);
  };
  consider(all.legacy);
  for (auto& s : all.all) consider(*s);
  if (ready.empty()) ready.swap(late);
  if (ready.empty()) return false;
  run_head(*ready[all.order() % ready.size()]);
  return true;
}

template <class Done>
void run_while_not(Done done) {
  DeviceOpen open;  // the queued work may touch device memory; the host cannot meanwhile
  while (!done()) {
    if (!step()) {
      // Waits only name earlier positions, so this means a wait on a position never queued.
      std::fprintf(stderr, "subdp CUDA emulator: queued work waits for work never queued\n");
      std::abort();
    }
  }
}

}  // namespace

Stream* stream_of(cudaStream_t s) {
  if (s == nullptr) return &streams().legacy;
  return s->destroyed ? nullptr : s;
}

Stream* create_stream(unsigned flags) {
  auto s = std::make_unique<Stream>();
  s->flags = flags;
  Stream* raw = s.get();
  streams().all.push_back(std::move(s));
  return raw;
}

void destroy_stream(Stream* s) {
  run_until(s, s->enqueued);
  s->destroyed = true;
}

uint64_t enqueue_late(Stream* s, std::string name, std::function<void()> run) {
  const uint64_t at = enqueue(s, std::move(name), std::move(run));
  s->queue.back().late = true;
  return at;
}

uint64_t enqueue(Stream* s, std::string name, std::function<void()> run) {
  Streams& all = streams();
  // The legacy default stream waits for every blocking stream's queued work, and every
  // blocking stream waits for the legacy stream's: CUDA's implicit synchronisation.
  if (s->legacy) {
    for (auto& other : all.all)
      if (!other->destroyed && !(other->flags & cudaStreamNonBlocking) && pending(*other))
        enqueue_wait(s, other.get(), other->enqueued);
  } else if (!(s->flags & cudaStreamNonBlocking) && pending(all.legacy)) {
    enqueue_wait(s, &all.legacy, all.legacy.enqueued);
  }
  s->queue.push_back(Operation{std::move(name), std::move(run), nullptr, 0});
  return ++s->enqueued;
}

void enqueue_wait(Stream* s, Stream* on, uint64_t position) {
  if (on == s || on->completed >= position) return;
  s->queue.push_back(Operation{"wait", {}, on, position});
  ++s->enqueued;
}

void run_until(Stream* s, uint64_t position) {
  run_while_not([&] { return s->completed >= position; });
}

void run_all() {
  Streams& all = streams();
  run_while_not([&] {
    if (pending(all.legacy)) return false;
    for (auto& s : all.all)
      if (pending(*s)) return false;
    return true;
  });
}

}  // namespace subdp::emu
