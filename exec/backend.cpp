#include "exec/backend.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "core/error.hpp"
#include "exec/cpu_executor.hpp"
#include "exec/wall_clock.hpp"
#include "exec/weights.hpp"
#include "sim/profiles.hpp"
#include "sim/sim_engine.hpp"

#if DUET_HAVE_CUDA
#include "exec/cuda_executor.hpp"
#include "kernels/device.hpp"
#endif

namespace duet {

namespace {

#if DUET_HAVE_CUDA
constexpr bool kHaveCuda = true;
#else
constexpr bool kHaveCuda = false;
#endif

std::shared_ptr<BlockPool> pages_of(const SharedKvPool* shared) { return shared ? shared->pages : nullptr; }

class SimBackendEngine final : public BuiltEngine {
 public:
  SimBackendEngine(const BackendOptions& b, const GpuSpec& gpu, const EngineConfig& c, const EngineMemory& m,
                   std::uint32_t model_id, SchedulerPolicy policy, SharedKvPool* shared)
      : BuiltEngine(vocabulary_of(c.model, b.source_dir, c.name)),
        choice_(choose_cost_model(b.cost_model, gpu, c.model,
                                  b.cost_device.empty() ? gpu_device_key(gpu) : b.cost_device,
                                  b.profile_dir)),
        sim_(std::move(choice_.model), c.model.vocab_size, b.device_turns, model_id),
        engine_(assemble_engine(c, m, model_id, sim_.executor, std::move(policy), pages_of(shared))) {}
  Engine& engine() override { return engine_; }
  Executor& executor() override { return sim_.executor; }
  std::string describe() const override { return sim_.cost->describe() + " [" + choice_.reason + "]"; }
  const CostModel* cost_model() const override { return sim_.cost.get(); }

 private:
  ChosenCostModel choice_;
  SimExecution sim_;
  Engine engine_;
};

// Host memory is not a GPU's: a plan sized for 80 GB would not fit. Beyond this the CPU backend
// asks for num_gpu_blocks_override instead of allocating.
constexpr std::int64_t kCpuPoolLimitBytes = 4LL << 30;

// The CPU reference holds float32 weights in host memory: an 8B model would need 32 GB.
const ModelSpec& small_enough_for_cpu(const EngineConfig& c) {
  const std::int64_t bytes = c.model.num_parameters() * std::int64_t(sizeof(float));
  if (bytes > kCpuPoolLimitBytes)
    throw Error(
        "engine '" + c.name + "': " + c.model.name + " needs " + std::to_string(bytes >> 20) +
        " MiB of float32 weights; the CPU backend is for small models (e.g. models/tiny-llama/config.json)");
  return c.model;
}

int checked_cpu_blocks(const EngineConfig& c, const EngineMemory& m) {
  const KvLayout layout = KvLayout::of(c.model, m.num_blocks, c.block_size);
  const std::int64_t bytes = layout.total_elems() * std::int64_t(sizeof(float));
  if (bytes > kCpuPoolLimitBytes) {
    char gib[32];
    std::snprintf(gib, sizeof gib, "%.1f", double(bytes) / double(1LL << 30));
    throw Error("engine '" + c.name + "': the CPU backend's KV pool of " + std::to_string(m.num_blocks) +
                " blocks would take " + gib + " GiB of host memory, over the " +
                std::to_string(kCpuPoolLimitBytes >> 30) + " GiB it allows" +
                (c.num_gpu_blocks_override
                     ? std::string(": give num_gpu_blocks_override fewer blocks, or blocks of fewer tokens")
                     : std::string(": give the engine num_gpu_blocks_override")));
  }
  return m.num_blocks;
}

// The shared pool's host arena, made by the first CPU engine on it: every engine's pages have
// the same float count (equal block bytes), so the first engine's layout sizes it.
std::shared_ptr<std::vector<float>> cpu_arena(SharedKvPool* shared, const EngineConfig& c,
                                              const EngineMemory& m) {
  if (!shared) return nullptr;
  const std::size_t elems = std::size_t(KvLayout::of(c.model, m.num_blocks, c.block_size).total_elems());
  if (!shared->host_arena) shared->host_arena = std::make_shared<std::vector<float>>(elems, 0.0f);
  if (shared->host_arena->size() != elems)
    throw Error("engine '" + c.name + "': its pages would hold " + std::to_string(elems) +
                " floats of KV and the shared arena has " + std::to_string(shared->host_arena->size()) +
                "; a shared pool needs equal block bytes");
  return shared->host_arena;
}

std::span<float> span_of(const std::shared_ptr<std::vector<float>>& arena) {
  return arena ? std::span<float>(*arena) : std::span<float>();
}

CpuExecutorOptions cpu_options(const Vocabulary& v) {
  CpuExecutorOptions o;
  o.prm_plus_id = v.prm_plus_id;
  o.prm_minus_id = v.prm_minus_id;
  return o;
}

class CpuBackendEngine final : public BuiltEngine {
 public:
  CpuBackendEngine(const BackendOptions& b, const EngineConfig& c, const EngineMemory& m,
                   std::uint32_t model_id, SchedulerPolicy policy, SharedKvPool* shared)
      : BuiltEngine(vocabulary_of(c.model, b.source_dir, c.name)),
        weights_(b.load_format == "dummy" ? dummy_llama_weights(small_enough_for_cpu(c), b.seed + model_id)
                                          : load_llama_weights(small_enough_for_cpu(c), b.load_format)),
        arena_(cpu_arena(shared, c, m)),
        executor_(weights_, checked_cpu_blocks(c, m), c.block_size, cpu_options(vocabulary()),
                  span_of(arena_)),
        engine_(assemble_engine(c, m, model_id, executor_, std::move(policy), pages_of(shared))),
        load_format_(b.load_format) {}
  Engine& engine() override { return engine_; }
  Executor& executor() override { return executor_; }
  std::string describe() const override {
    return "cpu(" + weights_.spec.name + ", " + (load_format_ == "dummy" ? "dummy weights" : load_format_) +
           ")";
  }

