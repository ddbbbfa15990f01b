#include "exec/run_metadata.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "exec/build_revision.hpp"
#include "sim/calibrated.hpp"

namespace duet {

RunMetadata run_metadata(const std::string& backend, const std::string& command_line, const GpuSpec& gpu,
                         const MemoryPlan& plan, const std::vector<EngineConfig>& engines) {
  RunMetadata m;
  nlohmann::json config;
  config["backend"] = backend;
  config["gpu"] = gpu.name;
  m.text.emplace_back("backend", backend);
  m.text.emplace_back("git_revision", build_revision());
  m.text.emplace_back("duet_version", duet_version());
  m.text.emplace_back("command_line", command_line);
  m.text.emplace_back("gpu", gpu.name);
  // The figures too: a described GPU (a .json file, a Lua table) is known by them, not its name.
  // With the GPU whose efficiencies price it, if it borrows them: two lenders price differently.
  config["gpu_spec"] = nlohmann::json::parse(gpu_spec_json(gpu));
  for (const char* key : {"hbm_bytes", "hbm_bandwidth", "bf16_flops", "sm_count", "kernel_launch_s"})
    m.numbers.emplace_back(std::string("gpu.") + key, config["gpu_spec"][key].get<double>());
  for (std::size_t i = 0; i < engines.size(); ++i) {
    const EngineConfig& c = engines[i];
    const EngineMemory& mem = plan.engine(c.name);
    nlohmann::json e;
    e["model"] = c.model.name;
    const std::string model_config = model_config_json(c.model);
    e["model_config"] = nlohmann::json::parse(model_config);
    e["gpu_memory_utilization"] = c.budget_bytes ? double(*c.budget_bytes) / double(gpu.hbm_bytes)
                                                 : c.gpu_memory_utilization.value_or(0.0);
    e["budget_bytes"] = mem.budget_bytes;
    e["num_blocks"] = mem.num_blocks;
    e["block_size"] = c.block_size;
    e["max_num_seqs"] = c.max_num_seqs;
    e["max_num_batched_tokens"] = c.max_num_batched_tokens;
    e["max_model_len"] = c.max_model_len;
    e["enable_prefix_caching"] = c.enable_prefix_caching;
    e["enable_chunked_prefill"] = c.enable_chunked_prefill;
    e["scheduler_reserve_full_isl"] = c.scheduler_reserve_full_isl;
    e["allocator"] = allocator_kind_name(c.allocator);
    e["fork_kv"] = fork_kv_name(c.fork_kv);
    if (plan.shared) {  // the floor and ceiling it started with (a memory policy may move them)
      e["min_blocks"] = c.limits.min_blocks;
      e["max_blocks"] = std::min<std::int64_t>(c.limits.max_blocks, plan.shared->num_pages);
    }
    config["engines"][c.name] = e;
    const std::string p = c.name + ".";
    m.text.emplace_back(p + "model", c.model.name);
    m.text.emplace_back(p + "model_shape", model_shape(c.model));  // what a profile is checked against
    // The whole shape, whatever name or file it came from: two config.json files of one _name_or_path
    // that differ (a tied embedding, a RoPE base) differ here.
    m.text.emplace_back(p + "model_config", model_config);
    for (const char* key : {"gpu_memory_utilization", "budget_bytes", "num_blocks", "block_size",
                            "max_num_seqs", "max_num_batched_tokens", "max_model_len"})
      m.numbers.emplace_back(p + key, e[key].get<double>());
    m.numbers.emplace_back(p + "enable_prefix_caching", c.enable_prefix_caching ? 1.0 : 0.0);
    m.numbers.emplace_back(p + "enable_chunked_prefill", c.enable_chunked_prefill ? 1.0 : 0.0);
    m.numbers.emplace_back(p + "scheduler_reserve_full_isl", c.scheduler_reserve_full_isl ? 1.0 : 0.0);
    if (plan.shared)
      for (const char* key : {"min_blocks", "max_blocks"})
        m.numbers.emplace_back(p + key, e[key].get<double>());
    m.text.emplace_back(p + "allocator", e["allocator"].get<std::string>());
    m.text.emplace_back(p + "fork_kv", e["fork_kv"].get<std::string>());
  }
  m.text.emplace_back("config_json", config.dump());
  return m;
}

}  // namespace duet
