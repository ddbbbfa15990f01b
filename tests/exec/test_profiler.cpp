#include "exec/profiler.hpp"

#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "exec/build_revision.hpp"
#include "sim/profiles.hpp"
#include "tests/support/test_support.hpp"

namespace duet {
namespace {

using test_support::contains;
using test_support::error_of;

ProfileLimits small_limits() {
  ProfileLimits l;
  l.evict_bytes = 1 << 20;
  l.max_num_seqs = 4;
  l.max_num_batched_tokens = 32;
  l.max_model_len = 128;
  l.repeats = 1;
  return l;
}

TEST(Profiler, TheGridCoversEveryRegimeWithinTheLimits) {
  const ProfileLimits l = small_limits();
  std::set<std::string> regimes;
  bool cached = false, score = false, nothing = false;
  for (const GridPoint& p : profile_grid(l)) {
    regimes.insert(p.regime);
    int tokens = 0, decodes = 0;
    for (const GridItem& g : p.items) {
      tokens += g.new_tokens;
      decodes += g.new_tokens == 1 && g.context > 0;
      EXPECT_LE(g.context + g.new_tokens, l.max_model_len);
      cached = cached || (g.context > 0 && g.new_tokens > 1);
      score = score || g.want == Want::Score;
      nothing = nothing || g.want == Want::Nothing;
    }
    EXPECT_LE(decodes, l.max_num_seqs);
    if (p.regime == "prefill") {
      EXPECT_LE(tokens, l.max_num_batched_tokens);
    }
  }
  EXPECT_EQ(regimes, (std::set<std::string>{"prefill", "decode", "mixed", "copies"}));
  EXPECT_TRUE(cached && score && nothing);
  EXPECT_TRUE(contains(error_of([] {
                         ProfileLimits bad = small_limits();
                         bad.repeats = 0;
                         profile_grid(bad);
                       }),
                       "must be positive"));
}

TEST(Profiler, ProfilesTheCpuEngineAndRecordsWhatItMeasured) {
  EngineConfig c;
  c.model = resolve_model(std::string(DUET_SOURCE_DIR) + "/models/tiny-llama/config.json");
  BackendOptions b;
  b.name = "cpu";
  b.source_dir = DUET_SOURCE_DIR;
  std::size_t calls = 0;
  const ProfileResult r =
      run_profile(b, gpu_by_name("h100"), c, small_limits(), [&](std::size_t, std::size_t) { ++calls; });
  EXPECT_EQ(calls, r.points.size());
  EXPECT_EQ(r.points.size(), profile_grid(small_limits()).size());
  int beams = 0;
  for (const MeasuredPoint& m : r.points) {
    // Beams: rows of a group read their shared prefix's blocks, which the shape counts once.
    if (m.point.group > 1) {
      ++beams;
      const int rows = int(m.point.items.size()), context = m.point.items[0].context;
      const int shared = m.point.shared_context / c.block_size * c.block_size;
      EXPECT_EQ(m.shape.decode_context_tokens, std::int64_t(rows) * context);
      EXPECT_EQ(m.shape.decode_distinct_context_tokens,
                std::int64_t(rows) * context - std::int64_t(rows - rows / m.point.group) * shared)
          << rows << " rows in groups of " << m.point.group << ", " << shared << " tokens shared";
    }
    EXPECT_GT(m.device_median, 0);
    EXPECT_EQ(m.alone_device_s.size(), m.device_s.size()) << "the CPU engine is timed warm and evicted";
    EXPECT_GT(m.host_median, 0);
    EXPECT_LE(m.device_min, m.device_median);
  }
  EXPECT_GT(beams, 0) << "the grid has decodes that share a prefix";
  const CalibrationProfile& p = r.profile;
  EXPECT_EQ(p.model, "duet-tiny-llama");
  EXPECT_EQ(p.backend, "cpu");
  EXPECT_EQ(p.device, device_key("cpu", gpu_by_name("h100")));
  EXPECT_FALSE(p.created_utc.empty());
  // The revision of this build, taken when it was built (a checkout, or not one).
  EXPECT_EQ(p.git_revision, build_revision());
  EXPECT_TRUE(std::regex_match(p.git_revision, std::regex("[0-9a-f]{12}(-dirty\\.[0-9a-f]{8})?|unknown")))
      << p.git_revision;
  EXPECT_EQ(p.device_fit.rows, r.points.size());
  EXPECT_TRUE(p.regimes.count("decode") && p.regimes.count("prefill") && p.regimes.count("mixed"));
  EXPECT_TRUE(p.alone_coefficients.has_value());
  EXPECT_NO_THROW(check_profile(p, c.model, p.device, "p"));
  EXPECT_TRUE(contains(error_of([&] { check_profile(p, model_by_name("llama-3.2-1b"), p.device, "p"); }),
                       "the profile is for model 'duet-tiny-llama'"));
  b.name = "sim";
  EXPECT_TRUE(contains(error_of([&] { run_profile(b, gpu_by_name("h100"), c, small_limits(), {}); }),
                       "is not a real engine"));
}

}  // namespace
}  // namespace duet
