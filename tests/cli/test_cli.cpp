// The command line's own pieces: a sweep point's result as the bytes the ranks of an MPI job send
// (result_codec), and the sweep file's identity, shards and groups that --resume and duet merge
// rely on (sweep_file).
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/lua/result_codec.hpp"
#include "cli/sweep_file.hpp"
#include "core/error.hpp"
#include "tests/support/test_support.hpp"

namespace duet {
namespace {

using test_support::contains;
using test_support::error_of;
using test_support::TempDir;

lua::ExperimentResult a_result() {
  EngineRecords llm{"llm", "llama-3.2-1b", 4096, 16, {}, {}};
  for (int i = 0; i < 3; ++i) {
    StepRecord s;
    s.start_s = 0.25 * i, s.duration_s = 0.125, s.prefill_tokens = 100 + i, s.decode_seqs = i;
    llm.steps.push_back(s);
  }
  RequestRecord q;
  q.seq_id = 7, q.prompt_tokens = 100, q.output_tokens = 9, q.finish_s = 0.75, q.first_token_s = 0.25;
  llm.requests.push_back(q);
  lua::ExperimentResult r;
  r.label = "point 3";
  r.metadata.text = {{"backend", "sim"}, {"workload", "beam_search"}, {"utf8", "Grüße"}};
  r.metadata.numbers = {{"problems", 2}, {"problems_per_s", 2.5}, {"workload.n", 16}};
  r.records = std::make_shared<std::vector<EngineRecords>>(std::vector<EngineRecords>{llm});
  r.summary = {0.8, 0.01, {summarize(llm, 0.8)}};
  r.problems = {{1, 3, 4, 1, 0.0, 0.5, 3, 40, 0.9}, {2, 5, 6, 0, 0.1, 0.8, 5, 60, 0.4}};
  r.computed_prefill_tokens = {303};
  r.record = RecordLevel::Requests;
  r.problems_per_s = 2.5;
  return r;
}

TEST(ResultCodec, AResultComesBackAsItWasSent) {
  const lua::ExperimentResult sent = a_result();
  const std::vector<char> bytes = lua::encode_result(sent);
  const lua::ExperimentResult got = lua::decode_result(bytes);
  EXPECT_EQ(got.label, sent.label);
  EXPECT_EQ(got.metadata.text, sent.metadata.text);
  EXPECT_EQ(got.metadata.numbers, sent.metadata.numbers);
  ASSERT_EQ(got.records->size(), 1u);
  EXPECT_EQ(got.records->front().steps.size(), 3u);
  EXPECT_EQ(got.records->front().steps[2].prefill_tokens, 102);
  EXPECT_EQ(got.records->front().requests.front().seq_id, 7u);
  EXPECT_EQ(got.summary.engines.front().steps, sent.summary.engines.front().steps);
  EXPECT_EQ(got.problems.size(), 2u);
  EXPECT_EQ(got.problems[1].score, 0.4);
  EXPECT_EQ(got.computed_prefill_tokens, sent.computed_prefill_tokens);
  EXPECT_EQ(got.record, RecordLevel::Requests);
  EXPECT_EQ(got.problems_per_s, 2.5);
  EXPECT_EQ(lua::encode_result(got), bytes) << "every field goes through: the bytes of the copy are the same";
}

TEST(ResultCodec, BytesThatEndEarlyOrRunOnAreAnError) {
  std::vector<char> bytes = lua::encode_result(a_result());
  std::vector<char> short_bytes(bytes.begin(), bytes.end() - 5);
  EXPECT_FALSE(error_of([&] { lua::decode_result(short_bytes); }).empty());
  bytes.push_back('x');
  EXPECT_FALSE(error_of([&] { lua::decode_result(bytes); }).empty());
}

TEST(SweepFile, ShardsSplitTheGridAndBadOnesAreNamed) {
  const cli::Shard s = cli::parse_shard("2/3");
  EXPECT_EQ(cli::shard_name(s), "2/3");
  std::vector<std::size_t> owned;
  for (std::size_t p = 0; p < 8; ++p)
    if (s.owns(p)) owned.push_back(p);
  EXPECT_EQ(owned, (std::vector<std::size_t>{1, 4, 7}));
  for (const char* bad : {"3/2", "0/2", "1/x", "1/0", "", "2"})
    EXPECT_TRUE(contains(error_of([&] { cli::parse_shard(bad); }), "--shard")) << bad;
}

TEST(SweepFile, GroupsAreNumberedAndAnIdentityReadsBack) {
  EXPECT_EQ(cli::point_group(3, 12), "/sweeps/0003/points/0012");
  EXPECT_EQ(cli::failed_group(0, 7), "/sweeps/0000/failed/0007");
  TempDir dir;
  const std::string path = dir.file("sweep.h5");
  const cli::RunIdentity id = cli::identity_of("print(1)", "fnv1a64:00", "sim", "steps", {"--problems", "3"},
                                               cli::parse_shard("1/2"));
  {
    RunFileWriter writer(path);
    writer.write_attributes("/", cli::identity_metadata(id));
    writer.write_attributes(cli::sweep_group(0), cli::sweep_metadata("split", R"({"u":[0.1,0.2]})", 2));
    writer.close();
  }
  const cli::RunIdentity back = cli::read_identity(path);
  EXPECT_EQ(back.script_hash, id.script_hash);
  EXPECT_EQ(back.args, R"(["--problems","3"])");
  EXPECT_NO_THROW(cli::check_identity(path, back, id, "--resume", true));
  cli::RunIdentity other = id;
  other.args = "[]";
  EXPECT_TRUE(contains(error_of([&] { cli::check_identity(path, back, other, "--resume", true); }),
                       "attribute duet_run.args"));
  EXPECT_TRUE(cli::check_sweep(path, 0, "split", R"({"u":[0.1,0.2]})", 2, "--resume"));
  EXPECT_FALSE(cli::check_sweep(path, 1, "split", R"({"u":[0.1,0.2]})", 2, "--resume"));
  EXPECT_TRUE(contains(error_of([&] { cli::check_sweep(path, 0, "split", R"({"u":[0.3]})", 1, "--resume"); }),
                       "grid"));
}

}  // namespace
}  // namespace duet
