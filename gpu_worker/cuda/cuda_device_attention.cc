// DeviceAttention on the CUDA device: the kernels of kernels/cuda/cuda_attention.h, with q
// copied in and the partial states copied out through device staging buffers (grown on
// demand, reused), everything on the compute stream and synchronized before returning.
//
//   GQA decode   GqaGpuDecode (split-KV) over a tile pointer list: the ping-pong tiles, the
//                D-window and a chunk's own blocks need no repacking; the batch is one
//                launch.
//   GQA prefill  GqaGpuPrefill.
//   MLA prefill  MlaGpuPrefill (the same tile list as the GQA prefill).
//   MLA decode   MlaGpuDecode over a tile pointer list, like the GQA decode (nothing is
//                copied on the device).
// A shape without a compiled CUDA kernel (e.g. the tiny test models' head_dim 16) falls back
// to the CPU kernels over tiles copied to the host: correct, slow, logged once.
// Plain C++: no CUDA header (memory and copies go through the Device interface).
#include <algorithm>
#include <limits>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status.h"
#include "kernels/attention_state.h"
#include "kernels/cpu_attention.h"
#include "gpu_worker/device_attention.h"
#include "kernels/cuda/cuda_attention.h"

namespace writescope::gpu {
namespace {

class CudaDeviceAttention final : public DeviceAttention {
 public:
  CudaDeviceAttention(Device* device, const DeviceAttentionOptions& options)
      : device_(device), options_(options) {}

  absl::Status GqaDecode(const kernels::GqaDecodeArgs& args) override {
    absl::Status status = CudaGqaDecode(args);
    if (!absl::IsUnimplemented(status)) return status;
    Fallback(status);
    std::vector<kernels::KvBlockList> lists(args.seqs, args.seqs + args.num_seqs);
    WS_RETURN_IF_ERROR(CopyTilesToHost(absl::MakeSpan(lists), GqaTileBytes(args.shape)));
    kernels::GqaDecodeArgs host = args;
    host.seqs = lists.data();
    return kernels::CpuGqaDecode(host);
  }

  absl::Status GqaPrefill(const kernels::GqaPrefillArgs& args) override {
    absl::Status status = CudaGqaPrefill(args);
    if (!absl::IsUnimplemented(status)) return status;
    Fallback(status);
    kernels::GqaPrefillArgs host = args;
    WS_RETURN_IF_ERROR(CopyTilesToHost(absl::MakeSpan(&host.keys, 1), GqaTileBytes(args.shape)));
    return kernels::CpuGqaPrefill(host);
  }

  absl::Status MlaDecode(const kernels::MlaDecodeArgs& args) override {
    absl::Status status = CudaMlaDecode(args);
    if (!absl::IsUnimplemented(status)) return status;
    Fallback(status);
    std::vector<kernels::KvBlockList> lists(args.seqs, args.seqs + args.num_seqs);
    WS_RETURN_IF_ERROR(CopyTilesToHost(
        absl::MakeSpan(lists), uint64_t(args.shape.block_tokens) * args.shape.row_dim() * 2));
    kernels::MlaDecodeArgs host = args;
    host.seqs = lists.data();
    return kernels::CpuMlaDecode(host);
  }

  absl::Status MlaPrefill(const kernels::MlaPrefillArgs& args) override {
    absl::Status status = CudaMlaPrefill(args);
    if (!absl::IsUnimplemented(status)) return status;
    Fallback(status);
    kernels::MlaPrefillArgs host = args;
    WS_RETURN_IF_ERROR(CopyTilesToHost(absl::MakeSpan(&host.keys, 1),
                                       uint64_t(args.shape.block_tokens) * args.shape.row_dim() * 2));
    return kernels::CpuMlaPrefill(host);
  }

