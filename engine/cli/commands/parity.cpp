// run_parity_dump: what the PyTorch parity tests compare against (tests/parity/).
#include <cmath>
#include <filesystem>

#include "engine/core/backend.h"
#include "engine/cli/commands.h"
#include "engine/data/data_source.h"
#include "engine/core/error.h"
#include "engine/io/safetensors.h"
#include "engine/optim/optimizer.h"
#include "models/model.h"

namespace subdp {

namespace {

NamedTensor named(const std::string& name, const Shape& shape, const float* data) {
  return {name, shape, std::vector<float>(data, data + shape_numel(shape))};
}

NamedTensor as_float(const std::string& name, const Tensor& t, int64_t n_rows) {
  Shape shape = t.shape();
  shape[0] = n_rows;
  NamedTensor out{name, shape, std::vector<float>(shape_numel(shape))};
  const HostCopy host(t);
  for (int64_t i = 0; i < shape_numel(shape); ++i)
    out.data[i] = t.dtype() == DType::i32 ? static_cast<float>(host.i32()[i]) : host.f32()[i];
  return out;
}

}  // namespace

int run_parity_dump(const Config& config, const std::string& out_dir, int steps) {
  // The dump is the full model on one process, what the PyTorch twin computes; masking would
  // be silently ignored, so a masked config is refused.
  SUBDP_CHECK(config.mask.regime == MaskRegime::none,
              "parity-dump runs the full model on one process (the PyTorch twin's computation): [mask] regime = \"{}\" "
              "would be ignored; use --set mask.regime=none",
              config.mask.regime);
  SUBDP_CHECK(config.parallel.subnetworks == 1,
              "parity-dump runs the full model on one process (the PyTorch twin's computation): [parallel] subnetworks "
              "= {} would be ignored; use --set parallel.subnetworks=1",
              config.parallel.subnetworks);
  SUBDP_CHECK(config.device.precision == Precision::fp32,
              "parity-dump compares with the PyTorch twin in float32: [device] precision = \"{}\" would be ignored; "
              "use --set device.precision=fp32",
              config.device.precision);
  set_backend(make_backend(config.device.type));
  backend().configure(config.train.threads > 0 ? config.train.threads : 1, winograd_tile_side(config.train));
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  SUBDP_CHECK(!ec && std::filesystem::is_directory(out_dir), "parity-dump OUT_DIR \"{}\": cannot create the folder: {}",
              out_dir, ec ? ec.message() : "a file of that name exists");
  const ModelUnits units = model_units(config.model);
  auto model = make_model(config.model, full_mask(units), config.train.batch_size, config.train.seed);
  model->keep_logits();  // the training forward's logits are compared, not overwritten by dlogits
  auto data = make_data_source(config, 0, 1);
  Batch batch = data->make_batch();
  data->train_batch(0, 0, batch);
  std::vector<NamedTensor> weights, outputs;
  for (Param* p : model->params().all()) weights.push_back(named(p->name, p->full_shape, host_values(p->value).data()));
  save_safetensors(out_dir + "/weights.safetensors", weights);
  save_safetensors(out_dir + "/batch.safetensors", {as_float("x", batch.x, batch.n), as_float("y", batch.y, batch.n)});
  model->zero_grad();
  const double loss = model->forward(batch, true, nullptr);
  model->backward();
  const int64_t rows = batch.n * model->positions_per_example();
  const int64_t classes = is_language_model(config.model.name) ? config.model.vocab : config.model.classes;
  const std::vector<float> logits = model->read_logits(0, rows);
  SUBDP_CHECK(!logits.empty(), "model.name = \"{}\" does not expose its logits", config.model.name);
  outputs.push_back(named("logits", {rows, classes}, logits.data()));
  const float loss_f = static_cast<float>(loss);
  outputs.push_back(named("loss", {1}, &loss_f));
  for (Param* p : model->params().trainable())
    outputs.push_back(named("grad." + p->name, p->full_shape, host_values(p->grad).data()));
  save_safetensors(out_dir + "/outputs.safetensors", outputs);
  // Optimizer steps on the same batch (the update itself is compared through the losses).
  // Each step's loss and update must be finite (a JSON file holds no NaN, and the next forward
  // asserts that the update's non-finite count was read); written once, whole, at the end.
  auto opt = make_optimizer(config.optim, model->params().trainable());
  std::string losses = "[";
  for (int s = 0; s < steps; ++s) {
    model->zero_grad();
    const double l = model->forward(batch, true, nullptr);
    model->backward();
    opt->step(config.optim.lr);
    const StepCounters c = backend().take_counters();
    SUBDP_CHECK(std::isfinite(l) && c.nonfinite_writes == 0,
                "parity-dump: step {} diverged (loss {}, {} non-finite values written by the update; optim.lr = {}): "
                "nothing to compare, {} not written",
                s + 1, l, c.nonfinite_writes, config.optim.lr, out_dir + "/losses.json");
    losses += (s ? ", " : "") + fmt::format("{:.9g}", l);
  }
  write_file_atomic(out_dir + "/losses.json", losses + "]\n");
  return 0;
}

}  // namespace subdp
