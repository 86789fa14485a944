// Model registry: units and construction by name.
#include "models/model.h"

#include "engine/error.h"
#include "models/mlp.h"
#include "models/resnet.h"
#include "models/gpt.h"

namespace subdp {

void Model::set_dropped_blocks(const std::vector<char>&, const std::vector<char>&, float) {
  throw Error("mask.regime = \"stochastic\": this model has no residual blocks to drop (use resnet or gpt)");
}

Batch Batch::allocate(const Shape& x_shape, DType x_dtype, const Shape& y_shape, DType y_dtype) {
  Batch b;
  b.x = Tensor::empty(x_shape, MemCategory::activations, x_dtype);
  b.y = Tensor::empty(y_shape, MemCategory::activations, y_dtype);
  b.x_host = b.x.on_host() ? b.x : Tensor::host_empty(x_shape, MemCategory::activations, x_dtype);
  b.y_host = b.y.on_host() ? b.y : Tensor::host_empty(y_shape, MemCategory::activations, y_dtype);
  return b;
}

void Batch::upload() const {
  for (auto [device, host] : {std::pair{x, x_host}, std::pair{y, y_host}}) {
    if (!host.defined() || host.raw() == device.raw() || n == 0) continue;
    device.slice0(0, n).copy_from(host.slice0(0, n));
  }
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
