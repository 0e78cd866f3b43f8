// Messages on the data-plane channels between gpu_worker and cpu_worker.
//
// Every message starts with a DataPlaneHeader; the payload follows in place. Payloads
// are raw tensors whose shapes the step plan (sent to both workers over gRPC) fixes,
// so the header only says what the message is.
#ifndef WRITESCOPE_COMMON_DATA_PLANE_MESSAGES_H_
#define WRITESCOPE_COMMON_DATA_PLANE_MESSAGES_H_

#include <cstdint>

namespace writescope {

enum class DataPlaneMessage : uint32_t {
  kEcho = 1,       // gpu -> cpu: bytes to send back unchanged
  kEchoReply = 2,  // cpu -> gpu
  // One step, per layer (payloads: common/step_layout.h).
  kAttention = 3,        // gpu -> cpu: queries of the CPU-attended tokens
  kAttentionResult = 4,  // cpu -> gpu: their partial states over the CPU-compute region
  kExperts = 5,          // gpu -> cpu: routed-expert inputs
  kExpertsResult = 6,    // cpu -> gpu: routed-expert outputs
  kStepEnd = 7,          // gpu -> cpu: the step is over (no payload)
  kError = 8,            // cpu -> gpu: the CPU side of the step failed (payload: its status
                         // code and message, common/data_plane.h: WriteErrorPayload)
};

struct DataPlaneHeader {
  DataPlaneMessage type;
  uint32_t layer;     // per-layer messages; 0 otherwise
  uint64_t step_id;   // the step (or ping sequence number) the message belongs to
  uint64_t payload_bytes;
};
static_assert(sizeof(DataPlaneHeader) == 24);

}  // namespace writescope

#endif  // WRITESCOPE_COMMON_DATA_PLANE_MESSAGES_H_
