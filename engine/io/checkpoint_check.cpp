// Checks a checkpoint's tensors against the model they are loaded into: names, shapes,
// optimizer state and finiteness, with errors naming the file, the tensor and both shapes.
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "engine/io/checkpoint.h"
#include "engine/core/error.h"
#include "engine/core/tensor.h"

namespace subdp {

namespace {

/// Checks `tensors` (one file) against `expected` (name -> shape): same names, same shapes.
/// `what` names the kind ("tensor", "optimizer state") and `hint` ends every message.
void check_names_and_shapes(const std::string& file, const std::map<std::string, std::vector<int64_t>>& expected,
                            const std::vector<NamedTensor>& tensors, const std::string& what, const std::string& hint) {
  std::set<std::string> seen;
  for (const NamedTensor& t : tensors) {
    auto it = expected.find(t.name);
    SUBDP_CHECK(it != expected.end(), "{}: holds {} {} {} that the model does not have{}", file, what, t.name,
                shape_str(t.shape), hint);
    SUBDP_CHECK(t.shape == it->second, "{}: {} {} has shape {}, the model expects {}{}", file, what, t.name,
                shape_str(t.shape), shape_str(it->second), hint);
    seen.insert(t.name);
  }
  for (const auto& [name, shape] : expected)
    SUBDP_CHECK(seen.count(name), "{}: lacks {} {} {} that the model has{}", file, what, name, shape_str(shape), hint);
}

}  // namespace

void check_finite(const std::string& file, const NamedTensor& t) {
  for (size_t i = 0; i < t.data.size(); ++i)
    SUBDP_CHECK(std::isfinite(t.data[i]),
                "{}: tensor {} holds {} at element {} of {}: a checkpoint never holds "
                "inf or NaN",
                file, t.name, t.data[i], element_str(t.shape, static_cast<int64_t>(i)), shape_str(t.shape));
}

void check_checkpoint_tensors(const std::string& path, const std::vector<FullTensorSpec>& specs, int optimizer_states,
                              OptimizerLoad policy, const std::vector<NamedTensor>& model,
                              std::vector<NamedTensor>& optimizer) {
  const std::string hint = " (a checkpoint of another model, other sizes or another optimizer?)";
  std::map<std::string, std::vector<int64_t>> weights, states;
  for (const FullTensorSpec& s : specs) {
    weights[s.name] = s.shape;
    if (s.trainable)
      for (int k = 0; k < optimizer_states; ++k) states[s.name + "::" + std::to_string(k)] = s.shape;
  }
  const std::filesystem::path dir(path);
  check_names_and_shapes((dir / "model.safetensors").string(), weights, model, "tensor", hint);
  if (policy != OptimizerLoad::require) {
    optimizer.clear();
    return;
  }
  check_names_and_shapes((dir / "optimizer.safetensors").string(), states, optimizer, "optimizer state",
                         fmt::format(" (the run's optimizer keeps {} state tensor(s) per parameter; "
                                     "checkpoint.reset_optimizer = true loads the weights alone and starts the "
                                     "optimizer state from zero)",
                                     optimizer_states));
}

void load_checkpoint_for(const std::string& path, const std::string& model_name,
                         const std::vector<FullTensorSpec>& specs, int optimizer_states, OptimizerLoad policy,
                         CheckpointInfo& info, std::vector<NamedTensor>& model, std::vector<NamedTensor>& optimizer) {
  load_checkpoint(path, info, model, optimizer, policy == OptimizerLoad::require);
  check_checkpoint_for(path, model_name, specs, optimizer_states, policy, info, model, optimizer);
}

void check_checkpoint_for(const std::string& path, const std::string& model_name,
                          const std::vector<FullTensorSpec>& specs, int optimizer_states, OptimizerLoad policy,
                          const CheckpointInfo& info, const std::vector<NamedTensor>& model,
                          std::vector<NamedTensor>& optimizer) {
  SUBDP_CHECK(info.model_name == model_name, "{}: checkpoint of model \"{}\", config says \"{}\"", path,
              info.model_name, model_name);
  check_checkpoint_tensors(path, specs, optimizer_states, policy, model, optimizer);
}

}  // namespace subdp
