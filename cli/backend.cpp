#include "cli/backend.hpp"

#include <cstdio>

#include "core/error.hpp"
#include "exec/cpu_executor.hpp"
#include "exec/tokenizer.hpp"
#include "exec/wall_clock.hpp"
#include "exec/weights.hpp"
#include "sim/sim_engine.hpp"

#if DUET_HAVE_CUDA
#include "exec/cuda_executor.hpp"
#endif

namespace duet {

namespace {

class SimBackendEngine final : public BuiltEngine {
 public:
  SimBackendEngine(const GpuSpec& gpu, const EngineConfig& c, const EngineMemory& m, std::uint32_t model_id,
                   const std::string& cost_model, SchedulerPolicy policy)
      : sim_(gpu, c, m, model_id, cost_model, std::move(policy)) {}
  Engine& engine() override { return sim_.engine; }
  std::string describe() const override { return sim_.cost->describe(); }

 private:
  SimEngine sim_;
};

// Host memory is not a GPU's: a plan sized for 80 GB would not fit. Beyond this the CPU backend
// asks for num_gpu_blocks_override instead of allocating.
constexpr std::int64_t kCpuPoolLimitBytes = 4LL << 30;

// The PRM reads P("+") against P("-"): the repository tokenizer's ids when the model uses its
// vocabulary, else the executor's defaults.
CpuExecutorOptions cpu_options(const BackendOptions& b, const ModelSpec& model) {
  CpuExecutorOptions o;
  const Tokenizer t = Tokenizer::load(b.source_dir + "/workloads/data/tokenizer/duet-math.model");
  if (t.vocab_size() == model.vocab_size) {
    o.prm_plus_id = t.piece_to_id("+");
    o.prm_minus_id = t.piece_to_id("-");
  }
  return o;
}

// The CPU reference holds float32 weights in host memory: an 8B model would need 32 GB.
const ModelSpec& small_enough_for_cpu(const EngineConfig& c) {
  const std::int64_t bytes = c.model.num_parameters() * std::int64_t(sizeof(float));
  if (bytes > kCpuPoolLimitBytes)
    throw Error("engine '" + c.name + "': " + c.model.name + " needs " + std::to_string(bytes >> 20) +
                " MiB of float32 weights; the CPU backend is for small models (e.g. models/tiny-llama/config.json)");
  return c.model;
}

class CpuBackendEngine final : public BuiltEngine {
 public:
  CpuBackendEngine(const BackendOptions& b, const EngineConfig& c, const EngineMemory& m, std::uint32_t model_id,
                   SchedulerPolicy policy)
      : weights_(b.load_format == "dummy" ? dummy_llama_weights(small_enough_for_cpu(c), b.seed + model_id)
                                          : load_llama_weights(small_enough_for_cpu(c), b.load_format)),
        executor_(weights_, checked_blocks(c, m), c.block_size, cpu_options(b, c.model)),
        engine_(c.name, scheduler_config(c), make_allocator(c, m, model_id), executor_, std::move(policy)),
        load_format_(b.load_format) {}
  Engine& engine() override { return engine_; }
  std::string describe() const override {
    return "cpu(" + weights_.spec.name + ", " + (load_format_ == "dummy" ? "dummy weights" : load_format_) + ")";
  }

 private:
  static int checked_blocks(const EngineConfig& c, const EngineMemory& m) {
    const KvLayout layout = KvLayout::of(c.model, m.num_blocks, c.block_size);
    const std::int64_t bytes = layout.total_elems() * std::int64_t(sizeof(float));
    if (bytes > kCpuPoolLimitBytes) {
      char gib[32];
      std::snprintf(gib, sizeof gib, "%.1f", double(bytes) / double(1LL << 30));
      throw Error("engine '" + c.name + "': the CPU backend's KV pool of " + std::to_string(m.num_blocks) +
                  " blocks would take " + gib + " GiB of host memory; give the engine num_gpu_blocks_override");
    }
    return m.num_blocks;
  }

  LlamaWeights weights_;
  CpuExecutor executor_;
  Engine engine_;
  std::string load_format_;
};

#if DUET_HAVE_CUDA
// The CUDA engine over the memory plan's block count. Dummy weights are generated tensor by
// tensor straight into the upload (the float32 host copy of an 8B model would be 32 GB); a
// checkpoint is read whole, uploaded and dropped.
class CudaBackendEngine final : public BuiltEngine {
 public:
  CudaBackendEngine(const BackendOptions& b, const EngineConfig& c, const EngineMemory& m, std::uint32_t model_id,
                    SchedulerPolicy policy)
      : executor_(make_executor(b, c, m, model_id)),
        engine_(c.name, scheduler_config(c), make_allocator(c, m, model_id), *executor_, std::move(policy)),
        load_format_(b.load_format) {}
  Engine& engine() override { return engine_; }
  std::string describe() const override {
    return "cuda(" + executor_->spec().name + ", " + (load_format_ == "dummy" ? "dummy weights" : load_format_) +
           ", " + executor_->device_name() + ")";
  }
  double last_cpu_s() const override { return executor_->last_cpu_s(); }

 private:
  static std::unique_ptr<CudaExecutor> make_executor(const BackendOptions& b, const EngineConfig& c,
                                                     const EngineMemory& m, std::uint32_t model_id) {
    const CpuExecutorOptions labels = cpu_options(b, c.model);
    CudaExecutorOptions o;
    o.prm_plus_id = labels.prm_plus_id;
    o.prm_minus_id = labels.prm_minus_id;
    o.max_num_batched_tokens = c.max_num_batched_tokens;
    o.max_num_seqs = c.max_num_seqs;
    o.max_model_len = c.max_model_len;
    if (b.load_format == "dummy")
      return std::make_unique<CudaExecutor>(c.model, CudaExecutor::dummy_source(b.seed + model_id), m.num_blocks,
                                            c.block_size, o);
    const LlamaWeights weights = load_llama_weights(c.model, b.load_format);
    return std::make_unique<CudaExecutor>(weights, m.num_blocks, c.block_size, o);
  }

  std::unique_ptr<CudaExecutor> executor_;
  Engine engine_;
  std::string load_format_;
};
#endif

}  // namespace

const char* backend_names() {
#if DUET_HAVE_CUDA
  return "sim, cpu, cuda";
#else
  return "sim, cpu";
#endif
}

std::unique_ptr<BuiltEngine> build_engine(const BackendOptions& b, const GpuSpec& gpu, const EngineConfig& c,
                                          const EngineMemory& m, std::uint32_t model_id, SchedulerPolicy policy) {
  if (b.name == "sim") return std::make_unique<SimBackendEngine>(gpu, c, m, model_id, b.cost_model, std::move(policy));
  if (b.name == "cpu") return std::make_unique<CpuBackendEngine>(b, c, m, model_id, std::move(policy));
#if DUET_HAVE_CUDA
  if (b.name == "cuda") return std::make_unique<CudaBackendEngine>(b, c, m, model_id, std::move(policy));
#endif
  throw Error("unknown backend '" + b.name + "' (valid: " + backend_names() + ")");
}

std::unique_ptr<Clock> make_clock(const std::string& backend) {
  if (backend == "sim") return std::make_unique<VirtualClock>();
  if (backend == "cpu") return std::make_unique<WallClock>();
#if DUET_HAVE_CUDA
  if (backend == "cuda") return std::make_unique<WallClock>();
#endif
  throw Error("unknown backend '" + backend + "' (valid: " + backend_names() + ")");
}

}  // namespace duet
