// The InplaceKVCache configuration on the wire (writescope.internal.KvSpec), so the
// coordinator and both workers agree on geometry, region sizes and budgets.
#ifndef WRITESCOPE_COMMON_KV_SPEC_H_
#define WRITESCOPE_COMMON_KV_SPEC_H_

#include "absl/status/statusor.h"
#include "common/kv_config.h"
#include "writescope/internal/worker.pb.h"

namespace writescope {

internal::KvSpec ToKvSpec(const KvCacheConfig& config);
// Rebuilds and re-validates (ResolveKvCacheConfig) the configuration; a spec whose W is
// 0 (kAutoWindowTokens, the coordinator's to resolve) is INVALID_ARGUMENT.
absl::StatusOr<KvCacheConfig> FromKvSpec(const internal::KvSpec& spec);

}  // namespace writescope

#endif  // WRITESCOPE_COMMON_KV_SPEC_H_
