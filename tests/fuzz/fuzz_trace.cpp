// libFuzzer target: the trace readers (Azure CSV, Mooncake JSON lines, format detection). Any
// input must either parse or throw duet::Error; the sanitizers catch everything else. A parsed
// trace is then used the way the simulator uses it.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.hpp"
#include "io/trace.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    duet::Trace trace = duet::parse_trace(text, "fuzz.trace");
    if (trace.requests.empty()) return 0;
    duet::reference_prefix_hit_rate(trace);
    duet::scale_arrivals(trace, 2.0);
    // Prompt tokens of the first requests, bounded so that a huge input_tokens is not a timeout.
    for (std::size_t i = 0; i < trace.requests.size() && i < 4; ++i)
      if (trace.requests[i].input_tokens <= 1 << 16) duet::trace_prompt_tokens(trace, i, 32000, 7);
  } catch (const duet::Error&) {
  }
  return 0;
}
