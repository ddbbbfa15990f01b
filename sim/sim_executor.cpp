#include "sim/sim_executor.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include "core/error.hpp"
#include "core/output_script.hpp"

namespace duet {

StepResult SimExecutor::execute(const Batch& batch) {
  StepResult r;
  const BatchShape& shape = batch.shape;
  if (shape.prefill_seqs + shape.decode_seqs != int(batch.items.size()))
    throw std::logic_error("SimExecutor: the batch's shape was never set (shape_of)");
  const bool warm = turns_->last_engine == engine_;
  turns_->last_engine = engine_;
  const StepCost cost = warm ? cost_.warm_step_cost(shape) : cost_.step_cost(shape);
  // A time that is no time (an edited profile's inf, a NaN) would run on to a file of nonsense.
  if (!(std::isfinite(cost.device_s) && cost.device_s > 0 && std::isfinite(cost.host_s) && cost.host_s >= 0))
    throw Error(cost_.describe() + " priced a step of " +
                std::to_string(shape.prefill_tokens + shape.decode_tokens) + " tokens at " +
                std::to_string(cost.device_s) + " s on the device and " + std::to_string(cost.host_s) +
                " s on the host: not a step's time (check the cost model's file)");
  r.duration_s = cost.device_s;
  r.host_s = cost.host_s;
  r.tokens.reserve(batch.items.size());
  for (const BatchItem& it : batch.items) {
    const Sequence& s = *it.seq;
    r.tokens.push_back(it.want == Want::Sample ? scripted_token(s, s.num_output_tokens(), vocab_size_)
                                               : kNoToken);
    // Scores are numbered by position order across the whole sequence, whatever the chunking.
    const auto positions = positions_to_score(it);
    if (positions.empty()) continue;
    const int first = int(positions.data() - s.score_positions.data());
    for (std::size_t k = 0; k < positions.size(); ++k)
      r.scores.push_back(scripted_score(s, first + int(k), positions[k]));
  }
  return r;
}

}  // namespace duet
