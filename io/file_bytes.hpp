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

// The file an output path names: itself, or where its symbolic links lead (a link to a file not
// made yet included), so that a command writing beside it and renaming keeps the link a link.
std::string output_target(const std::string& path);

// Writes `json` indented by `indent` spaces and a newline, beside the file (output_target) and
// renamed over it with the earlier file's permissions: a failed write leaves the earlier file as it
// was (a hard link to it keeps the earlier content); throws duet::Error naming the file.
void write_json_file(const std::string& path, const nlohmann::json& json, int indent);

}  // namespace duet
