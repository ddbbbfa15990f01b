#pragma once
// Public request traces: what arrived when, with how many tokens in and out, and (Mooncake)
// which prompt blocks are shared. Importers turn each format into one Trace.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.hpp"

namespace duet {

struct TraceRequest {
  double arrival_s = 0.0;  // from the start of the trace
  int input_tokens = 0;
  int output_tokens = 0;
  std::vector<std::int64_t> hash_ids;  // Mooncake: one id per hash_block_size prompt tokens
};

enum class TraceFormat { Auto, AzureCsv, MooncakeJsonl };

struct Trace {
  std::string source;  // the file it came from
  TraceFormat format = TraceFormat::Auto;
  int hash_block_size = 0;             // Mooncake: 512; 0 when the trace records no sharing
  std::vector<TraceRequest> requests;  // in arrival order
};

TraceFormat trace_format_from_name(const std::string& name);  // "auto", "azure", "mooncake"

// A fingerprint of the first `max_requests` requests (0: all; their arrival times, lengths and
// block hashes) and the hash block size: what a replay ran, whatever file or options it came from
// (core/mix.hpp's fingerprint).
std::string trace_fingerprint(const Trace& trace, std::size_t max_requests = 0);

// Reads a trace file; .gz files are decompressed. Auto detects the format from the content.
// Errors (duet::Error) name the file and line: a malformed row, a bad field, a missing header.
Trace load_trace(const std::string& path, TraceFormat format = TraceFormat::Auto);
// The same on a file's (decompressed) bytes; `path` names them in errors.
Trace parse_trace(std::string_view text, const std::string& path, TraceFormat format = TraceFormat::Auto);

// The prompt token ids of a request, deterministic for (trace, request index, seed). With
// hash_ids, block k's tokens depend only on (hash_ids[k], seed), so that requests sharing a hash
// id share exactly those tokens and the prefix cache sees the sharing the trace records; the last
// block is cut to the request's input length. Without hash_ids the tokens are unique per request.
std::vector<TokenId> trace_prompt_tokens(const Trace& trace, std::size_t index, int vocab_size,
                                         std::uint64_t seed = 0);

// Scales arrival times by 1/rate_scale (2.0 replays twice as fast). rate_scale must be positive.
void scale_arrivals(Trace& trace, double rate_scale);

// The prefix-cache hit rate the Mooncake README defines, as a reference for the simulator's:
// Σ min(hash_block_size × leading blocks already seen, input_tokens) / Σ input_tokens, replayed in
// trace order with an unbounded cache. A request's leading blocks count while their hash ids
// appeared in some earlier request; counting stops at the first unseen one. 0 without hash_ids.
double reference_prefix_hit_rate(const Trace& trace);

}  // namespace duet
