// libFuzzer target: the cost-model files the simulator reads, a measured calibration profile
// (`duet profile`) and an operator prior (`duet fit-ops`). Each input is tried as both; each must
// load or throw duet::Error.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.hpp"
#include "sim/calibrated.hpp"
#include "sim/operator_model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    (void)duet::parse_profile(std::string(text), "fuzz/profile.json");
  } catch (const duet::Error&) {
  }
  try {
    (void)duet::parse_prior(text, "fuzz/operator-prior.json");
  } catch (const duet::Error&) {
  }
  return 0;
}
