#pragma once
// The repository whose data (workloads/, models/, traces/, profiles/) the program reads:
// $DUET_HOME when set (a bundle copied elsewhere), else the source tree it was built from.
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/error.hpp"
#include "core/gpu_spec.hpp"
#include "core/json_fields.hpp"
#include "core/model_spec.hpp"

#ifndef DUET_SOURCE_DIR
#define DUET_SOURCE_DIR "."
#endif

namespace duet::cli {

inline std::string source_dir() {
  const char* home = std::getenv("DUET_HOME");
  return home ? home : DUET_SOURCE_DIR;
}

// A file as given when it exists, else relative to the repository: what scripts and flags name
// (models/tiny-llama/config.json works from any directory).
// A name the file system refuses (too long) resolves to itself, and its reader says why it fails.
inline std::string resolve_path(const std::string& path, const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) return path;
  const std::string in_repo = dir + "/" + path;
  return std::filesystem::exists(in_repo, ec) ? in_repo : path;
}

// An output file's absolute path, for the notebook it is printed for (a notebook's kernel runs in
// the notebook's own folder); the path as given when it has none ("") or the working directory is gone.
inline std::string absolute_path(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path p = path.empty() ? "" : std::filesystem::absolute(path, ec);
  return ec || path.empty() ? path : p.lexically_normal().string();
}

// A built-in model's name, or a config.json path or its folder's (resolve_model) found as
// resolve_path finds it: what an engine's `model`, duet.model() and every --model flag take.
inline ModelSpec model_from(const std::string& name, const std::string& dir = source_dir()) {
  return resolve_model(json_fields::names_a_file(name) ? resolve_path(name, dir) : name);
}

// load_format: "dummy", or a checkpoint (a .safetensors file or a folder of them) found as
// resolve_path finds it; checked on every backend, so that a misspelt path fails on the simulator
// too, not first on a real engine.
inline std::string checkpoint_from(const std::string& load_format, const std::string& dir = source_dir()) {
  if (load_format == "dummy") return load_format;
  std::string path = resolve_path(load_format, dir);
  if (!std::filesystem::exists(path))
    throw Error(
        "'" + load_format +
        "' is neither 'dummy' nor a checkpoint that exists (a .safetensors file or a folder of them)");
  return path;
}

// A built-in GPU's name, or a GPU description's .json path found the same way: what duet.run's
// `gpu`, duet.gpu() and every --gpu flag take.
inline GpuSpec gpu_from(const std::string& name, const std::string& dir = source_dir()) {
  return resolve_gpu(name.ends_with(".json") ? resolve_path(name, dir) : name);
}

}  // namespace duet::cli
