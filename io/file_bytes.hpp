#pragma once
// Whole files in and out, with errors that name the file: the bytes of a plain or gzip'd file, and
// JSON documents (cost profiles, operator priors, Lua's duet.read_json).
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace duet {

// The whole file, inflated when it starts with gzip's magic bytes whatever its name. A truncated
// or corrupt gzip stream is an error naming the line it reached.
std::string read_file_bytes(const std::string& path);

// Throws duet::Error "PATH: not valid JSON (...)", "PATH: key ... appears twice in one object" or
// "PATH: cannot open: ..." (text in memory: json_fields::parse).
nlohmann::json read_json_file(const std::string& path);

// Writes `json` indented by `indent` spaces and a newline, to PATH.writing renamed over PATH (a
// failed write leaves an earlier file as it was); throws duet::Error naming the file.
void write_json_file(const std::string& path, const nlohmann::json& json, int indent);

}  // namespace duet
