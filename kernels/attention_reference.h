// Plain reference attention: loops, double accumulation, no SIMD, no threads. The
// ground truth every backend is tested against. Same contracts as kernels/attention.h.
#ifndef WRITESCOPE_KERNELS_ATTENTION_REFERENCE_H_
#define WRITESCOPE_KERNELS_ATTENTION_REFERENCE_H_

#include "absl/status/status.h"
#include "kernels/attention.h"

namespace writescope::kernels {

absl::Status ReferenceGqaDecode(const GqaDecodeArgs& args);
absl::Status ReferenceGqaPrefill(const GqaPrefillArgs& args);
absl::Status ReferenceMlaDecode(const MlaDecodeArgs& args);
absl::Status ReferenceMlaPrefill(const MlaPrefillArgs& args);

}  // namespace writescope::kernels

#endif  // WRITESCOPE_KERNELS_ATTENTION_REFERENCE_H_
