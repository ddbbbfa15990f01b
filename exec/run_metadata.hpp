#pragma once
// The run configuration stored as attributes of every HDF5 run file.
#include <string>
#include <vector>

#include "core/engine_config.hpp"
#include "core/gpu_spec.hpp"
#include "core/memory_plan.hpp"
#include "io/hdf5_run.hpp"

namespace duet {

RunMetadata run_metadata(const std::string& backend, const std::string& command_line, const GpuSpec& gpu,
                         const MemoryPlan& plan, const std::vector<EngineConfig>& engines);

}  // namespace duet
