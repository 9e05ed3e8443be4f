#pragma once
// The kernels executors run for compute tasks, by role, and each role's
// arguments as a struct of named fields. The MoE graph builder
// (sim/moe/graph_builder.cpp) writes them; the CPU kernels
// (backend/cpu/moe_kernels.cpp) and the device kernels
// (backend/device/moe_tasks.cpp) read them. The simulator reads none of it.
//
// Sizes are in elements and tokens: M the model dimension, E the experts,
// k the choices per token, C the slots per expert (capacity), h the expert's
// hidden columns on this rank. A task's buffers are its `inputs` and
// `outputs`, in the order each role lists.
//
// Adding a role: its struct here, an alternative of KernelArgs and a row of
// kKernelRoles at the same index, its CPU kernel (moe_kernels()) and its
// device kernel (run_task and scratch_bytes: the compiler names each place
// that lacks it).
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <variant>

namespace parmsim {

// Where a combine-side buffer keeps slot `s` of expert `e`.
enum class SlotLayout : std::uint8_t {
  local,     // [E, C, M]: one member's slots
  gathered,  // [G, E, C, M]: every MP member's slots; token t's member is t / per
  sliced,    // [G, E, Tl, M]: every member's share of the slots (split after Order): slot s at member s / Tl, s % Tl
};

// x rows [begin, begin + count), Wg [M, E] -> probs [count, E] (softmax),
// route [count, k, 3] (expert, slot or -1 when the expert is full, weight).
struct MoeGateArgs {
  std::int64_t begin = 0, count = 0, M = 0, E = 0, k = 0, C = 0;
};
// x rows [begin, begin + count), route -> dispatch buffer [E, C, M] (zeros in empty slots).
struct MoeOrderArgs {
  std::int64_t begin = 0, count = 0, M = 0, E = 0, k = 0, C = 0;
};
// Order's adjoint: slot gradients (local [E, C, M], or sliced [G, E, Tl, M]),
// route -> dx [count, M].
struct MoeOrderBwdArgs {
  std::int64_t count = 0, M = 0, E = 0, k = 0, C = 0, Tl = 0;
  SlotLayout layout = SlotLayout::local;  // local or sliced
};
// [E, C, M] -> MP member `member`'s slots [E, Tl, M]: slots member * Tl .. + Tl - 1 (zeros past C).
struct MoeSlotSliceArgs {
  std::int64_t E = 0, C = 0, Tl = 0, M = 0, member = 0;
};
// in [X, E_local, C, M], W1 [E_local, M, h], W2 [E_local, h, M] -> out [X,
// E_local, C, M], h1 [X, E_local, C, h] (fc1's output, kept for the backward pass):
// fc1, ReLU, fc2 per local expert, X source blocks.
struct MoeExpertsArgs {
  std::int64_t X = 0, E_local = 0, C = 0, M = 0, h = 0;
};
// dy, x, h1, W1, W2 -> dx, dW1, dW2 (weight gradients summed over the X blocks).
struct MoeExpertsBwdArgs {
  std::int64_t X = 0, E_local = 0, C = 0, M = 0, h = 0;
};
// combine buffer (in `layout`), route -> out [count, M]: each token's kept
// slots weighted by their gate weight and summed.
struct MoeIOrderArgs {
  std::int64_t count = 0, M = 0, E = 0, k = 0, C = 0, per = 0;  // per: tokens per MP member (gathered)
  SlotLayout layout = SlotLayout::local;
};
// dout rows [begin, begin + count), combine buffer, route -> its gradient
// (same layout), dw [count, k] (each choice's weight gradient).
struct MoeIOrderBwdArgs {
  std::int64_t begin = 0, count = 0, M = 0, E = 0, k = 0, C = 0, per = 0;
  SlotLayout layout = SlotLayout::local;
};
// dw rows [dw_offset, dw_offset + count), probs, route, x rows [begin, begin +
// count), Wg -> dWg, dx [count, M] (accumulated into: Order's adjoint wrote it).
struct MoeGateBwdArgs {
  std::int64_t begin = 0, count = 0, M = 0, E = 0, k = 0, dw_offset = 0;
};

// A compute task's kernel and its arguments; std::monostate: none (the
// task is timed, not run). The alternative's index is its KernelRole.
using KernelArgs = std::variant<std::monostate, MoeGateArgs, MoeOrderArgs, MoeOrderBwdArgs, MoeSlotSliceArgs,
                                MoeExpertsArgs, MoeExpertsBwdArgs, MoeIOrderArgs, MoeIOrderBwdArgs, MoeGateBwdArgs>;

enum class KernelRole : std::uint8_t {
  none,
  moe_gate,
  moe_order,
  moe_order_bwd,
  moe_slot_slice,
  moe_experts,
  moe_experts_bwd,
  moe_iorder,
  moe_iorder_bwd,
  moe_gate_bwd,
};

// One row per role, in KernelRole's order: the kernel's name (in messages)
// and how many input and output buffers it takes.
struct KernelRoleInfo {
  KernelRole role;
  std::string_view name;
  int inputs, outputs;
};
inline constexpr std::array<KernelRoleInfo, std::variant_size_v<KernelArgs>> kKernelRoles = {{
    {KernelRole::none, "", 0, 0},
    {KernelRole::moe_gate, "moe_gate", 2, 2},                // x, Wg -> probs, route
    {KernelRole::moe_order, "moe_order", 2, 1},              // x, route -> disp
    {KernelRole::moe_order_bwd, "moe_order_bwd", 2, 1},      // slot gradients, route -> dx
    {KernelRole::moe_slot_slice, "moe_slot_slice", 1, 1},    // disp -> this member's slots
    {KernelRole::moe_experts, "moe_experts", 3, 2},          // in, W1, W2 -> out, h1
    {KernelRole::moe_experts_bwd, "moe_experts_bwd", 5, 3},  // dy, x, h1, W1, W2 -> dx, dW1, dW2
    {KernelRole::moe_iorder, "moe_iorder", 2, 1},            // combine buffer, route -> out
    {KernelRole::moe_iorder_bwd, "moe_iorder_bwd", 3, 2},    // dout, combine buffer, route -> its gradient, dw
    {KernelRole::moe_gate_bwd, "moe_gate_bwd", 5, 2},        // dw, probs, route, x, Wg -> dWg, dx
}};

constexpr const KernelRoleInfo& role_info(KernelRole r) {
  return kKernelRoles[static_cast<std::size_t>(r)];
}
constexpr std::string_view to_string(KernelRole r) {
  return role_info(r).name;
}
constexpr KernelRole role_of(const KernelArgs& a) {
  return static_cast<KernelRole>(a.index());
}

namespace detail {
template <class A, class V>
struct ArgsIndex;
template <class A, class... Ts>
struct ArgsIndex<A, std::variant<Ts...>> {
  static constexpr std::size_t value = [] {
    constexpr bool same[] = {std::is_same_v<A, Ts>...};
    for (std::size_t i = 0; i < sizeof...(Ts); ++i)
      if (same[i]) return i;
    return sizeof...(Ts);
  }();
};
constexpr bool roles_in_order() {
  for (std::size_t i = 0; i < kKernelRoles.size(); ++i)
    if (static_cast<std::size_t>(kKernelRoles[i].role) != i) return false;
  return true;
}
}  // namespace detail

// The role whose arguments are A.
template <class A>
inline constexpr KernelRole role_for = static_cast<KernelRole>(detail::ArgsIndex<A, KernelArgs>::value);

static_assert(detail::roles_in_order(), "kKernelRoles lists the roles in KernelRole's order");
static_assert(role_for<MoeGateArgs> == KernelRole::moe_gate && role_for<MoeOrderArgs> == KernelRole::moe_order &&
                  role_for<MoeOrderBwdArgs> == KernelRole::moe_order_bwd &&
                  role_for<MoeSlotSliceArgs> == KernelRole::moe_slot_slice &&
                  role_for<MoeExpertsArgs> == KernelRole::moe_experts &&
                  role_for<MoeExpertsBwdArgs> == KernelRole::moe_experts_bwd &&
                  role_for<MoeIOrderArgs> == KernelRole::moe_iorder &&
                  role_for<MoeIOrderBwdArgs> == KernelRole::moe_iorder_bwd &&
                  role_for<MoeGateBwdArgs> == KernelRole::moe_gate_bwd,
              "KernelArgs lists the argument structs in KernelRole's order");

}  // namespace parmsim
