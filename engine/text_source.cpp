// Text data source placeholder until the transformer lands (issue 4).
#include "engine/data_source.h"
#include "engine/error.h"

namespace subdp {

std::unique_ptr<DataSource> make_text_source(const Config& c, int, int) {
  throw Error(fmt::format("data.name = \"{}\": text data is not built yet", c.data.name));
}

}  // namespace subdp