 private:
  // The lists as the CPU kernels check them, before anything is staged: a last block longer
  // than the block would have the kernel read a tile pointer past the list, and a missing
  // position list would be staged from null.
  static absl::Status ValidateDecodeLists(const kernels::KvBlockList* seqs, int32_t num_seqs,
                                          int32_t block_tokens) {
    if (num_seqs < 0) return absl::InvalidArgumentError("num_seqs < 0");
    if (num_seqs > 0 && seqs == nullptr) return absl::InvalidArgumentError("no block lists");
    for (int32_t s = 0; s < num_seqs; ++s) {
      WS_RETURN_IF_ERROR(kernels::ValidateBlockList(seqs[s], block_tokens, false));
    }
    return absl::OkStatus();
  }
  static absl::Status ValidatePrefillKeys(const kernels::KvBlockList& keys, int32_t num_queries,
                                          int32_t block_tokens) {
    if (num_queries < 0) return absl::InvalidArgumentError("num_queries < 0");
    return kernels::ValidateBlockList(keys, block_tokens, true);
  }
  static uint64_t GqaTileBytes(const kernels::GqaShape& shape) {
    return uint64_t{2} * shape.num_kv_heads * shape.block_tokens * shape.head_dim * 2;
  }
  void Fallback(const absl::Status& why) {
    if (!warned_) {
      WS_LOG(WARNING) << why.message()
                      << "; attention of this shape runs on the CPU kernels over tiles copied "
                         "from the device";
      warned_ = true;
    }
  }
  // Rewrites the lists' tile pointers to host copies of the device tiles (kept in host_tiles_
  // until the next call).
  absl::Status CopyTilesToHost(absl::Span<kernels::KvBlockList> lists, uint64_t tile_bytes) {
    // Lists shared by several rows (one prefill chunk's queries) are copied once.
    absl::flat_hash_map<const uint16_t* const*, std::pair<uint64_t, int32_t>> copied;
    uint64_t tiles = 0;
    for (const kernels::KvBlockList& list : lists) {
      auto [it, inserted] = copied.try_emplace(list.blocks, 0, list.num_blocks);
      if (!inserted) it->second.second = std::max(it->second.second, list.num_blocks);
    }
    for (auto& [blocks, entry] : copied) {
      entry.first = tiles;
      tiles += entry.second;
    }
    host_tiles_.assign(tiles * tile_bytes / 2, 0);
    host_pointers_.assign(tiles, nullptr);
    for (const auto& [blocks, entry] : copied) {
      for (int32_t i = 0; i < entry.second; ++i) {
        uint16_t* host = host_tiles_.data() + (entry.first + i) * tile_bytes / 2;
        WS_RETURN_IF_ERROR(device_->CopyToHost(host, blocks[i], tile_bytes, Stream::kCompute));
        host_pointers_[entry.first + i] = host;
      }
    }
    for (kernels::KvBlockList& list : lists) {
      if (list.num_blocks > 0) list.blocks = host_pointers_.data() + copied[list.blocks].first;
    }
    return device_->Synchronize(Stream::kCompute);
  }

  // The batch in one split-KV decode launch (kernels/cuda/cuda_attention.h GqaGpuDecode)
  // over a tile pointer list: each sequence's tiles lie wherever the step put them (its
  // ping-pong positions in slot order, the D-window, a chunk's own blocks), so nothing is
  // repacked. One staging of all queries and lists, one copy of all outputs, one sync.
  absl::Status CudaGqaDecode(const kernels::GqaDecodeArgs& args) {
    WS_RETURN_IF_ERROR(args.shape.Validate());
    WS_RETURN_IF_ERROR(ValidateDecodeLists(args.seqs, args.num_seqs, args.shape.block_tokens));
    if (args.num_seqs == 0) return absl::OkStatus();
    const int64_t heads = args.shape.num_q_heads, dim = args.shape.head_dim;
    kernels::cuda::GpuKvSource kv;
    WS_ASSIGN_OR_RETURN(const int32_t total,
                        StageTileLists(args.seqs, args.num_seqs, args.shape.block_tokens, &kv));
    if (total == 0) {  // no keys at all: every row is the empty state
      std::fill_n(args.o, int64_t{args.num_seqs} * heads * dim, 0.0f);
      std::fill_n(args.lse, int64_t{args.num_seqs} * heads, kernels::kEmptyLse);
      return absl::OkStatus();
    }
    const int64_t rows = int64_t{args.num_seqs} * heads;
    WS_RETURN_IF_ERROR(Stage(&q_, args.q, rows * dim * 2));
    WS_RETURN_IF_ERROR(Grow(&o_, rows * dim * 4 + rows * 4));
    kernels::cuda::GqaGpuDecodeArgs gpu;
    gpu.shape = args.shape;
    gpu.num_seqs = args.num_seqs;
    gpu.q = static_cast<const uint16_t*>(q_.data());
    gpu.kv = kv;
    gpu.o = static_cast<float*>(o_.data());
    gpu.lse = gpu.o + rows * dim;
    gpu.split.gqa_kernel = options_.gqa_decode_kernel;  // before sizing: it plans the splits
    const size_t workspace = kernels::cuda::GqaGpuDecodeWorkspaceBytes(gpu);
    WS_RETURN_IF_ERROR(Grow(&workspace_, workspace));
    gpu.workspace = workspace_.data();
    gpu.workspace_bytes = workspace_.size();
    WS_RETURN_IF_ERROR(kernels::cuda::GqaGpuDecode(gpu, device_->native_stream(Stream::kCompute)));
    WS_RETURN_IF_ERROR(device_->CopyToHost(args.o, gpu.o, rows * dim * 4, Stream::kCompute));
    WS_RETURN_IF_ERROR(device_->CopyToHost(args.lse, gpu.lse, rows * 4, Stream::kCompute));
    return device_->Synchronize(Stream::kCompute);
  }

