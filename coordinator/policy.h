// The placement policies one runtime offers, so that WriteScope and its
// baselines are compared side by side (ARCHITECTURE.md §3):
//
//   writescope    the CPU share follows the roofline optimum r*
//   (coordinator/scheduler.h),
//                 steered only through where new KV blocks land; nothing placed
//                 moves.
//   transfer-all  r = 0: every host block is transferred to the GPU for
//   attention. cpu-all       r = 1: every host block is attended on the CPU.
//   static:R      r = R for a fixed R in [0, 1] (e.g. "static:0.3").
//   monolithic    the same adaptive r*, but for a cache with ONE physical state
//                 for all spilled KV: whenever its target changes, the engine
//                 re-splits the batch's placed blocks to it, copying about
//                 |r2 - r1| of them between the host regions before the next
//                 step, which pays for it (coordinator/resplit.h,
//                 Engine::set_block_copier).
#ifndef WRITESCOPE_COORDINATOR_POLICY_H_
#define WRITESCOPE_COORDINATOR_POLICY_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace writescope::coordinator {

enum class PolicyKind { kWriteScope, kTransferAll, kCpuAll, kStatic, kMonolithic };

struct PolicySpec {
  PolicyKind kind = PolicyKind::kWriteScope;
  // The CPU share of kStatic, in [0, 1]; unused otherwise.
  double static_cpu_share = 0.0;

  // Whether the target follows the online roofline optimum (writescope,
  // monolithic).
  bool adaptive() const {
    return kind == PolicyKind::kWriteScope || kind == PolicyKind::kMonolithic;
  }
  // The fixed CPU share of a non-adaptive policy: 0, 1 or R. Programmer error
  // for an adaptive one.
  double fixed_cpu_share() const;
  // The canonical spelling: "writescope", "transfer-all", "cpu-all",
  // "static:0.3", "monolithic". ParsePolicy(ToString()) gives back an equal
  // spec.
  std::string ToString() const;

  // The same policy: the kind, and for kStatic the share (unused by the others, so not
  // compared there).
  friend bool operator==(const PolicySpec& a, const PolicySpec& b) {
    return a.kind == b.kind &&
           (a.kind != PolicyKind::kStatic || a.static_cpu_share == b.static_cpu_share);
  }
};

// Parses a policy name as the coordinator's --policy flag spells it. Exact,
// lower-case names; no surrounding whitespace. INVALID_ARGUMENT, naming the
// text and the accepted forms, for an unknown name, "static" without ":R", an R
// that is not a number, or an R outside [0, 1] (NaN and infinities included).
absl::StatusOr<PolicySpec> ParsePolicy(absl::string_view text);

}  // namespace writescope::coordinator

#endif  // WRITESCOPE_COORDINATOR_POLICY_H_
