// Model registry: units and construction by name.
#include "models/model.h"

#include "engine/core/error.h"
#include "models/mlp.h"
#include "models/resnet.h"
#include "models/gpt.h"

namespace subdp {

void Model::set_dropped_blocks(const std::vector<char>&, const std::vector<char>&, float) {
  throw Error("mask.regime = \"stochastic\": this model has no residual blocks to drop (use resnet or gpt)");
}

void Model::zero_grad() {
  for (Param* p : params_.trainable()) p->grad.zero_();
}

ModelUnits model_units(const ModelConfig& c) {
  if (c.name == "mlp") return mlp_units(c);
  if (c.name == "resnet") return resnet_units(c);
  if (c.name == "gpt") return gpt_units(c);
  throw Error(fmt::format("model.name = \"{}\": expected mlp, resnet or gpt", c.name));
}

std::unique_ptr<Model> make_model(const ModelConfig& c, const SubnetMask& mask, int max_batch, uint64_t seed,
                                  bool recompute_blocks, ParamLayout layout) {
  SUBDP_CHECK(!recompute_blocks || c.name != "mlp", "train.recompute = \"blocks\": model.name = \"mlp\" has no "
              "blocks (use resnet or gpt)");
  std::unique_ptr<Model> model;
  if (c.name == "mlp") model = std::make_unique<Mlp>(c, mask, max_batch, seed);  // no blocks: every layout per parameter
  else if (c.name == "resnet") model = std::make_unique<ResNet>(c, mask, max_batch, seed, recompute_blocks, layout);
  else if (c.name == "gpt") model = make_gpt(c, mask, max_batch, seed, recompute_blocks, layout);
  else throw Error(fmt::format("model.name = \"{}\": expected mlp, resnet or gpt", c.name));
  model->params().allocate_shared_blocks();
  return model;
}

}  // namespace subdp