  absl::Status CudaGqaPrefill(const kernels::GqaPrefillArgs& args) {
    WS_RETURN_IF_ERROR(args.shape.Validate());
    WS_RETURN_IF_ERROR(ValidatePrefillKeys(args.keys, args.num_queries, args.shape.block_tokens));
    const int64_t rows = int64_t{args.num_queries} * args.shape.num_q_heads;
    WS_ASSIGN_OR_RETURN(const PrefillBuffers buffers,
                        StagePrefill(args.q, rows * args.shape.head_dim * 2, args.keys,
                                     args.shape.block_tokens, rows, args.shape.head_dim));
    WS_RETURN_IF_ERROR(kernels::cuda::GqaGpuPrefill(
        {args.shape, args.num_queries, args.query_position0, buffers.q, buffers.keys, buffers.o,
         buffers.lse},
        device_->native_stream(Stream::kCompute)));
    return CopyPrefillOut(buffers, args.o, args.lse, rows, args.shape.head_dim);
  }

  absl::Status CudaMlaPrefill(const kernels::MlaPrefillArgs& args) {
    WS_RETURN_IF_ERROR(args.shape.Validate());
    WS_RETURN_IF_ERROR(ValidatePrefillKeys(args.keys, args.num_queries, args.shape.block_tokens));
    const int64_t rows = int64_t{args.num_queries} * args.shape.num_heads;
    WS_ASSIGN_OR_RETURN(const PrefillBuffers buffers,
                        StagePrefill(args.q, rows * args.shape.row_dim() * 2, args.keys,
                                     args.shape.block_tokens, rows, args.shape.kv_lora_rank));
    WS_RETURN_IF_ERROR(kernels::cuda::MlaGpuPrefill(
        {args.shape, args.num_queries, args.query_position0, buffers.q, buffers.keys, buffers.o,
         buffers.lse},
        device_->native_stream(Stream::kCompute)));
    return CopyPrefillOut(buffers, args.o, args.lse, rows, args.shape.kv_lora_rank);
  }

