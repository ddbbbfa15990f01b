// libFuzzer target: a HuggingFace config.json read as a model's shape. Any input must give a
// valid ModelSpec or a duet::Error; a spec that was accepted must then size itself without
// overflow (UBSan traps signed overflow here).
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "core/model_spec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const duet::ModelSpec spec = duet::from_hf_config_text(text, "fuzz/config.json");
    spec.validate();
    (void)spec.kv_bytes_per_token();
    (void)spec.num_parameters();
    (void)spec.weight_bytes();
    (void)spec.prefill_flops(4096, 4096);
    (void)spec.decode_flops(4096);
  } catch (const duet::Error&) {
  }
  return 0;
}