 private:
  LlamaWeights weights_;
  std::shared_ptr<std::vector<float>> arena_;  // keeps a shared arena alive (null: own pool)
  CpuExecutor executor_;
  Engine engine_;
  std::string load_format_;
};

#if DUET_HAVE_CUDA
// The CUDA engine over the memory plan's block count. Dummy weights are generated on the device
// (the float32 host copy of an 8B model would be 32 GB); a checkpoint is read whole, uploaded and
// dropped.
class CudaBackendEngine final : public BuiltEngine {
 public:
  CudaBackendEngine(const BackendOptions& b, const EngineConfig& c, const EngineMemory& m,
                    std::uint32_t model_id, SchedulerPolicy policy, SharedKvPool* shared)
      : BuiltEngine(vocabulary_of(c.model, b.source_dir, c.name)),
        executor_(make_executor(b, c, m, model_id, vocabulary(), shared)),
        engine_(assemble_engine(c, m, model_id, *executor_, std::move(policy), pages_of(shared))),
        load_format_(b.load_format) {}
  Engine& engine() override { return engine_; }
  Executor& executor() override { return *executor_; }
  std::string describe() const override {
    return "cuda(" + executor_->spec().name + ", " +
           (load_format_ == "dummy" ? "dummy weights" : load_format_) + ", " + executor_->device_name() + ")";
  }

 private:
  // The shared pool's device arena, made by the first CUDA engine on it (every engine's pages
  // have the same bytes, so the first one's layout sizes it).
  static std::shared_ptr<CudaKvArena> arena_of(SharedKvPool* shared, const EngineConfig& c,
                                               const EngineMemory& m) {
    if (!shared) return nullptr;
    const std::int64_t bytes = KvLayout::of(c.model, m.num_blocks, c.block_size).total_elems() * 2;  // bf16
    if (!shared->device_arena) shared->device_arena = std::make_shared<CudaKvArena>(bytes);
    auto arena = std::static_pointer_cast<CudaKvArena>(shared->device_arena);
    if (arena->bytes() != bytes)
      throw Error("engine '" + c.name + "': its pages would take " + std::to_string(bytes) +
                  " bytes and the shared arena has " + std::to_string(arena->bytes()) +
                  "; a shared pool needs equal block bytes");
    return arena;
  }

