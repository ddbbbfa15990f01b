#include "cli/backend.hpp"

#include <cstdio>

#include "core/error.hpp"
#include "exec/cpu_executor.hpp"
#include "exec/tokenizer.hpp"
#include "exec/wall_clock.hpp"
#include "exec/weights.hpp"
#include "sim/sim_engine.hpp"

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

class CpuBackendEngine final : public BuiltEngine {
 public:
  CpuBackendEngine(const BackendOptions& b, const EngineConfig& c, const EngineMemory& m, std::uint32_t model_id,
                   SchedulerPolicy policy)
      : weights_(b.load_format == "dummy" ? dummy_llama_weights(c.model, b.seed + model_id)
                                          : load_llama_weights(c.model, b.load_format)),
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

}  // namespace

std::unique_ptr<BuiltEngine> build_engine(const BackendOptions& b, const GpuSpec& gpu, const EngineConfig& c,
                                          const EngineMemory& m, std::uint32_t model_id, SchedulerPolicy policy) {
  if (b.name == "sim") return std::make_unique<SimBackendEngine>(gpu, c, m, model_id, b.cost_model, std::move(policy));
  if (b.name == "cpu") return std::make_unique<CpuBackendEngine>(b, c, m, model_id, std::move(policy));
  throw Error("unknown backend '" + b.name + "' (valid: sim, cpu)");
}

std::unique_ptr<Clock> make_clock(const std::string& backend) {
  if (backend == "sim") return std::make_unique<VirtualClock>();
  if (backend == "cpu") return std::make_unique<WallClock>();
  throw Error("unknown backend '" + backend + "' (valid: sim, cpu)");
}

}  // namespace duet