  // A prefill's device side: q, the tile list and room for o and lse in the staging buffers.
  struct PrefillBuffers {
    const uint16_t* q;
    kernels::cuda::GpuKvTileList keys;
    float* o;
    float* lse;
  };
  absl::StatusOr<PrefillBuffers> StagePrefill(const uint16_t* q, int64_t q_bytes,
                                              const kernels::KvBlockList& keys, int32_t block_tokens,
                                              int64_t rows, int32_t out_dim) {
    const int32_t n = keys.num_blocks;
    std::vector<int32_t> tokens(n);
    for (int32_t i = 0; i < n; ++i) tokens[i] = keys.BlockTokens(i, block_tokens);
    WS_RETURN_IF_ERROR(Stage(&q_, q, q_bytes));
    WS_RETURN_IF_ERROR(Stage(&tiles_, keys.blocks, n * sizeof(void*)));
    WS_RETURN_IF_ERROR(Stage(&positions_, keys.block_positions, n * sizeof(int64_t)));
    WS_RETURN_IF_ERROR(Stage(&tokens_, tokens.data(), n * sizeof(int32_t)));
    WS_RETURN_IF_ERROR(Grow(&o_, rows * out_dim * 4 + rows * 4));
    PrefillBuffers buffers;
    buffers.q = static_cast<const uint16_t*>(q_.data());
    buffers.keys.tiles = static_cast<const uint16_t* const*>(tiles_.data());
    buffers.keys.positions = static_cast<const int64_t*>(positions_.data());
    buffers.keys.tokens = static_cast<const int32_t*>(tokens_.data());
    buffers.keys.num_tiles = n;
    buffers.o = static_cast<float*>(o_.data());
    buffers.lse = buffers.o + rows * out_dim;
    return buffers;
  }
  absl::Status CopyPrefillOut(const PrefillBuffers& buffers, float* o, float* lse, int64_t rows,
                              int32_t out_dim) {
    WS_RETURN_IF_ERROR(device_->CopyToHost(o, buffers.o, rows * out_dim * 4, Stream::kCompute));
    WS_RETURN_IF_ERROR(device_->CopyToHost(lse, buffers.lse, rows * 4, Stream::kCompute));
    return device_->Synchronize(Stream::kCompute);
  }

  // Every row in one launch over a tile pointer list, like CudaGqaDecode: row s's tiles are
  // tile_ptrs[begin[s] .. begin[s + 1]) wherever they lie (ping-pong positions, the D-window,
  // a prefill chunk's own blocks; rows of one chunk list the same bases, each its prefix).
  // Nothing is copied on the device: a per-tile copy into a packed array cost one memcpy
  // launch per tile (~4000 per layer at DeepSeek-V2-Lite, batch 32 x 32K).
  absl::Status CudaMlaDecode(const kernels::MlaDecodeArgs& args) {
    WS_RETURN_IF_ERROR(args.shape.Validate());
    WS_RETURN_IF_ERROR(ValidateDecodeLists(args.seqs, args.num_seqs, args.shape.block_tokens));
    if (args.num_seqs == 0) return absl::OkStatus();
    kernels::cuda::GpuKvSource kv;
    WS_ASSIGN_OR_RETURN(const int32_t total,
                        StageTileLists(args.seqs, args.num_seqs, args.shape.block_tokens, &kv));
    const int64_t heads = args.shape.num_heads, rank = args.shape.kv_lora_rank;
    const int64_t rows = int64_t{args.num_seqs} * heads;
    if (total == 0) {  // no keys at all: every row is the empty state
      std::fill_n(args.o, rows * rank, 0.0f);
      std::fill_n(args.lse, rows, kernels::kEmptyLse);
      return absl::OkStatus();
    }
    WS_RETURN_IF_ERROR(Stage(&q_, args.q, rows * args.shape.row_dim() * 2));
    WS_RETURN_IF_ERROR(Grow(&o_, rows * (rank + 1) * 4));
    kernels::cuda::MlaGpuDecodeArgs gpu;
    gpu.shape = args.shape;
    gpu.num_seqs = args.num_seqs;
    gpu.q = static_cast<const uint16_t*>(q_.data());
    gpu.kv = kv;
    gpu.o = static_cast<float*>(o_.data());
    gpu.lse = gpu.o + rows * rank;
    const size_t workspace = kernels::cuda::MlaGpuDecodeWorkspaceBytes(gpu);
    WS_RETURN_IF_ERROR(Grow(&workspace_, std::max<size_t>(workspace, 256)));
    gpu.workspace = workspace_.data();
    gpu.workspace_bytes = workspace_.size();
    WS_RETURN_IF_ERROR(kernels::cuda::MlaGpuDecode(gpu, device_->native_stream(Stream::kCompute)));
    WS_RETURN_IF_ERROR(device_->CopyToHost(args.o, gpu.o, rows * rank * 4, Stream::kCompute));
    WS_RETURN_IF_ERROR(device_->CopyToHost(args.lse, gpu.lse, rows * 4, Stream::kCompute));
    return device_->Synchronize(Stream::kCompute);
  }

