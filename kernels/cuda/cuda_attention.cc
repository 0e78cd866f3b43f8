// Host side of the CUDA attention backend: validation, split planning, workspace
// carving and cudaError_t -> absl::Status. The kernels are in the .cu files.
#include "kernels/cuda/cuda_attention.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/launch.h"

namespace writescope::kernels::cuda {
namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int32_t kMinSplitTokens = 128;
constexpr int32_t kMaxSplits = 1024;

absl::Status FromCuda(int error, absl::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  if (error == cudaErrorNotSupported) {
    return absl::UnimplementedError(absl::StrCat(what, ": no kernel compiled for this shape"));
  }
  return absl::InternalError(absl::StrCat(what, ": ",
                                          cudaGetErrorString(static_cast<cudaError_t>(error))));
}

struct SplitPlan {
  int32_t num_splits;
  int32_t tokens_per_split;
};

// A tensor-core kernel's rule (internal::SplitTokens: one wave for few pairs, ~4 waves for
// many), or, without one (SIMT GQA), enough CTAs (ctas_per_split per split) for about four
// per SM, splits of at least kMinSplitTokens. The rules plan at most kMaxSplits splits
// (bounds the workspace and the merge); an explicit options.tokens_per_split (the bench's
// and the tests' fixed sizes; the service never passes one) is taken as given.
absl::StatusOr<SplitPlan> PlanSplits(int32_t max_seq_tokens, int64_t ctas_per_split,
                                     const GpuSplitOptions& options,
                                     const internal::SplitRule* tensor_cores) {
  if (max_seq_tokens < 0) return absl::InvalidArgumentError("max_seq_tokens < 0");
  int32_t per = options.tokens_per_split;
  if (per < 0 || per % 32 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokens_per_split ", per, " must be a non-negative multiple of 32"));
  }
  if (per == 0 && tensor_cores != nullptr) {
    per = internal::SplitTokens(*tensor_cores, max_seq_tokens, ctas_per_split,
                                internal::SmCount(), kMaxSplits);
  } else if (per == 0) {
    const int64_t want_splits =
        std::max<int64_t>(1, (4 * int64_t{internal::SmCount()} + ctas_per_split - 1) /
                                 std::max<int64_t>(1, ctas_per_split));
    per = static_cast<int32_t>((max_seq_tokens + want_splits - 1) / want_splits);
    per = std::max(kMinSplitTokens, (per + 127) / 128 * 128);
    per = std::max<int32_t>(per, (max_seq_tokens + kMaxSplits - 1) / kMaxSplits);
    per = (per + 31) / 32 * 32;
  }
  // At least one split, so sequences without keys still get their empty state written.
  const int32_t splits = std::max(1, (max_seq_tokens + per - 1) / per);
  return SplitPlan{splits, per};
}

internal::KvParams ToKvParams(const GpuKvSource& kv, int32_t num_seqs, int64_t tile_values,
                              int64_t window_values) {
  internal::KvParams p{
      kv.tiles,           kv.tile_ptrs,       kv.seq_tile_begin,  kv.seq_last_tile_tokens,
      kv.window,          kv.window_capacity, kv.seq_window_slot, kv.seq_window_tokens,
      tile_values,        window_values,
      /*inline_seqs=*/0,
      /*inline_lists=*/{}};
  const HostSeqLists& host = kv.host;
  if (!host.given() || num_seqs > internal::kInlineSeqs) return p;
  // The same values LoadSeqKeys (device_util.cuh) reads from the device lists.
  p.inline_seqs = num_seqs;
  for (int32_t s = 0; s < num_seqs; ++s) {
    internal::InlineSeqLists& lists = p.inline_lists[s];
    lists.tile_begin = host.tile_begin ? host.tile_begin[s] : 0;
    lists.tile_count = host.tile_begin ? host.tile_begin[s + 1] - lists.tile_begin : 0;
    lists.last_tile_tokens = lists.tile_count == 0 ? 0 : host.last_tile_tokens[s];
    lists.window_slot = host.window_slot ? host.window_slot[s] : s;
    lists.window_tokens = host.window_tokens ? host.window_tokens[s] : 0;
  }
  return p;
}

absl::Status ValidateKv(const GpuKvSource& kv) {
  if (kv.seq_tile_begin != nullptr &&
      ((kv.tiles == nullptr && kv.tile_ptrs == nullptr) || kv.seq_last_tile_tokens == nullptr)) {
    return absl::InvalidArgumentError("tiles need tiles or tile_ptrs, and seq_last_tile_tokens");
  }
  if (kv.seq_window_tokens != nullptr && (kv.window == nullptr || kv.window_capacity <= 0)) {
    return absl::InvalidArgumentError("window tokens need a window and window_capacity > 0");
  }
  const HostSeqLists& host = kv.host;
  if (host.given() && ((host.tile_begin == nullptr) != (kv.seq_tile_begin == nullptr) ||
                       (host.last_tile_tokens == nullptr) != (kv.seq_last_tile_tokens == nullptr) ||
                       (host.window_slot == nullptr) != (kv.seq_window_slot == nullptr) ||
                       (host.window_tokens == nullptr) != (kv.seq_window_tokens == nullptr))) {
    return absl::InvalidArgumentError(
        "host lists must be given exactly where their device lists are");
  }
  return absl::OkStatus();
}

// The split-KV workspace: per-split partial o [splits, rows, dim], then lse
// [splits, rows], each 256-byte aligned. PartialLseOffset is where lse starts.
size_t PartialLseOffset(int32_t splits, int64_t rows, int32_t dim) {
  return (size_t{static_cast<size_t>(splits)} * rows * dim * sizeof(float) + 255) / 256 * 256;
}

size_t PartialBytes(int32_t splits, int64_t rows, int32_t dim) {
  return PartialLseOffset(splits, rows, dim) +
         (size_t{static_cast<size_t>(splits)} * rows * sizeof(float) + 255) / 256 * 256;
}

// The tensor-core kernel that `choice` names. The default is bulk4: on an H100 it was faster
// than the register kernel at 15 of 17 GQA points in run 260 and 14 of 17 in run 264 (by
// 1-6 %; slower by up to 2.8 % at Qwen3 batch 32), on the H200 at 12 of 17 in run 269 (by
// 0.7-4.3 %; slower at Qwen3 8K x 32 by 7.8 %), and the service's generations on it agreed
// with the register kernel's where their plans differ (runs 262-263, 267, 269).
internal::GqaKernel GqaKernelOf(GqaDecodeKernel choice) {
  switch (choice) {
    case GqaDecodeKernel::kRegisters:
      return internal::kGqaRegisters;
    case GqaDecodeKernel::kBulk3x2:
      return internal::kGqaBulk3x2;
    case GqaDecodeKernel::kDefault:
    case GqaDecodeKernel::kBulk4:
      break;
  }
  return internal::kGqaBulk4;
}

// The GQA kernel's split rule: the tensor-core kernel's, or none (SIMT).
const internal::SplitRule* GqaSplitRule(const GqaShape& s, GqaDecodeKernel choice) {
  return s.num_kv_heads > 0 && internal::GqaDecodeUsesTensorCores(s.head_dim, s.group_size())
             ? &internal::GqaSplitRuleOf(GqaKernelOf(choice))
             : nullptr;
}

}  // namespace

