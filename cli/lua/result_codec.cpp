#include "cli/lua/result_codec.hpp"

#include <cstring>
#include <type_traits>

#include "cli/lua/sweep_points.hpp"
#include "core/error.hpp"
#include "core/record_columns.hpp"

namespace duet::lua {

namespace {

static_assert(std::is_trivially_copyable_v<StepRecord> && std::is_trivially_copyable_v<RequestRecord> &&
                  std::is_trivially_copyable_v<ProblemRecord> && std::is_trivially_copyable_v<Percentiles>,
              "rows travel as their bytes");

struct Out {
  std::vector<char> bytes;

  template <class T>
  void raw(const T* data, std::size_t n) {
    const char* p = reinterpret_cast<const char*>(data);
    bytes.insert(bytes.end(), p, p + n * sizeof(T));
  }
  template <class T>
  void value(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    raw(&v, 1);
  }
  void text(const std::string& s) {
    value(std::uint64_t(s.size()));
    raw(s.data(), s.size());
  }
  template <class T>
  void rows(const std::vector<T>& v) {
    value(std::uint64_t(v.size()));
    raw(v.data(), v.size());
  }
};

struct In {
  const std::vector<char>& bytes;
  std::size_t at = 0;

  void take(void* out, std::size_t n) {
    if (n > bytes.size() - at) throw Error("a sweep point's result from another rank ends early");
    std::memcpy(out, bytes.data() + at, n);
    at += n;
  }
  template <class T>
  T value() {
    T v{};
    take(&v, sizeof v);
    return v;
  }
  std::size_t count(std::size_t row_size) {
    const auto n = value<std::uint64_t>();
    if (n > (bytes.size() - at) / row_size)
      throw Error("a sweep point's result from another rank ends early");
    return std::size_t(n);
  }
  std::string text() {
    std::string s(count(1), '\0');
    take(s.data(), s.size());
    return s;
  }
  template <class T>
  std::vector<T> rows() {
    std::vector<T> v(count(sizeof(T)));
    take(v.data(), v.size() * sizeof(T));
    return v;
  }
};

}  // namespace

std::vector<char> encode_result(const ExperimentResult& r) {
  Out out;
  out.text(r.label);
  out.value(std::uint64_t(r.metadata.text.size()));
  for (const auto& [k, v] : r.metadata.text) out.text(k), out.text(v);
  out.value(std::uint64_t(r.metadata.numbers.size()));
  for (const auto& [k, v] : r.metadata.numbers) out.text(k), out.value(v);
  out.value(r.summary.makespan_s);
  out.value(r.summary.wall_s);
  out.value(std::uint64_t(r.summary.engines.size()));
  for (const EngineSummary& s : r.summary.engines) {
    out.text(s.name), out.text(s.model);
    visit_summary(s, [&](const char*, const auto& v) { out.value(v); });
  }
  out.value(std::uint64_t(r.records->size()));
  for (const EngineRecords& e : *r.records) {
    out.text(e.name), out.text(e.model), out.value(e.total_blocks), out.value(e.block_size);
    out.rows(e.steps), out.rows(e.requests);
  }
  out.rows(r.problems);
  out.rows(r.computed_prefill_tokens);
  out.value(r.record);
  out.value(r.problems_per_s);
  return std::move(out.bytes);
}

ExperimentResult decode_result(const std::vector<char>& bytes) {
  In in{bytes};
  ExperimentResult r;
  r.label = in.text();
  for (std::size_t n = in.count(8); n > 0; --n) {
    std::string k = in.text();
    r.metadata.text.emplace_back(std::move(k), in.text());
  }
  for (std::size_t n = in.count(8); n > 0; --n) {
    std::string k = in.text();
    r.metadata.numbers.emplace_back(std::move(k), in.value<double>());
  }
  r.summary.makespan_s = in.value<double>();
  r.summary.wall_s = in.value<double>();
  for (std::size_t n = in.count(16); n > 0; --n) {
    EngineSummary s;
    s.name = in.text();
    s.model = in.text();
    visit_summary(s, [&](const char*, auto& v) { v = in.value<std::remove_reference_t<decltype(v)>>(); });
    r.summary.engines.push_back(std::move(s));
  }
  r.records = std::make_shared<std::vector<EngineRecords>>();
  for (std::size_t n = in.count(16); n > 0; --n) {
    EngineRecords e;
    e.name = in.text();
    e.model = in.text();
    e.total_blocks = in.value<std::int32_t>();
    e.block_size = in.value<int>();
    e.steps = in.rows<StepRecord>();
    e.requests = in.rows<RequestRecord>();
    r.records->push_back(std::move(e));
  }
  r.problems = in.rows<ProblemRecord>();
  r.computed_prefill_tokens = in.rows<std::int64_t>();
  r.record = in.value<RecordLevel>();
  r.problems_per_s = in.value<double>();
  if (in.at != bytes.size()) throw Error("a sweep point's result from another rank has trailing bytes");
  return r;
}

ExperimentResult result_of_run(RunData run) {
  ExperimentResult r;
  // A file written before the answers were attributes has them in its problems table only.
  if (!run.metadata.find_number("mean_score")) add_problem_answers(run.metadata, run.problems);
  if (const std::string* label = run.metadata.find_text("label")) r.label = *label;
  if (const double* rate = run.metadata.find_number("problems_per_s")) r.problems_per_s = *rate;
  // Each engine's computed prefill tokens (not a table column) are kept as ENGINE.prefill_tokens.
  for (const EngineRecords& e : run.engines) {
    const double* computed = run.metadata.find_number(e.name + ".prefill_tokens");
    r.computed_prefill_tokens.push_back(computed ? std::int64_t(*computed) : 0);
  }
  r.metadata = std::move(run.metadata);
  r.summary = std::move(run.summary);
  r.records = std::make_shared<std::vector<EngineRecords>>(std::move(run.engines));
  r.problems = std::move(run.problems);
  r.record = run.level;
  return r;
}

std::vector<char> encode_outcome(const PointOutcome& o) {
  Out out;
  out.value(std::uint64_t(o.index)), out.value(o.status), out.value(o.busy_s), out.value(o.rank);
  out.text(o.error);
  if (o.status == PointStatus::Done) out.rows(encode_result(o.result));
  return std::move(out.bytes);
}

PointOutcome decode_outcome(const std::vector<char>& bytes) {
  In in{bytes};
  PointOutcome o;
  o.index = std::size_t(in.value<std::uint64_t>());
  o.status = in.value<PointStatus>();
  o.busy_s = in.value<double>();
  o.rank = in.value<int>();
  o.error = in.text();
  if (o.status == PointStatus::Done) o.result = decode_result(in.rows<char>());
  if (in.at != bytes.size()) throw Error("a sweep point's outcome from another rank has trailing bytes");
  return o;
}

}  // namespace duet::lua
