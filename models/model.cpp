// Model registry: units and construction by name.
#include "models/model.h"

#include "engine/core/backend.h"
#include "engine/core/error.h"
#include "models/mlp.h"
#include "models/resnet.h"
#include "models/gpt.h"
#include "models/llama.h"

namespace subdp {

void Model::set_dropped_blocks(const std::vector<char>& dropped, const std::vector<char>& dense, float scale) {
  const size_t blocks = static_cast<size_t>(residual_blocks());
  SUBDP_CHECK(blocks > 0,
              "mask.regime = \"stochastic\": this model has no residual blocks to drop (use resnet, gpt or llama)");
  SUBDP_ASSERT(dropped.size() == blocks && dense.size() == blocks);
  dropped_ = dropped;
  dense_ = dense;
  drop_scale_ = scale;
}

double Model::forward(const Batch& batch, bool training, int64_t* correct) {
  enqueue_forward(batch, training);
  const StepCounters c = backend().take_counters();
  check_forward_counters(c);
  SUBDP_ASSERT(c.nonfinite == 0 && c.nonfinite_writes == 0);  // the trainer reads those before any other forward
  if (correct) *correct = c.correct;
  return c.loss_rows ? c.loss_sum / static_cast<double>(c.loss_rows) : 0.0;
}

void check_forward_counters(const StepCounters& c) {
  SUBDP_CHECK(c.bad_ids == 0,
              "{} embedding ids outside their table in this forward pass (token ids must lie in [0, model.vocab); "
              "the data sources check them when they load, so a broken caller or corrupted memory wrote them)",
              c.bad_ids);
}

void Model::zero_grad() {
  for (Param* p : params_.trainable()) p->grad.zero_();
}

ModelUnits model_units(const ModelConfig& c) {
  switch (c.name) {
    case ModelKind::mlp: return mlp_units(c);
    case ModelKind::resnet: return resnet_units(c);
    case ModelKind::gpt: return gpt_units(c);
    case ModelKind::llama: return llama_units(c);
  }
  throw Error("model.name: not a model");
}

std::unique_ptr<Model> make_model(const ModelConfig& c, const SubnetMask& mask, int max_batch, uint64_t seed,
                                  bool recompute_blocks, ParamLayout layout) {
  SUBDP_CHECK(!recompute_blocks || c.name != ModelKind::mlp,
              "train.recompute = \"blocks\": model.name = \"mlp\" has no "
              "blocks (use resnet, gpt or llama)");
  std::unique_ptr<Model> model;
  switch (c.name) {
    case ModelKind::mlp:
      model = std::make_unique<Mlp>(c, mask, max_batch, seed);
      break;  // no blocks: every layout per parameter
    case ModelKind::resnet: model = std::make_unique<ResNet>(c, mask, max_batch, seed, recompute_blocks, layout); break;
    case ModelKind::gpt: model = make_gpt(c, mask, max_batch, seed, recompute_blocks, layout); break;
    case ModelKind::llama: model = make_llama(c, mask, max_batch, seed, recompute_blocks, layout); break;
  }
  SUBDP_CHECK(model != nullptr, "model.name: not a model");
  model->params().allocate_shared_blocks();
  return model;
}

}  // namespace subdp
