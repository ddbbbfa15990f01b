#pragma once
// The CUDA runtime as the rest of duet sees it: devices, memory, streams, events and CUDA graphs,
// behind plain C++ types. This header and the other kernels/ headers include no CUDA header, so
// that only kernels/ depends on the toolkit (docs/design.md); errors are duet::Error naming the call.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/bf16.hpp"

struct CUstream_st;
struct CUevent_st;
struct CUgraphExec_st;

namespace duet::kernels {

using Stream = CUstream_st*;
using bf16 = std::uint16_t;  // bfloat16 storage; kernels compute in float32

// True when a CUDA device can be used; otherwise `why` says what is missing (no driver, no device).
bool device_available(std::string* why = nullptr);

struct DeviceInfo {
  std::string name;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  std::int64_t total_bytes = 0;
  std::int64_t free_bytes = 0;
};
DeviceInfo device_info();

// Owned device memory (cudaMalloc / cudaFree).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  std::size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// Page-locked host memory: a copy from it to the device is a DMA that the host does not wait
// for, where a copy from pageable memory first goes through the driver's own staging on the host.
// The host must not rewrite it until the stream has passed the copy.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& o) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* get() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

void copy_to_device(void* dst, const void* src, std::size_t bytes, Stream stream);
void copy_to_host(void* dst, const void* src, std::size_t bytes, Stream stream);
void copy_device(void* dst, const void* src, std::size_t bytes, Stream stream);
void fill_zero(void* dst, std::size_t bytes, Stream stream);

class StreamHandle {
 public:
  StreamHandle();  // a non-blocking stream
  ~StreamHandle();
  StreamHandle(const StreamHandle&) = delete;
  StreamHandle& operator=(const StreamHandle&) = delete;
  Stream get() const { return s_; }
  void synchronize() const;

 private:
  Stream s_ = nullptr;
};

class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(Stream stream);
  void synchronize() const;
  // Milliseconds between two recorded events (cudaEventElapsedTime).
  static float elapsed_ms(const Event& start, const Event& end);

 private:
  CUevent_st* e_ = nullptr;
};

// A captured CUDA graph: begin_capture(stream), launch kernels on it, end_capture() -> Graph.
void begin_capture(Stream stream);
class Graph {
 public:
  Graph() = default;
  explicit Graph(CUgraphExec_st* exec) : exec_(exec) {}
  ~Graph();
  Graph(Graph&& o) noexcept;
  Graph& operator=(Graph&& o) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  void launch(Stream stream) const;
  bool valid() const { return exec_ != nullptr; }

 private:
  CUgraphExec_st* exec_ = nullptr;
};
Graph end_capture(Stream stream);

// Host <-> bf16 for tests and benchmarks: core/bf16.hpp's conversions on the kernels' bf16 type.
inline bf16 to_bf16(float x) { return duet::float_to_bf16(x); }
inline float from_bf16(bf16 x) { return duet::bf16_to_float(x); }

}  // namespace duet::kernels
