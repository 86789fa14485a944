// [device] precision = "bf16": the bf16 cross-entropy kernel and the language models' bf16
// head (models/classifier_head.h) against float32 CPU references on the same bf16-rounded
// values. Tolerances: losses to fp32 summation order (1e-5); a value the device rounds to
// bf16 once within one bf16 unit in the last place of the tensor's largest (2^-8); a sum over
// bf16 products within 1e-5 of the CPU's sum over the same rounded operands.
#include <gtest/gtest.h>

#include "engine/core/backend.h"
#include "engine/core/error.h"
#include "engine/core/tensor.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/softmax.h"
#include "kernels/cuda/kernels.h"
#include "models/classifier_head.h"
#include "tests/gpu/gpu_test_util.h"

namespace subdp {
namespace {

using namespace gpu_test;
using Bf16Head = GpuTest;

constexpr double kOneBf16Ulp = 1.0 / 256;

TEST_F(Bf16Head, CrossEntropyKernelOnBf16Logits) {
  for (int V : {10, 1000}) {
    const int64_t rows = 301;
    const auto logits = round_bf16(random_vec(rows * V, 13, -5.f, 5.f));
    const auto targets = random_ints(rows, 14, 0, V);
    std::vector<float> dlogits(rows * V);
    int64_t correct = 0;
    const double loss =
        cpu::cross_entropy(logits.data(), targets.data(), dlogits.data(), rows, V, 1.f / rows, &correct);
    DevBf16 dl(logits), dgrad(rows * V);
    Dev<float> dloss(rows), dloss2(rows);
    Dev<int32_t> dt(targets), dhit(rows);
    Dev<double> ws(cuda::reduce_workspace_doubles()), total(1);
    cuda::cross_entropy(dl.get(), dt, dgrad.get(), dloss, dhit, rows, V, 1.f / rows, stream);
    cuda::sum(dloss, rows, total, ws, stream);
    EXPECT_NEAR(total.download()[0] / rows, loss, 1e-5 * loss) << "V=" << V;
    int64_t hits = 0;
    for (int32_t h : dhit.download()) hits += h;
    EXPECT_EQ(hits, correct);
    EXPECT_REL(dgrad.download(), dlogits, kOneBf16Ulp) << "V=" << V;
    cuda::cross_entropy(dl.get(), dt, dl.get(), dloss2, nullptr, rows, V, 1.f / rows, stream);  // in place
    EXPECT_EQ(dloss2.download(), dloss.download());
    EXPECT_EQ(dl.download(), dgrad.download());
  }
}

/// The head's forward, loss and backward on the CPU in float32 over bf16-rounded x and w:
/// dlogits rounded to bf16 as the device stores them, then dw += dlogits^T x, dx = dlogits w.
struct HeadReference {
  double loss;
  std::vector<float> logits, dw, dx;
};

HeadReference head_reference(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& dw0,
                             const std::vector<int32_t>& targets, int rows, int V, int C) {
  HeadReference r;
  const auto xr = round_bf16(x), wr = round_bf16(w);
  r.logits.assign(static_cast<size_t>(rows) * V, 0.f);
  cpu::sgemm(false, true, rows, V, C, 1.f, xr.data(), C, wr.data(), C, 0.f, r.logits.data(), V);
  r.logits = round_bf16(r.logits);
  std::vector<float> dlogits(r.logits.size());
  r.loss = cpu::cross_entropy(r.logits.data(), targets.data(), dlogits.data(), rows, V, 1.f / rows, nullptr);
  dlogits = round_bf16(dlogits);
  r.dw = dw0;
  cpu::sgemm(true, false, V, C, rows, 1.f, dlogits.data(), V, xr.data(), C, 1.f, r.dw.data(), C);
  r.dx.assign(static_cast<size_t>(rows) * C, 0.f);
  cpu::sgemm(false, false, rows, C, V, 1.f, dlogits.data(), V, wr.data(), C, 0.f, r.dx.data(), C);
  return r;
}

// The bf16 head allocates bf16 logits (half the float32 head's bytes) and two bf16 operand
// copies, and gives the reference's loss, logits, dw (accumulated onto what was there) and dx.
TEST_F(Bf16Head, ProjectLossAndBackwardMatchTheRoundedReference) {
  const int rows = 37, V = 300, C = 24;
  const auto x = random_vec(static_cast<size_t>(rows) * C, 30), w = random_vec(static_cast<size_t>(V) * C, 31);
  const auto dw0 = random_vec(static_cast<size_t>(V) * C, 32);
  const auto targets = random_ints(rows, 33, 0, V);
  const HeadReference want = head_reference(x, w, dw0, targets, rows, V, C);

  set_backend(make_backend(DeviceType::cuda));
  backend().configure(1, 2, Precision::bf16);
  {
    CrossEntropyHead head(rows, V, C);
    ASSERT_TRUE(head.bf16());
    EXPECT_THROW(head.logits(), Error);
    Dev<float> dx_(x), dw_(w), dgrad(dw0), ddx(static_cast<size_t>(rows) * C);
    Dev<int32_t> dt(targets);
    head.project(dx_, dw_, rows);
    EXPECT_REL(head.read_logits(0, rows), want.logits, kOneBf16Ulp);
    head.loss(dt, rows, true);
    const StepCounters c = backend().take_counters();
    EXPECT_NEAR(c.loss_sum / rows, want.loss, 1e-5 * want.loss);
    head.project_backward(dx_, dw_, dgrad, ddx, rows);
    sync();  // the backend's stream
    EXPECT_REL(dgrad.download(), want.dw, 1e-5);
    EXPECT_REL(ddx.download(), want.dx, 1e-5);
  }
  backend().configure(1, 2, Precision::fp32);
  set_backend(make_cpu_backend());
}

}  // namespace
}  // namespace subdp
