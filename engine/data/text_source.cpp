// Language-model data source (data.name = "text" or "token_shards"): one token stream split
// into a training part and a validation tail (data.val_fraction), batches of random windows
// of T+1 tokens: x = window[0, T), y = window[1, T+1).
// Training windows come from WindowSampler with a stream per rank, keyed by the global step,
// so ranks draw disjoint streams and a resumed run reproduces its batches. Validation windows
// come from a fixed-seed sampler: the same eval_batches windows at every evaluation, dealt
// round-robin over the evaluation shares.
#include <algorithm>
#include <cstring>

#include "engine/core/hash.h"
#include "engine/data/dataset.h"
#include "engine/data/data_source.h"
#include "engine/core/error.h"

namespace subdp {

std::unique_ptr<DataSource> make_text_source(const Config& config, int rank, int world);

namespace {

constexpr uint64_t kEvalSeed = 0x76616c6964617465ULL;  // "validate": fixed, independent of train.seed

class TextSource : public DataSource {
 public:
  TextSource(const Config& c, int rank, int world)
      : name_(c.data.name),
        batch_size_(c.train.batch_size),
        T_(c.model.context),
        world_(world),
        eval_total_(c.train.eval_batches) {
    SUBDP_CHECK(is_language_model(c.model.name),
                "data.name = \"{}\" is token data: it needs model.name = \"gpt\" or \"llama\", not \"{}\"", c.data.name,
                c.model.name);
    SUBDP_CHECK(name_ == DatasetKind::text || !c.data.path.empty(),
                "data.name = \"token_shards\" needs data.path (an llm.c .bin shard or a directory of them)");
    path_ = c.data.path.empty() ? "data/brown/brown.txt" : c.data.path;
    TokenStream s = with_data_path_key(c, [&] {
      return name_ == DatasetKind::text ? load_text_bytes(path_) : load_token_shards(path_, c.model.vocab);
    });
    check_vocab(s, c.model.vocab);
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    // llm.c's *_val_* shards are the validation split as they stand; else data.val_fraction.
    const int64_t n_val =
        s.val_begin >= 0 ? n - s.val_begin : static_cast<int64_t>(static_cast<double>(n) * c.data.val_fraction);
    const int64_t need = static_cast<int64_t>(T_) + 2;  // one window of T+1 and a start to draw
    SUBDP_CHECK(n >= 2 * need, "{}: {} tokens; a run needs at least 2 x (context + 2) = {}, a window for each split",
                path_, n, 2 * need);
    const std::string split = s.val_begin >= 0 ? std::string("the *_val_* shards")
                                               : fmt::format("data.val_fraction = {}", c.data.val_fraction);
    SUBDP_CHECK(n - n_val >= need, "{}: {} tokens leave {} for training after {}; need at least context + 2 = {}",
                path_, n, n - n_val, split, need);
    SUBDP_CHECK(n_val >= need, "{}: the validation split ({}) holds {} of its {} tokens, fewer than context + 2 = {}{}",
                path_, split, n_val, n, need, s.val_begin >= 0 ? "" : "; raise data.val_fraction");
    // One stream, split by an offset: no copy of either part (2 bytes a token, held once).
    tokens_ = std::move(s.tokens);
    n_train_ = n - n_val;
    const uint64_t train_seed = mix64(c.train.seed ^ 0x74726169ULL);  // "trai"
    train_sampler_ = std::make_unique<WindowSampler>(n - n_val, T_, batch_size_, rank, train_seed);
    eval_sampler_ = std::make_unique<WindowSampler>(n_val, T_, batch_size_, 0, kEvalSeed);
    const int64_t per_step = static_cast<int64_t>(batch_size_) * T_ * world_;
    steps_per_epoch_ = std::max<int64_t>(1, n_train_ / per_step);
  }

  int64_t steps_per_epoch() const override { return steps_per_epoch_; }

  Batch make_batch() const override {
    return Batch::allocate({batch_size_, T_}, DType::i32, {batch_size_, T_}, DType::i32);
  }

  void train_batch(int64_t epoch, int64_t step, Batch& b) override {
    fill(tokens_.data(), train_sampler_->starts(epoch * steps_per_epoch_ + step), b);
  }

  int64_t eval_batches(int share_rank, int shares) const override {
    if (!eval_sampler_ || share_rank >= eval_total_) return 0;
    return (eval_total_ - share_rank + shares - 1) / shares;  // batches share_rank, +shares, ...
  }

  void eval_batch(int64_t i, int share_rank, int shares, Batch& b) override {
    SUBDP_ASSERT(eval_sampler_ && i < eval_batches(share_rank, shares));
    fill(tokens_.data() + n_train_, eval_sampler_->starts(i * shares + share_rank), b);
  }

  uint32_t content_crc32() const override {
    return crc32_bytes(0, tokens_.data(), tokens_.size() * sizeof(tokens_[0]));
  }
  std::string describe() const override {
    return fmt::format("{} {}: {} train / {} validation tokens, windows of {}", name_, path_, n_train_,
                       static_cast<int64_t>(tokens_.size()) - n_train_, T_);
  }

 private:
  void check_vocab(const TokenStream& s, int vocab) const {
    const auto first = std::find_if(s.tokens.begin(), s.tokens.end(), [&](auto t) { return t >= vocab; });
    if (first == s.tokens.end()) return;
    const auto mx = std::max_element(first, s.tokens.end());  // the first offender bounds it from below
    throw Error(fmt::format("{}: token {} at position {} is >= model.vocab = {} (the first such; the largest is {}){}",
                            path_, *first, first - s.tokens.begin(), vocab, *mx,
                            name_ == DatasetKind::text ? " (text is bytes: use vocab = 256)" : ""));
  }

  /// x[b] = tokens[s_b, s_b + T), y[b] = tokens[s_b + 1, s_b + T + 1) for each start s_b,
  /// widened to the batch's int32; `tokens` is the split's first token.
  void fill(const uint16_t* tokens, const std::vector<int64_t>& starts, Batch& b) const {
    int32_t* x = b.x_host.i32();  // (B, T)
    int32_t* y = b.y_host.i32();  // (B, T)
    for (size_t k = 0; k < starts.size(); ++k) {
      const uint16_t* w = tokens + starts[k];
      std::copy(w, w + T_, x + k * T_);
      std::copy(w + 1, w + 1 + T_, y + k * T_);
    }
    b.n = static_cast<int64_t>(starts.size());
    b.upload();
  }

  DatasetKind name_;
  std::string path_;
  int batch_size_, T_, world_, eval_total_;
  std::vector<uint16_t> tokens_;  // training split [0, n_train_), validation split after it
  int64_t n_train_ = 0;
  std::unique_ptr<WindowSampler> train_sampler_, eval_sampler_;
  int64_t steps_per_epoch_ = 1;
};

}  // namespace

std::unique_ptr<DataSource> make_text_source(const Config& c, int rank, int world) {
  return std::make_unique<TextSource>(c, rank, world);
}

}  // namespace subdp
