#include "core/memory_plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>

#include "core/error.hpp"

namespace duet {

std::string gib(double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

namespace {

// gib(), or MiB below a GiB (a KV block is a fraction of a MiB to a few MiB).
std::string gib_or_mib(double bytes) {
  if (bytes >= 1024.0 * 1024.0 * 1024.0) return gib(bytes);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

std::string memory_share_problem(double share) {
  if (share > 0.0 && share <= 1.0) return {};
  char got[32];
  std::snprintf(got, sizeof got, "%g", share);
  return std::string("must be in (0, 1], got ") + got;
}

namespace {

std::int64_t budget_of(const GpuSpec& gpu, const EngineMemoryRequest& r) {
  const std::string who = "engine '" + r.label + "'";
  if (r.gpu_memory_utilization.has_value() == r.budget_bytes.has_value())
    throw Error(who + ": give exactly one of gpu_memory_utilization and budget_bytes");
  if (r.gpu_memory_utilization) {
    const double u = *r.gpu_memory_utilization;
    if (const std::string why = memory_share_problem(u); !why.empty())
      throw Error(who + ": gpu_memory_utilization " + why);
    return static_cast<std::int64_t>(std::floor(double(gpu.hbm_bytes) * u));
  }
  if (*r.budget_bytes <= 0)
    throw Error(who + ": budget_bytes must be positive, got " + std::to_string(*r.budget_bytes));
  return *r.budget_bytes;
}

void check_request(const EngineMemoryRequest& r) {
  const std::string who = "engine '" + r.label + "'";
  if (r.block_size <= 0)
    throw Error(who + ": block_size must be positive, got " + std::to_string(r.block_size));
  if (r.max_num_batched_tokens <= 0)
    throw Error(who + ": max_num_batched_tokens must be positive, got " +
                std::to_string(r.max_num_batched_tokens));
  if (r.max_num_seqs <= 0)
    throw Error(who + ": max_num_seqs must be positive, got " + std::to_string(r.max_num_seqs));
  if (r.runtime_overhead_bytes < 0) throw Error(who + ": runtime overhead must not be negative");
  if (r.num_blocks_override && *r.num_blocks_override <= 0)
    throw Error(who + ": num_gpu_blocks_override must be positive, got " +
                std::to_string(*r.num_blocks_override));
  try {
    r.model.validate();
  } catch (const Error& e) {
    throw Error(who + ": " + e.what());
  }
}

}  // namespace

std::int64_t activation_bytes(const ModelSpec& m, int max_num_batched_tokens, int max_num_seqs) {
  // Live at the MLP, the widest point: residual stream and normed input (hidden each), the
  // attention output (heads * head_dim), the fused gate/up output (2 * intermediate) and the
  // activated product (intermediate); QKV is dead by then but is the peak inside attention.
  const std::int64_t qkv = std::int64_t(m.num_heads + 2 * m.num_kv_heads) * m.head_dim;
  const std::int64_t mlp = 3LL * m.intermediate_size + std::int64_t(m.num_heads) * m.head_dim;
  const std::int64_t per_token = 2LL * m.hidden_size + std::max(qkv, mlp);
  const std::int64_t logits = std::int64_t(max_num_seqs) * m.logits_width() * 4;
  return std::int64_t(max_num_batched_tokens) * per_token * dtype_bytes(m.dtype) + logits;
}

const EngineMemory& MemoryPlan::engine(const std::string& label) const {
  for (const auto& e : engines)
    if (e.label == label) return e;
  throw Error("memory plan has no engine '" + label + "'");
}

KvPoolKind kv_pool_kind_from_name(const std::string& name) {
  if (name == "static") return KvPoolKind::Static;
  if (name == "shared") return KvPoolKind::Shared;
  throw Error("unknown value '" + name + "' (valid: static, shared)");
}

const char* kv_pool_kind_name(KvPoolKind kind) { return kind == KvPoolKind::Shared ? "shared" : "static"; }

KvEviction kv_eviction_from_name(const std::string& name) {
  if (name == "lru") return KvEviction::Lru;
  if (name == "cost") return KvEviction::Cost;
  throw Error("unknown value '" + name + "' (valid: lru, cost)");
}

const char* kv_eviction_name(KvEviction eviction) { return eviction == KvEviction::Cost ? "cost" : "lru"; }

namespace {

// An override of a pool's size may ignore the budgets (vLLM's num_gpu_blocks_override does), but
// not the GPU: more blocks than its whole memory holds is a mistake, and its bookkeeping alone
// would take gigabytes of host memory.
void check_fits_gpu(const GpuSpec& gpu, const std::string& what, std::int64_t blocks,
                    std::int64_t block_bytes) {
  const double bytes = double(blocks) * double(block_bytes);
  if (bytes > double(gpu.hbm_bytes))
    throw Error(what + ": " + std::to_string(blocks) + " blocks of " + std::to_string(block_bytes) +
                " bytes hold " + gib(bytes) + " of KV, more than all of " + gpu.name + "'s " +
                gib(double(gpu.hbm_bytes)));
}

// One engine's share of the GPU; num_blocks is its own pool's (static) block count.
EngineMemory engine_memory(const GpuSpec& gpu, const EngineMemoryRequest& r, bool shared) {
  check_request(r);
  EngineMemory e;
  e.label = r.label;
  e.budget_bytes = budget_of(gpu, r);
  e.weight_bytes = r.model.weight_bytes();
  e.activation_bytes = activation_bytes(r.model, r.max_num_batched_tokens, r.max_num_seqs);
  e.overhead_bytes = r.runtime_overhead_bytes;
  e.block_size = r.block_size;
  e.block_bytes = std::int64_t(r.block_size) * r.model.kv_bytes_per_token();
  e.kv_bytes = e.budget_bytes - e.weight_bytes - e.activation_bytes - e.overhead_bytes;
  // A shared pool needs one page in all; an engine's budget need only hold the engine itself.
  const std::string engine = "engine '" + r.label + "' (" + r.model.name + "): ";
  if (e.kv_bytes < (shared ? 0 : 1))
    throw Error(engine + "weights " + gib(e.weight_bytes) + " + activations " + gib(e.activation_bytes) +
                " + runtime overhead " + gib(e.overhead_bytes) + " leave no room for KV in its budget of " +
                gib(e.budget_bytes) + " on " + gpu.name +
                "; raise gpu_memory_utilization or lower max_num_batched_tokens / max_num_seqs");
  // Room for KV, but not for one block: the block is what is out of scale.
  if (!shared && e.kv_bytes < e.block_bytes)
    throw Error(
        engine + "one KV block of block_size " + std::to_string(r.block_size) + " tokens takes " +
        gib_or_mib(double(e.block_bytes)) + ", more than the " + gib_or_mib(double(e.kv_bytes)) +
        " its budget of " + gib(e.budget_bytes) + " on " + gpu.name + " leaves for KV; " +
        (r.block_size > 16 ? "lower block_size (vLLM's default is 16)" : "raise gpu_memory_utilization"));
  if (shared) return e;
  const std::int64_t blocks = e.kv_bytes / e.block_bytes;
  if (blocks > std::numeric_limits<std::int32_t>::max())
    throw Error("engine '" + r.label + "': " + std::to_string(blocks) +
                " KV blocks overflow the block id type");
  if (r.num_blocks_override)
    check_fits_gpu(gpu, "engine '" + r.label + "': num_gpu_blocks_override", *r.num_blocks_override,
                   e.block_bytes);
  e.num_blocks = r.num_blocks_override ? *r.num_blocks_override : static_cast<std::int32_t>(blocks);
  return e;
}

// The shared pool over the engines' KV bytes; every engine sees its page count.
SharedPoolMemory plan_shared_pool(const GpuSpec& gpu, const std::vector<EngineMemoryRequest>& requests,
                                  std::vector<EngineMemory>& engines, const KvPoolRequest& pool) {
  SharedPoolMemory p;
  p.page_bytes = engines.front().block_bytes;
  for (std::size_t i = 0; i < engines.size(); ++i) {
    const EngineMemory& e = engines[i];
    if (e.block_bytes != p.page_bytes)
      throw Error("kv_pool 'shared': engine '" + e.label + "' has blocks of " +
                  std::to_string(e.block_bytes) + " bytes (block_size " + std::to_string(e.block_size) +
                  " x " + std::to_string(requests[i].model.kv_bytes_per_token()) +
                  " bytes per token) and engine '" + engines.front().label + "' of " +
                  std::to_string(p.page_bytes) +
                  "; a page holds one block of any model, so choose block sizes with equal bytes");
    if (requests[i].num_blocks_override)
      throw Error("engine '" + e.label + "': num_gpu_blocks_override sizes a private pool; a shared pool's " +
                  "size is kv_pool_blocks");
    p.kv_bytes += e.kv_bytes;
  }
  const std::int64_t pages = p.kv_bytes / p.page_bytes;
  if (pool.num_pages_override && *pool.num_pages_override <= 0)
    throw Error("kv_pool_blocks must be positive, got " + std::to_string(*pool.num_pages_override));
  if (!pool.num_pages_override && pages < 1)
    throw Error("kv_pool 'shared': the engines' budgets leave " + gib(p.kv_bytes) +
                " for KV, less than one page of " + std::to_string(p.page_bytes) + " bytes");
  if (pages > std::numeric_limits<std::int32_t>::max())
    throw Error("kv_pool 'shared': " + std::to_string(pages) + " pages overflow the block id type");
  if (pool.num_pages_override) check_fits_gpu(gpu, "kv_pool_blocks", *pool.num_pages_override, p.page_bytes);
  p.num_pages = pool.num_pages_override ? *pool.num_pages_override : static_cast<std::int32_t>(pages);
  for (EngineMemory& e : engines) e.num_blocks = p.num_pages;
  return p;
}

}  // namespace

MemoryPlan plan_memory(const GpuSpec& gpu, const std::vector<EngineMemoryRequest>& requests,
                       const KvPoolRequest& pool) {
  MemoryPlan plan;
  plan.gpu = gpu;
  const bool shared = pool.kind == KvPoolKind::Shared;
  if (!shared && pool.num_pages_override) throw Error("kv_pool_blocks needs kv_pool = 'shared'");
  std::int64_t assigned = 0;
  for (const auto& r : requests) {
    plan.engines.push_back(engine_memory(gpu, r, shared));
    assigned += plan.engines.back().budget_bytes;
  }
  if (assigned > gpu.hbm_bytes) {
    std::string parts;
    for (const auto& e : plan.engines)
      parts += (parts.empty() ? "" : " + ") + e.label + " " + gib(e.budget_bytes);
    throw Error("engine budgets (" + parts + " = " + gib(assigned) + ") exceed " + gpu.name + "'s " +
                gib(gpu.hbm_bytes));
  }
  if (shared && !plan.engines.empty()) plan.shared = plan_shared_pool(gpu, requests, plan.engines, pool);
  plan.unassigned_bytes = gpu.hbm_bytes - assigned;
  return plan;
}

std::vector<int> equal_byte_block_sizes(const std::vector<ModelSpec>& models, int smallest_model_block_size) {
  if (smallest_model_block_size <= 0)
    throw Error("block_size must be positive, got " + std::to_string(smallest_model_block_size));
  constexpr std::int64_t kMaxTokens = 1024;  // a block beyond this is no longer a page of a pool
  auto refuse = [&] {
    std::string each;
    for (const ModelSpec& m : models)
      each += (each.empty() ? "" : ", ") + m.name + " " + std::to_string(m.kv_bytes_per_token());
    return Error("kv_pool 'shared': no block of at most " + std::to_string(kMaxTokens) +
                 " tokens holds a whole number of each model's tokens (KV bytes per token: " + each +
                 "); give each engine a block_size with equal bytes");
  };
  const ModelSpec* narrowest = &models.front();
  std::int64_t unit = 1;  // the least common multiple of the models' bytes per token
  for (const ModelSpec& m : models) {
    if (m.kv_bytes_per_token() < narrowest->kv_bytes_per_token()) narrowest = &m;
    const std::int64_t b = m.kv_bytes_per_token(), g = std::gcd(unit, b);
    if (unit / g > std::numeric_limits<std::int64_t>::max() / b) throw refuse();
    unit = unit / g * b;
  }
  const std::int64_t step = unit / narrowest->kv_bytes_per_token();  // the narrowest's tokens in one unit
  const std::int64_t tokens = (smallest_model_block_size + step - 1) / step * step;
  if (tokens > kMaxTokens) throw refuse();
  std::vector<int> sizes;
  for (const ModelSpec& m : models)
    sizes.push_back(static_cast<int>(tokens * narrowest->kv_bytes_per_token() / m.kv_bytes_per_token()));
  return sizes;
}

}  // namespace duet
