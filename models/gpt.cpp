// Placeholder until the transformer lands (issue 4): refuses clearly.
#include "models/gpt.h"

#include "engine/error.h"

namespace subdp {

ModelUnits gpt_units(const ModelConfig&) { throw Error("model.name = \"gpt\": the transformer is not built yet"); }

std::unique_ptr<Model> make_gpt(const ModelConfig&, const SubnetMask&, int, uint64_t) {
  throw Error("model.name = \"gpt\": the transformer is not built yet");
}

}  // namespace subdp
