// The CUDA runtime behind device.hpp's plain C++ types. Every runtime call is checked; a failure
// throws duet::Error naming the call and cudaGetErrorString, e.g.
// "cudaMalloc(1048576 bytes): out of memory". Destructors never throw: they release what they own
// and ignore the status (a failed free at shutdown is not actionable).
#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "core/error.hpp"
#include "kernels/device.hpp"

namespace duet::kernels {

namespace {

void check(cudaError_t status, const std::string& call) {
  if (status == cudaSuccess) return;
  // Clear the (non-sticky) error so that a later cudaGetLastError after a launch does not report
  // this failure a second time.
  (void)cudaGetLastError();
  throw Error(call + ": " + cudaGetErrorString(status));
}

std::string bytes_call(const char* name, std::size_t bytes) {
  return std::string(name) + "(" + std::to_string(bytes) + " bytes)";
}

}  // namespace

bool device_available(std::string* why) {
  auto fail = [&](std::string reason) {
    if (why) *why = std::move(reason);
    return false;
  };
  // cudaGetDeviceCount is the documented probe: it initialises the runtime and reports a missing
  // or old driver as an error code instead of crashing (cudart is linked statically, so the only
  // dynamic dependency is libcuda from the driver, which the runtime loads itself).
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    const std::string detail = std::string(" (cudaGetDeviceCount: ") + cudaGetErrorString(status) + ")";
    switch (status) {
      case cudaErrorNoDevice:
        return fail("no CUDA device" + detail);
      case cudaErrorInsufficientDriver:
        return fail("no CUDA driver, or one older than this CUDA " + std::to_string(CUDART_VERSION / 1000) +
                    " runtime" + detail);
      default:
        return fail("the CUDA runtime cannot be initialised" + detail);
    }
  }
  if (count <= 0) return fail("no CUDA device (cudaGetDeviceCount returned 0)");
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return fail("the current CUDA device cannot be queried");
  }
  // The kernels are compiled for sm_80 and sm_90 only (bf16 arithmetic, cp.async-era tuning).
  if (prop.major < 8)
    return fail(std::string("device ") + prop.name + " has compute capability " + std::to_string(prop.major) +
                "." + std::to_string(prop.minor) + "; duet's kernels need 8.0 or newer");
  if (why) why->clear();
  return true;
}

DeviceInfo device_info() {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties(" + std::to_string(device) + ")");
  std::size_t free_b = 0, total_b = 0;
  check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  DeviceInfo info;
  info.name = prop.name;
  info.sm_count = prop.multiProcessorCount;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.total_bytes = std::int64_t(total_b);
  info.free_bytes = std::int64_t(free_b);
  return info;
}

// --- DeviceBuffer -------------------------------------------------------------------------------

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;  // an empty buffer owns nothing; get() is nullptr
  check(cudaMalloc(&ptr_, bytes), bytes_call("cudaMalloc", bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) (void)cudaFree(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) (void)cudaFree(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

// --- Copies -------------------------------------------------------------------------------------
// All are asynchronous on `stream` (CUDA's rules for pageable host memory apply: a host-to-device
// copy from pageable memory returns once the source has been staged, a device-to-host copy into
// pageable memory returns once it is done). Zero bytes is a no-op, so callers need not special-case
// empty batches.

PinnedBuffer::PinnedBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  check(cudaMallocHost(&ptr_, bytes), bytes_call("cudaMallocHost", bytes));
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr_) (void)cudaFreeHost(ptr_);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) (void)cudaFreeHost(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void copy_to_device(void* dst, const void* src, std::size_t bytes, Stream stream) {
  if (bytes == 0) return;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream),
        bytes_call("cudaMemcpyAsync H2D", bytes));
}

void copy_to_host(void* dst, const void* src, std::size_t bytes, Stream stream) {
  if (bytes == 0) return;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream),
        bytes_call("cudaMemcpyAsync D2H", bytes));
}

void copy_device(void* dst, const void* src, std::size_t bytes, Stream stream) {
  if (bytes == 0) return;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream),
        bytes_call("cudaMemcpyAsync D2D", bytes));
}

void fill_zero(void* dst, std::size_t bytes, Stream stream) {
  if (bytes == 0) return;
  check(cudaMemsetAsync(dst, 0, bytes, stream), bytes_call("cudaMemsetAsync", bytes));
}

// --- Streams and events -------------------------------------------------------------------------

StreamHandle::StreamHandle() {
  // Non-blocking: no implicit synchronisation with the legacy default stream, so that the two
  // models' streams overlap.
  check(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking),
        "cudaStreamCreateWithFlags(cudaStreamNonBlocking)");
}

StreamHandle::~StreamHandle() {
  if (s_) (void)cudaStreamDestroy(s_);
}

void StreamHandle::synchronize() const { check(cudaStreamSynchronize(s_), "cudaStreamSynchronize"); }

Event::Event() { check(cudaEventCreate(&e_), "cudaEventCreate"); }

Event::~Event() {
  if (e_) (void)cudaEventDestroy(e_);
}

void Event::record(Stream stream) { check(cudaEventRecord(e_, stream), "cudaEventRecord"); }

void Event::synchronize() const { check(cudaEventSynchronize(e_), "cudaEventSynchronize"); }

float Event::elapsed_ms(const Event& start, const Event& end) {
  float ms = 0.0f;
  check(cudaEventElapsedTime(&ms, start.e_, end.e_), "cudaEventElapsedTime");
  return ms;
}

// --- CUDA graphs --------------------------------------------------------------------------------

void begin_capture(Stream stream) {
  // Thread-local mode: only this thread's unsafe calls (cudaMalloc, synchronous copies) during the
  // capture are errors; other threads (the other model's executor) may keep allocating.
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
        "cudaStreamBeginCapture(cudaStreamCaptureModeThreadLocal)");
}

Graph end_capture(Stream stream) {
  cudaGraph_t graph = nullptr;
  check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);  // the executable graph keeps what it needs
  check(status, "cudaGraphInstantiate");
  return Graph(exec);
}

Graph::~Graph() {
  if (exec_) (void)cudaGraphExecDestroy(exec_);
}

Graph::Graph(Graph&& o) noexcept : exec_(std::exchange(o.exec_, nullptr)) {}

Graph& Graph::operator=(Graph&& o) noexcept {
  if (this != &o) {
    if (exec_) (void)cudaGraphExecDestroy(exec_);
    exec_ = std::exchange(o.exec_, nullptr);
  }
  return *this;
}

void Graph::launch(Stream stream) const {
  if (!exec_) throw Error("Graph::launch: the graph is empty (not captured, or moved from)");
  check(cudaGraphLaunch(exec_, stream), "cudaGraphLaunch");
}

}  // namespace duet::kernels