namespace internal {

int SmCount() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    return 132;
  }
  return sms;
}

}  // namespace internal

bool CudaDeviceAvailable() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

size_t GqaGpuDecodeWorkspaceBytes(const GqaGpuDecodeArgs& args) {
  const auto plan = PlanSplits(args.kv.max_seq_tokens,
                               int64_t{args.num_seqs} * std::max(1, args.shape.num_kv_heads),
                               args.split, GqaSplitRule(args.shape, args.split.gqa_kernel));
  if (!plan.ok()) return 0;
  return PartialBytes(plan->num_splits, int64_t{args.num_seqs} * args.shape.num_q_heads,
                      args.shape.head_dim);
}

size_t MlaGpuDecodeWorkspaceBytes(const MlaGpuDecodeArgs& args) {
  const auto plan =
      PlanSplits(args.kv.max_seq_tokens, args.num_seqs, args.split, &internal::kMlaTensorCoreSplits);
  if (!plan.ok()) return 0;
  return PartialBytes(plan->num_splits, int64_t{args.num_seqs} * args.shape.num_heads,
                      args.shape.kv_lora_rank);
}

absl::Status GqaGpuDecode(const GqaGpuDecodeArgs& args, void* stream) {
  const GqaShape& s = args.shape;
  WS_RETURN_IF_ERROR(s.Validate());
  WS_RETURN_IF_ERROR(ValidateKv(args.kv));
  if (args.num_seqs < 0) return absl::InvalidArgumentError("num_seqs < 0");
  if (args.num_seqs == 0) return absl::OkStatus();
  if (s.head_dim != 64 && s.head_dim != 128 && s.head_dim != 256) {
    return absl::UnimplementedError(absl::StrCat("GPU GQA decode: head_dim ", s.head_dim,
                                                 " (compiled: 64, 128, 256)"));
  }
  if (s.group_size() > 8) {
    return absl::UnimplementedError(absl::StrCat("GPU GQA decode: group ", s.group_size(), " > 8"));
  }
  WS_ASSIGN_OR_RETURN(const SplitPlan plan,
                      PlanSplits(args.kv.max_seq_tokens, int64_t{args.num_seqs} * s.num_kv_heads,
                                 args.split, GqaSplitRule(s, args.split.gqa_kernel)));
  const int64_t rows = int64_t{args.num_seqs} * s.num_q_heads;
  const size_t need = PartialBytes(plan.num_splits, rows, s.head_dim);
  if (args.workspace == nullptr || args.workspace_bytes < need) {
    return absl::InvalidArgumentError(absl::StrCat("GPU GQA decode workspace ", args.workspace_bytes,
                                                   " bytes < ", need));
  }
  internal::GqaParams p;
  p.num_seqs = args.num_seqs;
  p.num_q_heads = s.num_q_heads;
  p.num_kv_heads = s.num_kv_heads;
  p.head_dim = s.head_dim;
  p.block_tokens = s.block_tokens;
  p.scale_log2 = s.softmax_scale * kLog2e;
  p.q = args.q;
  const int64_t tile_values = int64_t{2} * s.num_kv_heads * s.block_tokens * s.head_dim;
  const int64_t window_values = int64_t{2} * s.num_kv_heads * args.kv.window_capacity * s.head_dim;
  p.kv = ToKvParams(args.kv, args.num_seqs, tile_values, window_values);
  p.num_splits = plan.num_splits;
  p.tokens_per_split = plan.tokens_per_split;
  p.kernel = GqaKernelOf(args.split.gqa_kernel);
  auto* base = static_cast<unsigned char*>(args.workspace);
  p.part_o = reinterpret_cast<float*>(base);
  p.part_lse = reinterpret_cast<float*>(base + PartialLseOffset(plan.num_splits, rows, s.head_dim));
  p.o = args.o;
  p.lse = args.lse;
  p.timeline = args.timeline;
  return FromCuda(internal::LaunchGqaDecode(p, stream), "GPU GQA decode");
}

