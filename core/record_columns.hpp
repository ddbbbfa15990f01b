#pragma once
// The columns of the run tables (steps, requests, problems): one list per record, read by the
// HDF5 file's schema (io/hdf5_run.cpp) and by Lua's result.timeline alike.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "core/metrics.hpp"

namespace duet {

enum class ColumnKind { I32, I64, U64, U8, F64 };

template <class T>
constexpr ColumnKind column_kind() {
  if constexpr (std::is_same_v<T, std::int32_t>) return ColumnKind::I32;
  else if constexpr (std::is_same_v<T, std::int64_t>) return ColumnKind::I64;
  else if constexpr (std::is_same_v<T, std::uint64_t>) return ColumnKind::U64;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return ColumnKind::U8;
  else {
    static_assert(std::is_same_v<T, double>, "no column kind chosen for this field type");
    return ColumnKind::F64;
  }
}

struct Column {
  const char* name;
  std::size_t offset;
  ColumnKind kind;
  const char* unit;

  // The value in `row` (a record of the column's table) as a double, or as an integer.
  double number(const void* row) const;
  std::int64_t integer(const void* row) const;
};

// The column name is the member's name and its type the member's type, by construction.
#define DUET_COLUMN(Row, member, unit) \
  Column { #member, offsetof(Row, member), column_kind < decltype(Row::member)>(), unit }

constexpr std::array kStepColumns{
    DUET_COLUMN(StepRecord, start_s, "s"),
    DUET_COLUMN(StepRecord, duration_s, "s"),
    DUET_COLUMN(StepRecord, host_s, "s"),
    DUET_COLUMN(StepRecord, cpu_s, "s"),
    DUET_COLUMN(StepRecord, prefill_tokens, "tokens"),
    DUET_COLUMN(StepRecord, decode_tokens, "tokens"),
    DUET_COLUMN(StepRecord, num_seqs, "count"),
    DUET_COLUMN(StepRecord, decode_seqs, "count"),
    DUET_COLUMN(StepRecord, decode_context_tokens, "tokens"),
    DUET_COLUMN(StepRecord, decode_distinct_context_tokens, "tokens"),
    DUET_COLUMN(StepRecord, prefill_attention_keys, "count"),
    DUET_COLUMN(StepRecord, prefill_context_tokens, "tokens"),
    DUET_COLUMN(StepRecord, prefill_tokens_squared, "tokens^2"),
    DUET_COLUMN(StepRecord, logit_rows, "rows"),
    DUET_COLUMN(StepRecord, num_running, "count"),
    DUET_COLUMN(StepRecord, num_waiting, "count"),
    DUET_COLUMN(StepRecord, kv_blocks_used, "blocks"),
    DUET_COLUMN(StepRecord, kv_blocks_free, "blocks"),
    DUET_COLUMN(StepRecord, kv_blocks_cached, "blocks"),
    DUET_COLUMN(StepRecord, kv_filled_tokens, "tokens"),
    DUET_COLUMN(StepRecord, prefix_query_tokens, "tokens"),
    DUET_COLUMN(StepRecord, prefix_hit_tokens, "tokens"),
    DUET_COLUMN(StepRecord, evictions, "blocks"),
    DUET_COLUMN(StepRecord, preemptions, "count"),
    DUET_COLUMN(StepRecord, cow_copies, "blocks"),
};

constexpr std::array kRequestColumns{
    DUET_COLUMN(RequestRecord, seq_id, "id"),
    DUET_COLUMN(RequestRecord, owner, "id"),
    DUET_COLUMN(RequestRecord, kind, "enum"),
    DUET_COLUMN(RequestRecord, finish_reason, "enum"),
    DUET_COLUMN(RequestRecord, arrival_s, "s"),
    DUET_COLUMN(RequestRecord, first_scheduled_s, "s"),
    DUET_COLUMN(RequestRecord, first_token_s, "s"),
    DUET_COLUMN(RequestRecord, finish_s, "s"),
    DUET_COLUMN(RequestRecord, prompt_tokens, "tokens"),
    DUET_COLUMN(RequestRecord, output_tokens, "tokens"),
    DUET_COLUMN(RequestRecord, cached_tokens, "tokens"),
    DUET_COLUMN(RequestRecord, preemptions, "count"),
};

constexpr std::array kProblemColumns{
    DUET_COLUMN(ProblemRecord, index, "id"),         DUET_COLUMN(ProblemRecord, level, "enum"),
    DUET_COLUMN(ProblemRecord, iterations, "count"), DUET_COLUMN(ProblemRecord, correct, "enum"),
    DUET_COLUMN(ProblemRecord, start_s, "s"),        DUET_COLUMN(ProblemRecord, finish_s, "s"),
    DUET_COLUMN(ProblemRecord, requests, "count"),   DUET_COLUMN(ProblemRecord, generated_tokens, "tokens"),
    DUET_COLUMN(ProblemRecord, score, "score"),
};

#undef DUET_COLUMN

// The steps table's column of that name (a compile error in a constant expression when none).
constexpr const Column& step_column(std::string_view name) {
  for (const Column& c : kStepColumns)
    if (name == c.name) return c;
  throw "no such column in the steps table";
}

// Number of members of an aggregate: the most initialisers that Row{...} accepts. It makes the
// build fail when core/metrics.hpp gains a field that the column lists here (and the schema in
// analysis/README.md) do not have yet.
struct AnyValue {
  template <class T>
  operator T() const;
};

template <class Row, class... Values>
constexpr std::size_t member_count() {
  if constexpr (requires { Row{Values{}..., AnyValue{}}; }) return member_count<Row, Values..., AnyValue>();
  else return sizeof...(Values);
}

static_assert(member_count<StepRecord>() == kStepColumns.size(), "add the new StepRecord field");
static_assert(member_count<RequestRecord>() == kRequestColumns.size(), "add the new RequestRecord field");
static_assert(member_count<ProblemRecord>() == kProblemColumns.size(), "add the new ProblemRecord field");

// Every EngineSummary field but its two names, by name, in one order: the run file's attributes,
// a sweep point's bytes between ranks and a Lua result all go through it, so that a field added
// to EngineSummary reaches each of them. `visit(name, field)` gets a number or a Percentiles.
template <class Summary, class Visit>
void visit_summary(Summary& s, Visit&& visit) {
  visit("steps", s.steps);
  visit("requests", s.requests);
  visit("prompt_tokens", s.prompt_tokens);
  visit("generated_tokens", s.generated_tokens);
  visit("generated_tokens_per_s", s.generated_tokens_per_s);
  visit("requests_per_s", s.requests_per_s);
  visit("ttft_s", s.ttft_s);
  visit("tpot_s", s.tpot_s);
  visit("e2e_s", s.e2e_s);
  visit("prefix_hit_rate", s.prefix_hit_rate);
  visit("peak_kv_utilisation", s.peak_kv_utilisation);
  visit("mean_kv_utilisation", s.mean_kv_utilisation);
  visit("preemptions", s.preemptions);
  visit("evictions", s.evictions);
  visit("cow_copies", s.cow_copies);
  visit("busy_s", s.busy_s);
}
static_assert(member_count<EngineSummary>() == 18, "add the new EngineSummary field to visit_summary");

namespace detail {
template <class T>
T column_value(const void* row, std::size_t offset) {
  T v;
  std::memcpy(&v, static_cast<const unsigned char*>(row) + offset, sizeof v);
  return v;
}
}  // namespace detail

inline std::int64_t Column::integer(const void* row) const {
  switch (kind) {
    case ColumnKind::I32:
      return detail::column_value<std::int32_t>(row, offset);
    case ColumnKind::I64:
      return detail::column_value<std::int64_t>(row, offset);
    case ColumnKind::U64:
      return std::int64_t(detail::column_value<std::uint64_t>(row, offset));
    case ColumnKind::U8:
      return detail::column_value<std::uint8_t>(row, offset);
    case ColumnKind::F64:
      break;
  }
  return std::int64_t(detail::column_value<double>(row, offset));
}

inline double Column::number(const void* row) const {
  return kind == ColumnKind::F64 ? detail::column_value<double>(row, offset) : double(integer(row));
}

}  // namespace duet
