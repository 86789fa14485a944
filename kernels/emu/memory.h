// Memory of the emulated device. Device memory is one reserved address range kept PROT_NONE
// except while the emulator runs queued work (a kernel, a copy, a memset, a cuBLAS call), so
// host code that reads or writes it directly faults at its line, as a GPU's memory is out of
// the host's reach. Pinned host memory (cudaMallocHost) is ordinary memory the emulator
// registers, so each call can check that a pointer lies where the call expects it.
#pragma once
#include <cstddef>
#include <string>

namespace subdp::emu {

enum class Region { null, device, pinned, pageable };

/// Where [p, p + bytes) lies: inside one live cudaMalloc block (device), inside one
/// cudaMallocHost block (pinned), null, or anywhere else (pageable host memory, or device
/// memory that was freed or overrun: reported as pageable).
Region region_of(const void* p, size_t bytes);
/// "device memory", "pinned host memory", "a null pointer", "pageable host memory (...)".
std::string describe_region(const void* p, size_t bytes);

/// cudaMalloc: a 256-byte aligned block filled with 0xff bytes (NaN floats) when small
/// enough to fill cheaply, so reading memory nothing wrote gives NaN. Null when full.
void* device_allocate(size_t bytes);
/// cudaFree: false when p is not the start of a live block.
bool device_free(void* p);
size_t device_capacity();
size_t device_used();
/// True when p lies in the reserved device range (live or not).
bool in_device_range(const void* p);

void* pinned_allocate(size_t bytes);
bool pinned_free(void* p);

/// Opens device memory to the emulator's own code (nests); close() fences it again.
void open_device();
void close_device();

/// RAII open_device / close_device.
struct DeviceOpen {
  DeviceOpen() { open_device(); }
  ~DeviceOpen() { close_device(); }
  DeviceOpen(const DeviceOpen&) = delete;
  DeviceOpen& operator=(const DeviceOpen&) = delete;
};

}  // namespace subdp::emu