absl::Status MlaGpuDecode(const MlaGpuDecodeArgs& args, void* stream) {
  const MlaShape& s = args.shape;
  WS_RETURN_IF_ERROR(s.Validate());
  WS_RETURN_IF_ERROR(ValidateKv(args.kv));
  if (args.num_seqs < 0) return absl::InvalidArgumentError("num_seqs < 0");
  if (args.num_seqs == 0) return absl::OkStatus();
  if (s.kv_lora_rank != 512 || s.rope_dim != 64 || s.num_heads > 16) {
    return absl::UnimplementedError(absl::StrCat("GPU MLA decode: compiled for rank 512, rope 64, "
                                                 "<= 16 heads; got ", s.kv_lora_rank, "/",
                                                 s.rope_dim, "/", s.num_heads));
  }
  WS_ASSIGN_OR_RETURN(const SplitPlan plan,
                      PlanSplits(args.kv.max_seq_tokens, args.num_seqs, args.split,
                                 &internal::kMlaTensorCoreSplits));
  const int64_t rows = int64_t{args.num_seqs} * s.num_heads;
  const size_t need = PartialBytes(plan.num_splits, rows, s.kv_lora_rank);
  if (args.workspace == nullptr || args.workspace_bytes < need) {
    return absl::InvalidArgumentError(absl::StrCat("GPU MLA decode workspace ", args.workspace_bytes,
                                                   " bytes < ", need));
  }
  internal::MlaParams p;
  p.num_seqs = args.num_seqs;
  p.num_heads = s.num_heads;
  p.kv_lora_rank = s.kv_lora_rank;
  p.rope_dim = s.rope_dim;
  p.block_tokens = s.block_tokens;
  p.scale_log2 = s.softmax_scale * kLog2e;
  p.q = args.q;
  p.kv = ToKvParams(args.kv, args.num_seqs, int64_t{s.block_tokens} * s.row_dim(),
                    int64_t{args.kv.window_capacity} * s.row_dim());
  p.num_splits = plan.num_splits;
  p.tokens_per_split = plan.tokens_per_split;
  auto* base = static_cast<unsigned char*>(args.workspace);
  p.part_o = reinterpret_cast<float*>(base);
  p.part_lse = reinterpret_cast<float*>(base + PartialLseOffset(plan.num_splits, rows, s.kv_lora_rank));
  p.o = args.o;
  p.lse = args.lse;
  return FromCuda(internal::LaunchMlaDecode(p, stream), "GPU MLA decode");
}

