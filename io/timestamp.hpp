#pragma once
// The time a file duet writes was made, as its created_utc says it: ISO 8601 in UTC, to the second.
#include <ctime>
#include <string>

namespace duet {

inline std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);  // not std::gmtime: its static result is shared between threads
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

}  // namespace duet
