#pragma once
// NVIDIA AIConfigurator's measured kernel tables (bf16, per layer, under CUDA graphs; Apache-2.0,
// github.com/ai-dynamo/aiconfigurator) as curve samples for `duet fit-ops`:
//   GEMM               m,n,k,latency_ms
//   attention          kernel_source,batch_size,isl,step,num_heads,num_key_value_heads,head_dim,latency_ms
//                      prefill ("context") rows: batch_size chunks of isl tokens, step 0;
//                      decode ("generation") rows: batch_size sequences attending to step tokens.
// Plain or gzip'd CSV. Each row also gets its hold-out group: its (n, k) for a GEMM, its head
// configuration for attention, so that a held-out shape is one the fit never saw.
#include <string>
#include <vector>

#include "core/gpu_spec.hpp"
#include "sim/operator_fit.hpp"
#include "sim/operator_model.hpp"

namespace duet {

struct OperatorTable {
  OperatorClass kind = OperatorClass::gemm;
  std::string path;
  std::vector<CurveSample> rows;
  std::vector<std::string> groups;  // per row: "n=4096 k=4096", "heads=32 kv=8 d=128"
  std::vector<std::string> shapes;  // per row, for reports: the row's own shape
  std::size_t impossible = 0;       // rows dropped for running faster than the GPU's roofline
};

// Throws duet::Error naming the file and line for a malformed row, and the file when more than
// 2% of its rows are faster than `gpu`'s peaks allow (a table of another device, or broken
// measurements: AIConfigurator's H200 prefill table is one).
OperatorTable read_operator_table(OperatorClass kind, const std::string& path, const GpuSpec& gpu);

// The rows whose group is held out: about one group in `every`, chosen by a hash of its name
// (deterministic, and not aligned with the grid's order).
std::vector<bool> held_out_rows(const std::vector<std::string>& groups, int every);

}  // namespace duet
