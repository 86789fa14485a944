// Activation recompute of the ResNet (train.recompute = "blocks"): losses, every gradient and
// the BatchNorm running statistics equal the stored-activation model's bit for bit in every
// regime and with stochastic depth, while the blocks' stored activations shrink to one set.
// (The GPT's: Gpt.Recompute* in test_gpt.cpp.)
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "engine/layers/batchnorm.h"
#include "engine/subnet/param.h"
#include "engine/subnet/plan.h"
#include "models/model.h"
#include "tests/unit/tiny_models.h"

namespace subdp {
namespace {

TEST(ResNetRecompute, SameLossesGradientsAndRunningStatisticsBitForBit) {
  const ModelConfig c = test::tiny_resnet();
  const ModelUnits units = model_units(c);
  std::vector<std::pair<std::string, SubnetMask>> masks = {{"dp", full_mask(units)}};
  for (const char* regime : {"forward", "backward"})
    for (const char* gran : {"block", "neuron"})
      masks.emplace_back(std::string(regime) + "-" + gran, test::planned_mask(units, regime, gran, 2, 0.5, 1, 4));
  for (const auto& [what, mask] : masks)
    for (const bool stochastic : {false, true}) {
      if (stochastic && what != "dp") continue;
      auto stored = make_model(c, mask, 3, 8, false), recomputed = make_model(c, mask, 3, 8, true);
      for (Model* m : {stored.get(), recomputed.get()}) {
        test::randomize_norms(*m);
        if (stochastic) m->set_dropped_blocks({0, 1, 0, 1}, {0, 0, 0, 0}, 2.f);
      }
      for (int step = 0; step < 2; ++step) {
        const Batch batch = test::random_image_batch(c, 3, 20 + step);
        const double loss = test::forward_backward(*stored, batch);
        EXPECT_EQ(loss, test::forward_backward(*recomputed, batch)) << what << " step " << step;
        std::map<std::string, Param*> b;
        for (Param* p : recomputed->params().all()) b[p->name] = p;
        for (Param* p : stored->params().all()) {
          ASSERT_EQ(std::memcmp(p->value.f32(), b[p->name]->value.f32(), p->value.nbytes()), 0)
              << what << ": value of " << p->name;  // BatchNorm running statistics included
          if (p->grad.defined())
            ASSERT_EQ(std::memcmp(p->grad.f32(), b[p->name]->grad.f32(), p->grad.nbytes()), 0)
                << what << " step " << step << ": gradient of " << p->name;
        }
      }
    }
}

TEST(ResNetRecompute, StoresLessActivation) {
  const ModelConfig c = test::tiny_resnet();
  auto bytes = [&](bool recompute) {
    return MemoryTracker::global()
        .measure([&] { make_model(c, full_mask(model_units(c)), 8, 1, recompute); })
        .peak[static_cast<int>(MemCategory::activations)];
  };
  EXPECT_LT(bytes(true), bytes(false));
}

}  // namespace
}  // namespace subdp