  // The rows' tile pointer lists on the device, for a decode launch: every row's tile bases
  // in row order (tiles_), where each row's begin (positions_, n + 1 entries) and its last
  // tile's tokens (tokens_). Fills `kv`'s list fields and returns the number of tiles; with
  // none, stages nothing (the caller writes the empty state).
  absl::StatusOr<int32_t> StageTileLists(const kernels::KvBlockList* seqs, int32_t n,
                                         int32_t block_tokens, kernels::cuda::GpuKvSource* kv) {
    std::vector<int32_t>& begin = host_begin_;
    std::vector<int32_t>& last = host_last_;
    begin.assign(n + 1, 0);
    last.assign(n, 0);
    int64_t max_tokens = 0, listed = 0;
    for (int32_t s = 0; s < n; ++s) {
      listed += seqs[s].num_blocks;
      if (listed > std::numeric_limits<int32_t>::max()) {
        return absl::InvalidArgumentError(absl::StrCat("a decode launch over ", listed, "+ tiles"));
      }
      begin[s + 1] = static_cast<int32_t>(listed);
      last[s] = seqs[s].num_blocks == 0 ? 0 : seqs[s].last_block_tokens;
      max_tokens = std::max(max_tokens, seqs[s].NumTokens(block_tokens));
    }
    if (max_tokens > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(absl::StrCat("a sequence of ", max_tokens, " keys"));
    }
    const int32_t total = begin[n];
    if (total == 0) return 0;
    std::vector<const uint16_t*> tiles(total);
    for (int32_t s = 0; s < n; ++s) {
      std::copy_n(seqs[s].blocks, seqs[s].num_blocks, tiles.data() + begin[s]);
    }
    WS_RETURN_IF_ERROR(Stage(&tiles_, tiles.data(), total * sizeof(void*)));
    WS_RETURN_IF_ERROR(Stage(&positions_, begin.data(), begin.size() * sizeof(int32_t)));
    WS_RETURN_IF_ERROR(Stage(&tokens_, last.data(), last.size() * sizeof(int32_t)));
    kv->tile_ptrs = static_cast<const uint16_t* const*>(tiles_.data());
    kv->seq_tile_begin = static_cast<const int32_t*>(positions_.data());
    kv->seq_last_tile_tokens = static_cast<const int32_t*>(tokens_.data());
    // Their host copies: a launch of a few rows carries them in its parameters.
    kv->host.tile_begin = begin.data();
    kv->host.last_tile_tokens = last.data();
    kv->max_seq_tokens = static_cast<int32_t>(max_tokens);
    return total;
  }

  absl::Status Grow(DeviceBuffer* buffer, uint64_t bytes) {
    if (buffer->size() >= bytes) return absl::OkStatus();
    *buffer = DeviceBuffer();
    WS_ASSIGN_OR_RETURN(*buffer, DeviceBuffer::Allocate(device_, std::max<uint64_t>(bytes, 4096)));
    return absl::OkStatus();
  }
  absl::Status Stage(DeviceBuffer* buffer, const void* host, uint64_t bytes) {
    WS_RETURN_IF_ERROR(Grow(buffer, bytes));
    if (bytes == 0) return absl::OkStatus();
    return device_->CopyToDevice(buffer->data(), host, bytes, Stream::kCompute);
  }

  Device* device_;
  const DeviceAttentionOptions options_;
  DeviceBuffer q_, o_, tiles_, positions_, tokens_, workspace_;
  bool warned_ = false;
  std::vector<uint16_t> host_tiles_;
  std::vector<const uint16_t*> host_pointers_;
  // The last staged lists' host copies (GpuKvSource::host points at them until the next stage).
  std::vector<int32_t> host_begin_, host_last_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceAttention>> CreateCudaDeviceAttention(
    Device* device, const DeviceAttentionOptions& options) {
  return std::make_unique<CudaDeviceAttention>(device, options);
}

}  // namespace writescope::gpu
