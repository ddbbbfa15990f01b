#pragma once
// Tables printed at the end of a run.
#include <cstdio>

#include "core/metrics.hpp"

namespace duet {

void print_summary(const RunSummary& summary, std::FILE* out);

}  // namespace duet
