// libFuzzer target: the safetensors header parser and the tensor views it hands out. A file that
// opens must have every view inside its bytes, which converting each small tensor checks under
// AddressSanitizer (from_bytes keeps the bytes on the heap for exactly that).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.hpp"
#include "exec/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::byte> bytes(size);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = std::byte{data[i]};
  try {
    const duet::SafetensorsFile file =
        duet::SafetensorsFile::from_bytes("fuzz.safetensors", std::move(bytes));
    for (const std::string& name : file.names()) {
      const duet::TensorView* view = file.find(name);
      if (view != nullptr && view->bytes.size() <= 1 << 16) (void)duet::to_float_vector(*view);
    }
  } catch (const duet::Error&) {
  }
  return 0;
}