namespace {

// The checks both prefills share; `what` names the op in messages.
absl::Status CheckPrefillArgs(const char* what, int32_t num_queries, const GpuKvTileList& keys,
                              const void* q, const void* o, const void* lse) {
  if (num_queries < 0 || keys.num_tiles < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": num_queries ", num_queries,
                                                   " num_tiles ", keys.num_tiles));
  }
  if (num_queries == 0) return absl::OkStatus();
  if (q == nullptr || o == nullptr || lse == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": q, o and lse are required"));
  }
  if (keys.num_tiles > 0 && (keys.tiles == nullptr || keys.positions == nullptr || keys.tokens == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": tiles need tiles, positions and tokens"));
  }
  return absl::OkStatus();
}

// The fields both prefills' kernel parameters share (launch.h), from their arguments.
template <typename Params, typename Args>
void SetPrefillKeys(const Args& args, Params* p) {
  p->num_queries = args.num_queries;
  p->block_tokens = args.shape.block_tokens;
  p->num_tiles = args.keys.num_tiles;
  p->query_position0 = args.query_position0;
  p->scale_log2 = args.shape.softmax_scale * kLog2e;
  p->q = args.q;
  p->tiles = args.keys.tiles;
  p->tile_positions = args.keys.positions;
  p->tile_tokens = args.keys.tokens;
  p->o = args.o;
  p->lse = args.lse;
}

}  // namespace

absl::Status GqaGpuPrefill(const GqaGpuPrefillArgs& args, void* stream) {
  const GqaShape& s = args.shape;
  WS_RETURN_IF_ERROR(s.Validate());
  WS_RETURN_IF_ERROR(
      CheckPrefillArgs("GPU GQA prefill", args.num_queries, args.keys, args.q, args.o, args.lse));
  if (args.num_queries == 0) return absl::OkStatus();
  if (s.head_dim != 64 && s.head_dim != 128) {
    return absl::UnimplementedError(absl::StrCat("GPU GQA prefill: head_dim ", s.head_dim,
                                                 " (compiled: 64, 128)"));
  }
  internal::GqaPrefillParams p;
  SetPrefillKeys(args, &p);
  p.num_q_heads = s.num_q_heads;
  p.num_kv_heads = s.num_kv_heads;
  p.head_dim = s.head_dim;
  return FromCuda(internal::LaunchGqaPrefill(p, stream), "GPU GQA prefill");
}

absl::Status MlaGpuPrefill(const MlaGpuPrefillArgs& args, void* stream, int ctas_per_sm) {
  const MlaShape& s = args.shape;
  WS_RETURN_IF_ERROR(s.Validate());
  WS_RETURN_IF_ERROR(
      CheckPrefillArgs("GPU MLA prefill", args.num_queries, args.keys, args.q, args.o, args.lse));
  if (args.num_queries == 0) return absl::OkStatus();
  if (s.kv_lora_rank != 512 || s.rope_dim != 64 || s.num_heads > 16) {
    return absl::UnimplementedError(absl::StrCat("GPU MLA prefill: compiled for rank 512, rope 64, "
                                                 "<= 16 heads; got ", s.kv_lora_rank, "/",
                                                 s.rope_dim, "/", s.num_heads));
  }
  if (ctas_per_sm < 0 || ctas_per_sm > 2) {
    return absl::InvalidArgumentError(absl::StrCat("GPU MLA prefill: ctas_per_sm ", ctas_per_sm,
                                                   " (0 the default, 1 or 2)"));
  }
  internal::MlaPrefillParams p;
  SetPrefillKeys(args, &p);
  p.num_heads = s.num_heads;
  p.kv_lora_rank = s.kv_lora_rank;
  p.rope_dim = s.rope_dim;
  return FromCuda(internal::LaunchMlaPrefill(p, stream, ctas_per_sm), "GPU MLA prefill");
}

absl::Status GpuMergeStates(const float* o_a, const float* lse_a, const float* o_b,
                            const float* lse_b, float* o_out, float* lse_out, int64_t rows,
                            int32_t head_dim, void* stream) {
  if (rows < 0 || head_dim <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("merge: rows ", rows, " head_dim ", head_dim));
  }
  return FromCuda(internal::LaunchMergeTwo(o_a, lse_a, o_b, lse_b, o_out, lse_out, rows, head_dim,
                                           stream),
                  "GPU merge");
}

}  // namespace writescope::kernels::cuda
