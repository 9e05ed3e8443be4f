#pragma once
// A dense, single-device MoE layer, forward and backward, in double precision,
// written without the task graphs: the ground truth the schedules must match.
//
// Tokens come in `groups` (one per MP group of the cluster: S tokens each);
// routing is decided per capacity block of `block` tokens with `capacity`
// slots per expert (the baseline decides per S tokens, Parm after an MP-Split
// per S/G tokens), choice-major as the CPU kernels do. The loss is
// sum over groups of <dout, out>, so dout is the upstream gradient.
#include <cstdint>
#include <vector>

namespace parmsim::ref {

struct MoeRefSpec {
  std::int64_t groups = 1, S = 0, M = 0, H = 0, E = 0, k = 1;
  std::int64_t block = 0, capacity = 0;
};

struct MoeRefResult {
  std::vector<double> out, dx;  // [groups][S][M]
  std::vector<double> dWg;      // [groups][M][E]: each group's gate gradient
  std::vector<double> dW1;      // [E][M][H]
  std::vector<double> dW2;      // [E][H][M]
  std::int64_t dropped = 0;     // token choices dropped for capacity
};

// x, dout: [groups][S][M]; Wg: [M][E]; W1: [E][M][H]; W2: [E][H][M].
MoeRefResult moe_reference(const MoeRefSpec& s, const std::vector<float>& x, const std::vector<float>& dout,
                           const std::vector<float>& Wg, const std::vector<float>& W1, const std::vector<float>& W2);

}  // namespace parmsim::ref
