// duet cost: what one step of a given batch costs under a cost model, and why, by operator.
#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "cli/commands.hpp"
#include "cli/source_dir.hpp"
#include "core/error.hpp"
#include "core/gpu_spec.hpp"
#include "core/model_spec.hpp"
#include "io/file_bytes.hpp"
#include "sim/operator_model.hpp"
#include "sim/profiles.hpp"

namespace po = boost::program_options;

namespace duet::cli {

namespace {

struct BatchArgs {
  int prefill_tokens = 0, prefill_seqs = 1, decode_seqs = 0;
  std::int64_t prefill_context = 0, decode_context = 0;
};

// Prefill: prefill_seqs chunks of prefill_tokens / prefill_seqs new tokens, each after
// prefill_context cached ones. Decode: decode_seqs sequences of decode_context tokens. Every
// sequence samples one token (one LM-head row).
BatchShape batch_of(const BatchArgs& a) {
  check_at_least("--prefill-tokens", a.prefill_tokens, 0);
  check_at_least("--prefill-context", a.prefill_context, 0);
  check_at_least("--decode-seqs", a.decode_seqs, 0);
  check_at_least("--decode-context", a.decode_context, 0);
  // A context is a position of a sequence (32 bits in the engines); beyond that the step's sums of
  // keys would overflow into a negative time.
  for (const auto& [flag, value] :
       {std::pair{"--prefill-context", a.prefill_context}, {"--decode-context", a.decode_context}})
    if (value > std::numeric_limits<std::int32_t>::max())
      throw Error(std::string(flag) + " must be below 2^31 tokens, got " + std::to_string(value));
  if (a.prefill_tokens == 0 && a.decode_seqs == 0)
    throw Error("give --prefill-tokens T and/or --decode-seqs B");
  if (a.prefill_tokens > 0 && (a.prefill_seqs < 1 || a.prefill_seqs > a.prefill_tokens))
    throw Error("--prefill-seqs must be between 1 and --prefill-tokens (" + std::to_string(a.prefill_tokens) +
                "), got " + std::to_string(a.prefill_seqs));
  BatchShape s;
  if (a.prefill_tokens > 0)
    for (int i = 0; i < a.prefill_seqs; ++i)
      add_prefill_chunk(s,
                        a.prefill_tokens / a.prefill_seqs + (i < a.prefill_tokens % a.prefill_seqs ? 1 : 0),
                        a.prefill_context);
  for (int i = 0; i < a.decode_seqs; ++i) add_decode(s, a.decode_context);
  s.logit_rows = s.prefill_seqs + s.decode_seqs;
  return s;
}

// "roofline", "operator", "auto", "operator:PRIOR.json" or "profile:PROFILE.json" (as the simulator
// takes them), or a bare JSON file: an operator prior or a measured profile, told by its format.
std::string model_name_of(const std::string& arg) {
  if (is_cost_model_name(arg)) return arg;
  if (!std::filesystem::exists(arg))
    throw Error(
        "--cost-model: '" + arg +
        "' is neither roofline, operator, auto, operator:PRIOR.json, profile:PROFILE.json nor a JSON file");
  const nlohmann::json j = read_json_file(arg);
  // Any version of the prior family goes to the prior's reader, which names the version it wants.
  const std::string_view family = kOperatorPriorFormat.substr(0, kOperatorPriorFormat.find('/'));
  return (j.value("format", "").starts_with(family) ? "operator:" : "profile:") + arg;
}

nlohmann::json to_json(const StepBreakdown& b, const std::string& model, const std::string& gpu,
                       const std::string& cost) {
  nlohmann::json layer;
  for (std::size_t i = 0; i < kLayerOperators.size(); ++i) layer[kLayerOperators[i]] = b.per_layer_s[i];
  return {{"model", model},
          {"gpu", gpu},
          {"cost_model", cost},
          {"step_s", b.step_s()},
          {"device_s", b.device_s()},
          {"layers", b.layers},
          {"per_layer_s", layer},
          {"lm_head_s", b.lm_head_s},
          {"sampling_s", b.sampling_s},
          {"other_s", b.other_s},
          {"unattributed_s", b.unattributed_s},
          {"host_s", b.host_s},
          {"outside_fitted_range", b.outside}};
}

// `head`: the output head's row ("lm_head", or a PRM's "score_head").
void print_table(const StepBreakdown& b, const char* head) {
  const double step = b.step_s();
  std::printf("%-14s %14s %12s %7s\n", "operator", "per layer us", "step us", "share");
  auto row = [&](const char* name, double per_layer, double total) {
    if (per_layer >= 0)
      std::printf("%-14s %14.2f %12.2f %6.1f%%\n", name, 1e6 * per_layer, 1e6 * total, 100 * total / step);
    else std::printf("%-14s %14s %12.2f %6.1f%%\n", name, "", 1e6 * total, 100 * total / step);
  };
  for (std::size_t i = 0; i < kLayerOperators.size(); ++i)
    row(kLayerOperators[i], b.per_layer_s[i], b.layers * b.per_layer_s[i]);
  row(head, -1, b.lm_head_s);
  row("sampling", -1, b.sampling_s);
  row("other", -1, b.other_s);
  if (b.unattributed_s > 0) row("unattributed", -1, b.unattributed_s);
  row("host", -1, b.host_s);
  std::printf("%-14s %14s %12.2f %6.1f%%\n", "step", "", 1e6 * step, 100.0);
}

}  // namespace

int cost(int argc, char** argv) {
  std::string model_arg, gpu_arg, cost_arg = "auto";
  BatchArgs a;
  bool json = false;
  po::options_description options("duet cost: one step of a batch, priced by operator");
  options.add_options()("model", po::value(&model_arg)->required(),
                        "a built-in model or a Hugging Face config.json")(
      "gpu", po::value(&gpu_arg)->required(), "h100, h200, a100, a100-40gb, or a GPU description (.json)")(
      "cost-model", po::value(&cost_arg)->default_value("auto"),
      "roofline, operator (the GPU's prior), auto (as the simulator chooses), operator:PRIOR.json, "
      "profile:PROFILE.json, or a prior or profile JSON")("prefill-tokens", po::value(&a.prefill_tokens),
                                                          "new prompt tokens in the step")(
      "prefill-seqs", po::value(&a.prefill_seqs)->default_value(1),
      "chunks the prefill tokens are split into")("prefill-context",
                                                  po::value(&a.prefill_context)->default_value(0),
                                                  "cached tokens before each prefill chunk")(
      "decode-seqs", po::value(&a.decode_seqs), "sequences decoding one token each")(
      "decode-context", po::value(&a.decode_context), "tokens already in each decoding sequence")(
      "json", po::bool_switch(&json), "one JSON object instead of the table")("help,h", "this help");
  return run_command({"cost", options}, argc, argv, [&](const po::variables_map& vm) {
    const ModelSpec model = model_from(model_arg);
    const GpuSpec gpu = gpu_from(gpu_arg);
    // A decoding sequence holds at least its prompt: a context left out is a mistake, not zero.
    if (a.decode_seqs > 0 && !vm.count("decode-context"))
      throw UsageError("give --decode-context C, the tokens already in each decoding sequence");
    if (a.decode_seqs > 0) check_at_least("--decode-context", a.decode_context, 1);
    // A shape flag without its batch would be ignored.
    if (a.decode_seqs == 0 && vm.count("decode-context"))
      throw UsageError("--decode-context needs --decode-seqs B (the sequences that decode)");
    if (a.prefill_tokens == 0 && (!vm["prefill-context"].defaulted() || !vm["prefill-seqs"].defaulted()))
      throw UsageError(
          "--prefill-context and --prefill-seqs need --prefill-tokens T (the tokens to prefill)");
    const BatchShape shape = batch_of(a);
    const ChosenCostModel chosen = choose_cost_model(model_name_of(cost_arg), gpu, model, gpu_device_key(gpu),
                                                     source_dir() + "/profiles");
    const StepBreakdown b = chosen.model->by_operator(shape);
    // A measured profile prices whole steps: its own report says where the step left its grid.
    const std::string note = b.outside.empty() ? chosen.model->extrapolation_report() : "";
    if (json) {
      nlohmann::json j = to_json(b, model.name, gpu.name, chosen.model->describe());
      if (!note.empty()) j["outside_fitted_range"].push_back(note);
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      std::printf("%s on %s: %s\n", model.name.c_str(), gpu.name.c_str(), chosen.reason.c_str());
      std::printf(
          "batch: %d prefill tokens in %d chunk(s) after %lld cached each; %d decodes at context %lld\n\n",
          shape.prefill_tokens, shape.prefill_seqs, (long long)a.prefill_context, shape.decode_seqs,
          (long long)a.decode_context);
      print_table(b, model.can_generate() ? "lm_head" : "score_head");
      if (b.unattributed_s > 0)
        std::printf("\n(a measured profile prices whole steps; it does not split them by operator)\n");
    }
    // Priced all the same (a what-if), but no engine of this model would run it.
    const std::int64_t longest = std::max<std::int64_t>(
        a.decode_seqs > 0 ? a.decode_context + 1 : 0,
        a.prefill_tokens > 0 ? a.prefill_context + (a.prefill_tokens + a.prefill_seqs - 1) / a.prefill_seqs
                             : 0);
    if (longest > model.max_position_embeddings)
      std::fprintf(
          stderr,
          "duet cost: warning: a sequence of %lld tokens is beyond %s's max_position_embeddings (%d)\n",
          (long long)longest, model.name.c_str(), model.max_position_embeddings);
    for (const std::string& o : b.outside)
      std::fprintf(
          stderr,
          "duet cost: warning: %s is beyond the tables the prior was fitted on; priced at their edge\n",
          o.c_str());
    if (!note.empty()) std::fprintf(stderr, "duet cost: warning: %s\n", note.c_str());
    return 0;
  });
}

}  // namespace duet::cli