  static std::unique_ptr<CudaExecutor> make_executor(const BackendOptions& b, const EngineConfig& c,
                                                     const EngineMemory& m, std::uint32_t model_id,
                                                     const Vocabulary& v, SharedKvPool* shared) {
    CudaExecutorOptions o;
    o.kv_arena = arena_of(shared, c, m);
    o.prm_plus_id = v.prm_plus_id;
    o.prm_minus_id = v.prm_minus_id;
    o.max_num_batched_tokens = c.max_num_batched_tokens;
    o.max_num_seqs = c.max_num_seqs;
    o.max_model_len = c.max_model_len;
    if (b.load_format == "dummy")
      return std::make_unique<CudaExecutor>(c.model, CudaExecutor::DummyWeights{b.seed + model_id},
                                            m.num_blocks, c.block_size, o);
    const LlamaWeights weights = load_llama_weights(c.model, b.load_format);
    return std::make_unique<CudaExecutor>(weights, m.num_blocks, c.block_size, o);
  }

  std::unique_ptr<CudaExecutor> executor_;
  Engine engine_;
  std::string load_format_;
};
#endif

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  return "unknown";
}

}  // namespace

const std::vector<std::string>& all_backends() {
  static const std::vector<std::string> names = {"sim", "cpu", "cuda"};
  return names;
}

std::string backend_names() { return kHaveCuda ? "sim, cpu, cuda" : "sim, cpu"; }

void check_backend(const std::string& name) {
  if (name == "cuda" && !kHaveCuda)
    throw Error("backend 'cuda': this build has no CUDA (configure with -DDUET_CUDA=ON where nvcc is)");
  if (std::find(all_backends().begin(), all_backends().end(), name) == all_backends().end())
    throw Error("unknown backend '" + name + "' (valid: " + backend_names() + ")");
}

bool is_real_backend(const std::string& name) {
  check_backend(name);
  return name != "sim";
}

std::unique_ptr<Clock> make_clock(const std::string& backend) {
  if (is_real_backend(backend)) return std::make_unique<WallClock>();
  return std::make_unique<VirtualClock>();
}

std::string device_name(const std::string& backend) {
  check_backend(backend);
  if (backend == "cpu") return cpu_model_name();
#if DUET_HAVE_CUDA
  if (backend == "cuda") {
    std::string why;
    if (!kernels::device_available(&why)) throw Error("no CUDA device: " + why);
    return kernels::device_info().name;
  }
#endif
  return "";
}

std::string device_key(const std::string& backend, const GpuSpec& gpu) {
  check_backend(backend);
  if (backend == "cpu") return "cpu-" + slug(cpu_model_name());
  if (backend == "cuda") {
    // A built-in's key for the GPUs duet knows (their priors and profiles live there), else the
    // driver's name ("NVIDIA L40S" -> nvidia-l40s), where `duet profile` then puts its profiles.
    const std::string name = device_name(backend);
    try {
      return gpu_device_key(gpu_by_device_name(name));
    } catch (const Error&) {
      return slug(name);
    }
  }
  return gpu_device_key(gpu);
}

std::unique_ptr<BuiltEngine> make_engine(const BackendOptions& b, const GpuSpec& gpu, const EngineConfig& c,
                                         const EngineMemory& m, std::uint32_t model_id,
                                         SchedulerPolicy policy, SharedKvPool* shared) {
  check_backend(b.name);
  if (b.name == "cpu")
    return std::make_unique<CpuBackendEngine>(b, c, m, model_id, std::move(policy), shared);
#if DUET_HAVE_CUDA
  if (b.name == "cuda")
    return std::make_unique<CudaBackendEngine>(b, c, m, model_id, std::move(policy), shared);
#endif
  return std::make_unique<SimBackendEngine>(b, gpu, c, m, model_id, std::move(policy), shared);
}

}  // namespace duet
