#pragma once
// `duet profile`: drives a real executor through a designed grid of batches, measures each point
// several times (median and spread), measures the engine's host work separately (the scheduler and
// postprocessing of core's Engine, on the same batch shapes), and fits the calibrated cost model
// (sim/calibrated.hpp) on what it measured.
//
// The grid covers the regimes a serving run visits:
//   prefill     chunks of 1 .. max_num_batched_tokens tokens, at cached contexts 0 .. max_model_len,
//               sampling one token, scoring positions (a PRM), or neither; several chunks per batch
//   decode      1 .. max_num_seqs sequences at contexts 16 .. max_model_len; and beams: groups of
//               rows that read one prefix's blocks (a fork's, a cached prompt's) before their own
//   mixed       a prefill chunk with decodes in the same batch
//   copies      decode batches with copy-on-write block copies
#include <functional>
#include <string>
#include <vector>

#include "core/engine_config.hpp"
#include "exec/backend.hpp"
#include "sim/calibrated.hpp"

namespace duet {

struct ProfileLimits {
  int max_num_seqs = 256;
  int max_num_batched_tokens = 8192;
  int max_model_len = 8192;
  int block_size = 16;
  int repeats = 5;  // timed runs per point (after one untimed warm-up)
  // The CPU's caches hold a small model: a step timed right after itself runs faster than a step
  // of a run where another engine (the PRM, the generator) stepped in between. Each point is
  // therefore timed twice per repeat: right after itself ("alone", an engine with the device to
  // itself), and after this many bytes were streamed through the caches ("shared", engines taking
  // turns). 0: time only the first (GPUs, whose weights stream from HBM every step either way).
  std::int64_t evict_bytes = 64LL << 20;
};

// One designed batch: per item, new tokens, cached context and what it wants.
struct GridItem {
  int context = 0;
  int new_tokens = 1;
  Want want = Want::Sample;
  int score_every = 0;  // Want::Score: score every k-th new token
};
struct GridPoint {
  std::string regime;  // prefill, decode, mixed, copies
  std::vector<GridItem> items;
  int copies = 0;
  // Items i and j with i / group == j / group read the same blocks for their first shared_context
  // tokens (whole blocks; 0: every item has blocks of its own).
  int group = 0;
  int shared_context = 0;
};

std::vector<GridPoint> profile_grid(const ProfileLimits& limits);

struct MeasuredPoint {
  GridPoint point;
  BatchShape shape;
  std::vector<double> device_s;        // one per repeat: after the caches were evicted (see evict_bytes)
  std::vector<double> alone_device_s;  // one per repeat, right after itself (empty: not measured)
  std::vector<double> host_s;
  double device_median = 0, device_min = 0, device_max = 0;
  double alone_device_median = 0;
  double host_median = 0;
};

struct ProfileResult {
  std::vector<MeasuredPoint> points;
  CalibrationProfile profile;
  double wall_s = 0;
};

// Measures `engine_config`'s model on `backend` (cpu or cuda): the executor from make_engine over a
// pool large enough for the grid's largest batch (capped; larger batches reuse blocks).
// `progress` (may be empty) is told each point as it finishes.
ProfileResult run_profile(const BackendOptions& backend, const GpuSpec& gpu,
                          const EngineConfig& engine_config, const ProfileLimits& limits,
                          const std::function<void(std::size_t, std::size_t)>& progress);

}  // namespace duet
