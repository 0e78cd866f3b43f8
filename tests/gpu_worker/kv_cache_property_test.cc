// Property test of InplaceKVCache end to end in one process: the coordinator's
// placement metadata drives the gpu_worker's KvCache (host device, real ShmArena)
// through random admits, prefills, decode steps, flushes, transfers, aborts and frees
// under random placement choices. After every operation:
//   - every token of every live sequence lives in exactly one place (a block or the
//     D-window), blocks in token order;
//   - no two live blocks share a slot and no two (slot, layer) byte ranges overlap;
//     the allocators agree with the blocks;
//   - the KV rebuilt from the arena regions + the D-window equals a plain reference
//     copy byte for byte;
// and during every decode step, each ping-pong round holds exactly the transfer blocks
// its plan names. Exhaustion must be reported exactly when a region cannot fit the
// request and leave the state unchanged; freed slots must be reused.
#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/data_plane.h"
#include "common/kv_config.h"
#include "common/shm_arena.h"
#include "coordinator/placement.h"
#include "gpu_worker/device.h"
#include "gpu_worker/kv_cache.h"
#include "gpu_worker/kv_transfer_plan.h"
#include "gtest/gtest.h"
#include "tests/common/test_util.h"
#include "tests/gpu_worker/deferred_device.h"
#include "tests/gpu_worker/kv_test_util.h"

namespace writescope {
namespace {

using coordinator::KvPlacement;
using coordinator::PlacedBlock;
using coordinator::PlacementRequest;
using coordinator::SequenceId;
using coordinator::SequencePlacement;
using gpu::KvCache;
using testing::TokenKv;

struct PropertyCase {
  std::string name;
  KvGeometry geometry;
  uint32_t window_tokens;
  uint32_t cpu_slots;
  uint32_t transfer_slots;
  uint32_t max_sequences;
  uint32_t pingpong_blocks;
  // Run on the DeferredDevice (streams reordered at random) instead of the host device.
  bool deferred;
};

void PrintTo(const PropertyCase& c, std::ostream* os) { *os << c.name; }

std::string CaseName(const ::testing::TestParamInfo<PropertyCase>& info) { return info.param.name; }

class KvCachePropertyTest : public ::testing::TestWithParam<PropertyCase> {
 protected:
  void SetUp() override {
    const PropertyCase& c = GetParam();
    KvCacheConfig config;
    config.geometry = c.geometry;
    config.window_tokens = c.window_tokens;
    config.cpu_compute_bytes = uint64_t{c.cpu_slots} * c.geometry.block_bytes();
    config.gpu_transfer_bytes = uint64_t{c.transfer_slots} * c.geometry.block_bytes();
    config.max_sequences = c.max_sequences;
    config.pingpong_blocks = c.pingpong_blocks;
    config.gpu_kv_budget_bytes = uint64_t{1} << 24;
    auto resolved = ResolveKvCacheConfig(config);
    WS_ASSERT_OK(resolved.status());
    config_ = *resolved;
    auto arena = ShmArena::Create(testing::UniqueArenaName("kvprop"),
                                  ArenaRegions(config_.arena_sizes(1 << 16)));
    WS_ASSERT_OK(arena.status());
    arena_ = *std::move(arena);
    // Garbage in the regions, so an unwritten byte cannot pass as a written zero.
    for (KvRegion r : {KvRegion::kCpuCompute, KvRegion::kGpuTransfer}) {
      auto span = arena_->Region(KvRegionName(r));
      WS_ASSERT_OK(span.status());
      std::memset(span->data(), 0xA5, span->size());
      region_[KvRegionIndex(r)] = *span;
    }
    if (c.deferred) {
      auto deferred = std::make_unique<testing::DeferredDevice>(/*seed=*/7);
      deferred_ = deferred.get();
      device_ = std::move(deferred);
    } else {
      device_ = gpu::CreateHostDevice();
    }
    auto cache = KvCache::Create(config_, *arena_, device_.get());
    WS_ASSERT_OK(cache.status());
    cache_ = *std::move(cache);
    auto placement = KvPlacement::Create(config_);
    WS_ASSERT_OK(placement.status());
    placement_ = *std::move(placement);
    pingpong_at_start_ = {cache_->pingpong_buffer(0), cache_->pingpong_buffer(1)};
  }

  const KvGeometry& g() const { return config_.geometry; }
  uint64_t row_bytes() const { return g().bytes_per_token_layer(); }

  // A random chooser biased toward the CPU region with probability p_cpu; records what
  // it chose so the test knows whether the request fits.
  struct Chooser {
    std::mt19937_64* rng;
    double p_cpu;
    std::array<uint32_t, kNumKvRegions> chosen{};
    std::array<uint32_t, kNumKvRegions> free_at_start{};
    bool first = true;
    KvRegion operator()(const PlacementRequest& request) {
      if (first) {
        free_at_start = request.free_slots;
        first = false;
      }
      const KvRegion r =
          std::bernoulli_distribution(p_cpu)(*rng) ? KvRegion::kCpuCompute : KvRegion::kGpuTransfer;
      ++chosen[KvRegionIndex(r)];
      return r;
    }
    bool fits() const { return chosen[0] <= free_at_start[0] && chosen[1] <= free_at_start[1]; }
  };

  std::set<std::pair<int, uint32_t>> UsedSlots() const {
    std::set<std::pair<int, uint32_t>> used;
    for (SequenceId id : placement_->LiveSequences()) {
      for (const PlacedBlock& b : placement_->Find(id)->blocks) {
        used.insert({KvRegionIndex(b.ref.region), b.ref.slot});
      }
    }
    return used;
  }

  void NoteAllocated(const std::vector<PlacedBlock>& blocks) {
    for (const PlacedBlock& b : blocks) {
      if (ever_freed_.contains({KvRegionIndex(b.ref.region), b.ref.slot})) ++reused_;
    }
  }

  // Writes a prefill of `tokens` through the worker-side path, one layer at a time.
  void WritePrefill(const coordinator::PrefillPlan& plan, const std::vector<TokenKv>& tokens) {
    const uint32_t bt = config_.block_tokens();
    const uint64_t lbb = g().layer_block_bytes();
    const uint64_t staged_blocks = (tokens.size() + bt - 1) / bt;
    std::vector<KvBlockRef> refs;
    for (const PlacedBlock& b : plan.blocks) refs.push_back(b.ref);
    ASSERT_EQ(plan.blocks.size(), tokens.size() / bt);
    ASSERT_EQ(plan.window_tokens, tokens.size() % bt);
    for (uint32_t layer = 0; layer < g().num_layers; ++layer) {
      // The projection's output in the block layout, on the device.
      std::vector<std::byte> host(staged_blocks * lbb, std::byte{0x3C});
      for (size_t t = 0; t < tokens.size(); ++t) {
        gpu::ScatterTokenRow(g(), tokens[t].data() + layer * row_bytes(), t % bt,
                             host.data() + (t / bt) * lbb);
      }
      auto staging = gpu::DeviceBuffer::Allocate(device_.get(), host.size());
      WS_ASSERT_OK(staging.status());
      if (!host.empty()) {
        WS_ASSERT_OK(device_->CopyToDevice(staging->data(), host.data(), host.size(),
                                           gpu::Stream::kCompute));
      }
      WS_ASSERT_OK(cache_->WritePrefillLayer(layer, refs, plan.window_slot, plan.window_tokens,
                                             staging->data()));
      // The host source of CopyToDevice must outlive the queued copy too.
      staged_host_.push_back(std::move(host));
      keepalive_.push_back(*std::move(staging));
    }
  }

  // One sequence of two full blocks (random tokens from `seed`, written through
  // WritePrefill), the first in the CPU-compute region, the second in the transfer region;
  // returns the plans of a step that streams the transfer block and of one that streams both
  // (writescope's GPU-only mode): their rounds of a layer share one block.
  std::pair<gpu::TransferPlan, gpu::TransferPlan> TwoPlansSharingABlock(uint64_t seed) {
    std::pair<gpu::TransferPlan, gpu::TransferPlan> plans;
    std::mt19937_64 rng(seed);
    std::vector<TokenKv> tokens;
    for (uint32_t t = 0; t < 2 * config_.block_tokens(); ++t) {
      tokens.push_back(testing::RandomTokenKv(config_.geometry, rng));
    }
    EXPECT_TRUE(placement_->Admit(1).ok());
    int chosen = 0;
    auto cpu_then_transfer = [&](const PlacementRequest&) {
      return chosen++ == 0 ? KvRegion::kCpuCompute : KvRegion::kGpuTransfer;
    };
    auto prefill = placement_->PlanPrefill(1, 2 * config_.block_tokens(), cpu_then_transfer);
    EXPECT_TRUE(prefill.ok()) << prefill.status();
    if (!prefill.ok()) return plans;
    WritePrefill(*prefill, tokens);
    for (bool read_cpu : {false, true}) {
      gpu::StepSequence s;
      s.window_slot = prefill->window_slot;
      s.read_cpu_blocks = read_cpu;
      for (const PlacedBlock& b : prefill->blocks) s.blocks.push_back(b.ref);
      auto built = gpu::BuildTransferPlan(config_, {s});
      EXPECT_TRUE(built.ok()) << built.status();
      if (built.ok()) (read_cpu ? plans.second : plans.first) = *std::move(built);
    }
    return plans;
  }

  void AppendThroughWorker(uint32_t window_slot, uint32_t position, const TokenKv& token) {
    auto row = gpu::DeviceBuffer::Allocate(device_.get(), row_bytes());
    WS_ASSERT_OK(row.status());
    const TokenKv& source = staged_rows_.emplace_back(token);
    for (uint32_t layer = 0; layer < g().num_layers; ++layer) {
      // One row buffer reused per layer: same stream, so in order.
      WS_ASSERT_OK(device_->CopyToDevice(row->data(), source.data() + layer * row_bytes(),
                                         row_bytes(), gpu::Stream::kCompute));
      WS_ASSERT_OK(cache_->AppendToken(window_slot, position, layer, row->data()));
    }
    keepalive_.push_back(*std::move(row));
  }

  // Drains every stream; then queued sources may be released.
  void Sync() {
    WS_ASSERT_OK(device_->SynchronizeAll());
    keepalive_.clear();
    staged_host_.clear();
    staged_rows_.clear();
    plans_.clear();
  }

  // Runs `fn` where attention would run: in kCompute order.
  void OnCompute(std::function<void()> fn) {
    if (deferred_ != nullptr) {
      deferred_->EnqueueHostFn(gpu::Stream::kCompute, std::move(fn));
    } else {
      fn();
    }
  }

  // Reads token `t` of `seq`, layer `layer`, from the arena or the D-window, computing
  // addresses from the documented layouts (not through KvCache).
  std::vector<std::byte> ReadToken(const SequencePlacement& seq, uint64_t t, uint32_t layer) {
    const uint32_t bt = config_.block_tokens();
    const uint64_t lbb = g().layer_block_bytes();
    std::vector<std::byte> row(row_bytes());
    if (t < seq.window_first_token()) {
      const PlacedBlock& b = seq.blocks[t / bt];
      EXPECT_EQ(b.first_token, t / bt * bt);
      const int r = KvRegionIndex(b.ref.region);
      const std::byte* block =
          region_[r].data() +
          RegionBlockOffset(g(), config_.region_slots(b.ref.region), b.ref.slot, layer);
      gpu::GatherTokenRow(g(), block, t % bt, row.data());
    } else {
      const uint64_t p = t - seq.window_first_token();
      const std::byte* window_base = cache_->WindowAddress(0, 0);
      const std::byte* window =
          window_base + (uint64_t{layer} * config_.max_sequences + seq.window_slot) *
                            config_.window_tokens * row_bytes();
      gpu::GatherTokenRow(g(), window + (p / bt) * lbb, p % bt, row.data());
    }
    return row;
  }

  void CheckInvariants() {
    Sync();
    ASSERT_EQ(pingpong_mismatches_, 0);
    const uint32_t bt = config_.block_tokens();
    const uint64_t lbb = g().layer_block_bytes();
    std::array<uint32_t, kNumKvRegions> used{};
    std::vector<std::tuple<int, uint64_t, uint64_t>> ranges;  // region, begin, end
    std::set<uint32_t> window_slots;
    ASSERT_EQ(placement_->num_live(), reference_.size());
    for (const auto& [id, tokens] : reference_)
      max_tokens_ = std::max<uint64_t>(max_tokens_, tokens.size());
    for (const auto& [id, tokens] : reference_) {
      const SequencePlacement* seq = placement_->Find(id);
      ASSERT_NE(seq, nullptr) << id;
      // Exactly one place per token: blocks cover [0, k*bt) in order, the window the rest.
      ASSERT_EQ(seq->num_tokens(), tokens.size()) << "sequence " << id;
      ASSERT_LE(seq->window_tokens, config_.window_tokens);
      ASSERT_TRUE(window_slots.insert(seq->window_slot).second) << "window slot shared";
      for (size_t i = 0; i < seq->blocks.size(); ++i) {
        const PlacedBlock& b = seq->blocks[i];
        ASSERT_EQ(b.first_token, i * bt);
        const int r = KvRegionIndex(b.ref.region);
        ASSERT_LT(b.ref.slot, config_.region_slots(b.ref.region));
        ASSERT_FALSE(placement_->allocator(b.ref.region).IsFree(b.ref.slot));
        ++used[r];
        for (uint32_t layer = 0; layer < g().num_layers; ++layer) {
          const uint64_t begin =
              RegionBlockOffset(g(), config_.region_slots(b.ref.region), b.ref.slot, layer);
          ranges.push_back({r, begin, begin + lbb});
          ASSERT_LE(begin + lbb, region_[r].size());
        }
      }
      // Byte for byte against the reference.
      for (uint64_t t = 0; t < tokens.size(); ++t) {
        for (uint32_t layer = 0; layer < g().num_layers; ++layer) {
          const std::vector<std::byte> got = ReadToken(*seq, t, layer);
          ASSERT_EQ(0, std::memcmp(got.data(), tokens[t].data() + layer * row_bytes(), row_bytes()))
              << "sequence " << id << " token " << t << " layer " << layer
              << (t < seq->window_first_token() ? " (block)" : " (D-window)");
        }
      }
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i) {
      if (std::get<0>(ranges[i]) != std::get<0>(ranges[i - 1])) continue;
      ASSERT_LE(std::get<2>(ranges[i - 1]), std::get<1>(ranges[i])) << "blocks overlap";
    }
    for (KvRegion r : {KvRegion::kCpuCompute, KvRegion::kGpuTransfer}) {
      EXPECT_EQ(placement_->Usage(r).used_blocks, used[KvRegionIndex(r)]);
      EXPECT_EQ(placement_->Usage(r).total_blocks, config_.region_slots(r));
    }
    const double total = used[0] + used[1];
    EXPECT_DOUBLE_EQ(placement_->PlacedCpuShare(), total == 0 ? 0.0 : used[0] / total);
    // The ping-pong buffers never move.
    EXPECT_EQ(cache_->pingpong_buffer(0), pingpong_at_start_[0]);
    EXPECT_EQ(cache_->pingpong_buffer(1), pingpong_at_start_[1]);
  }

  // One decode step over `batch`: flush where needed, append one token each, then
  // stream the transfer blocks round by round and check every ping-pong round. Then queue
  // the next step's round 0 early when `early` says so (-1: at random).
  void DecodeStep(const std::vector<SequenceId>& batch, std::mt19937_64& rng, double p_cpu,
                  int early = -1) {
    std::vector<SequenceId> stepped;
    for (SequenceId id : batch) {
      if (placement_->NeedsFlush(id)) {
        const auto before = UsedSlots();
        Chooser chooser{&rng, p_cpu};
        auto flush = placement_->Flush(id, std::ref(chooser));
        if (!flush.ok()) {
          ASSERT_EQ(flush.status().code(), absl::StatusCode::kResourceExhausted) << flush.status();
          ASSERT_FALSE(chooser.fits()) << "exhaustion reported although the blocks fit";
          ASSERT_EQ(UsedSlots(), before) << "failed flush changed the placement";
          ASSERT_TRUE(placement_->NeedsFlush(id));
          ++exhausted_;
          continue;  // this sequence waits (a scheduling decision)
        }
        ASSERT_TRUE(chooser.fits()) << "flush succeeded beyond the free slots";
        ++flushes_;
        NoteAllocated(flush->blocks);
        std::vector<KvBlockRef> refs;
        for (const PlacedBlock& b : flush->blocks) refs.push_back(b.ref);
        WS_ASSERT_OK(cache_->FlushWindow(flush->window_slot, refs));
      }
      auto position = placement_->AppendDecode(id);
      WS_ASSERT_OK(position.status());
      const TokenKv token = testing::RandomTokenKv(g(), rng);
      AppendThroughWorker(placement_->Find(id)->window_slot, *position, token);
      reference_[id].push_back(token);
      stepped.push_back(id);
    }
    // The transfer plan of the step; one step in three streams the CPU-compute blocks too
    // (writescope's GPU-only mode), so that consecutive steps switch between the two plans
    // whose first rounds share the transfer blocks (early rounds taken in part).
    const bool read_cpu = rng() % 3 == 0;
    std::vector<gpu::StepSequence> step;
    for (SequenceId id : stepped) {
      const SequencePlacement* seq = placement_->Find(id);
      gpu::StepSequence& s = step.emplace_back();
      s.window_slot = seq->window_slot;
      s.window_tokens = seq->window_tokens;
      s.read_cpu_blocks = read_cpu;
      for (const PlacedBlock& b : seq->blocks) s.blocks.push_back(b.ref);
    }
    auto built = gpu::BuildTransferPlan(config_, step);
    WS_ASSERT_OK(built.status());
    // Queued copies and checks refer to the plan until the next Sync.
    const gpu::TransferPlan* plan = &plans_.emplace_back(*std::move(built));
    if (plan->chunks.size() > 1) ++multi_chunk_steps_;
    ++steps_;
    uint64_t expected_blocks = 0;
    for (const auto& s : step) {
      for (const KvBlockRef& b : s.blocks) {
        expected_blocks += b.region == KvRegion::kGpuTransfer || s.read_cpu_blocks;
      }
    }
    ASSERT_EQ(plan->blocks_per_layer(), expected_blocks);
    const uint64_t lbb = g().layer_block_bytes();
    const uint32_t bt = config_.block_tokens();
    const gpu::KvCacheStats before = cache_->stats();
    WS_ASSERT_OK(cache_->BeginTransfer(*plan));
    // The step's missed early rounds: those taken in part and those dropped for its plan.
    const gpu::KvCacheStats& after = cache_->stats();
    EXPECT_EQ(cache_->transfer_missed_early_rounds(),
              (after.early_rounds_completed - before.early_rounds_completed) +
                  (after.early_rounds_differed - before.early_rounds_differed) +
                  (after.early_rounds_overwritten - before.early_rounds_overwritten));
    for (uint32_t round = 0; round < plan->num_rounds(); ++round) {
      // The next round queued by ReadyRound, by PrefetchNext after this round's attention,
      // by PrefetchAfterAttention (the next two), by both ReadyRound and
      // PrefetchAfterAttention (what the gpu_worker does), or by nobody until its own
      // ReadyRound.
      const int prefetch = static_cast<int>(rng() % 5);
      auto ready = cache_->ReadyRound(round, /*prefetch_next=*/prefetch == 0 || prefetch == 4);
      WS_ASSERT_OK(ready.status());
      ASSERT_EQ(ready->buffer, cache_->pingpong_buffer(round % 2));
      ASSERT_LE(ready->chunk_plan->num_blocks, config_.pingpong_blocks);
      // "Attention" over this round, in compute order: the buffer must hold exactly the
      // blocks the plan names, even while the next round streams into the other one.
      OnCompute([this, round, r = *ready, stepped, lbb, bt] {
        for (const gpu::PingPongEntry& e : r.chunk_plan->entries) {
          const std::vector<TokenKv>& tokens = reference_[stepped[e.sequence_index]];
          const std::byte* got = r.buffer + uint64_t{e.pingpong_block} * lbb;
          for (uint32_t k = 0; k < bt; ++k) {
            std::vector<std::byte> row(row_bytes());
            gpu::GatherTokenRow(g(), got, k, row.data());
            if (std::memcmp(row.data(),
                            tokens[uint64_t{e.block_index} * bt + k].data() + r.layer * row_bytes(),
                            row_bytes()) != 0) {
              ADD_FAILURE() << "ping-pong round " << round << " sequence "
                            << stepped[e.sequence_index] << " block " << e.block_index << " token "
                            << k;
              ++pingpong_mismatches_;
              return;
            }
          }
        }
      });
      if (prefetch == 1) WS_ASSERT_OK(cache_->PrefetchNext());
      if (prefetch == 2 || prefetch == 4) WS_ASSERT_OK(cache_->PrefetchAfterAttention());
    }
    WS_ASSERT_OK(cache_->PrefetchNext());  // nothing left: a no-op
    EXPECT_EQ(cache_->ReadyRound(plan->num_rounds()).status().code(),
              absl::StatusCode::kFailedPrecondition);
    // Half the steps queue the next step's rounds 0 and 1 early (what the gpu_worker does):
    // the next BeginTransfer must take them only when they still hold what its plan names
    // (the ping-pong check above), across the prefills, frees, reuses and flushes between.
    // Its own generator leaves the operations' random sequence as it was.
    if (early == 1 || (early == -1 && early_rng_() % 2 == 0)) {
      WS_ASSERT_OK(cache_->QueueEarlyRounds(*plan));
    }
  }

  void RunRandomOperations(uint64_t seed, int num_ops) {
    std::mt19937_64 rng(seed);
    SequenceId next_id = 1;
    const uint32_t bt = config_.block_tokens();
    for (int op = 0; op < num_ops; ++op) {
      // Drift the placement policy over time, as the scheduler would.
      const double p_cpu = std::uniform_real_distribution<double>(0, 1)(rng);
      const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
      std::vector<SequenceId> live = placement_->LiveSequences();
      if (kind <= 1) {  // admit
        const absl::Status status = placement_->Admit(next_id);
        if (live.size() < config_.max_sequences) {
          WS_ASSERT_OK(status);
          reference_[next_id];
          empty_.insert(next_id);
        } else {
          ASSERT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
          ++exhausted_;
        }
        ++next_id;
      } else if (kind <= 3 && !empty_.empty()) {  // prefill
        auto it = empty_.begin();
        std::advance(it, rng() % empty_.size());
        const SequenceId id = *it;
        const uint64_t n = std::uniform_int_distribution<uint64_t>(0, 6 * bt)(rng);
        const auto before = UsedSlots();
        Chooser chooser{&rng, p_cpu};
        auto plan = placement_->PlanPrefill(id, n, std::ref(chooser));
        if (!plan.ok()) {
          ASSERT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted) << plan.status();
          ASSERT_FALSE(chooser.fits()) << "exhaustion reported although the blocks fit";
          ASSERT_EQ(UsedSlots(), before) << "failed prefill changed the placement";
          ASSERT_EQ(placement_->Find(id)->num_tokens(), 0u);
          ++exhausted_;
        } else {
          ASSERT_TRUE(chooser.fits());
          NoteAllocated(plan->blocks);
          std::vector<TokenKv> tokens;
          for (uint64_t t = 0; t < n; ++t) tokens.push_back(testing::RandomTokenKv(g(), rng));
          WritePrefill(*plan, tokens);
          if (HasFatalFailure()) return;
          reference_[id] = std::move(tokens);
          empty_.erase(id);
        }
      } else if (kind <= 7) {  // decode step over a random subset of prefilled sequences
        std::vector<SequenceId> batch;
        for (SequenceId id : live) {
          if (!empty_.contains(id) && rng() % 4 != 0) batch.push_back(id);
        }
        std::shuffle(batch.begin(), batch.end(), rng);
        const int steps = 1 + static_cast<int>(rng() % (config_.window_tokens + 2));
        for (int s = 0; s < steps && !HasFatalFailure(); ++s) DecodeStep(batch, rng, p_cpu);
      } else if (!live.empty()) {  // finish or abort
        const SequenceId id = live[rng() % live.size()];
        for (const PlacedBlock& b : placement_->Find(id)->blocks) {
          ever_freed_.insert({KvRegionIndex(b.ref.region), b.ref.slot});
        }
        WS_ASSERT_OK(placement_->Free(id));
        reference_.erase(id);
        empty_.erase(id);
        EXPECT_EQ(placement_->Free(id).code(), absl::StatusCode::kNotFound);
      }
      if (HasFatalFailure()) return;
      CheckInvariants();
      if (HasFatalFailure()) {
        ADD_FAILURE() << "after operation " << op << " (kind " << kind << ", seed " << seed << ")";
        return;
      }
    }
  }

  KvCacheConfig config_;
  std::unique_ptr<ShmArena> arena_;
  std::array<absl::Span<std::byte>, kNumKvRegions> region_;
  std::unique_ptr<gpu::Device> device_;
  testing::DeferredDevice* deferred_ = nullptr;  // device_ when deferred
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<KvPlacement> placement_;
  std::array<std::byte*, 2> pingpong_at_start_{};

  std::map<SequenceId, std::vector<TokenKv>> reference_;  // live sequences
  std::set<SequenceId> empty_;                            // admitted, not prefilled
  std::set<std::pair<int, uint32_t>> ever_freed_;
  int reused_ = 0;
  int exhausted_ = 0;
  int flushes_ = 0;
  int multi_chunk_steps_ = 0;
  int pingpong_mismatches_ = 0;
  // Sources of queued device work, released at Sync.
  std::vector<gpu::DeviceBuffer> keepalive_;
  std::vector<std::vector<std::byte>> staged_host_;
  std::deque<TokenKv> staged_rows_;
  std::deque<gpu::TransferPlan> plans_;
  std::mt19937_64 early_rng_{99};
  int steps_ = 0;
  uint64_t max_tokens_ = 0;
};

TEST_P(KvCachePropertyTest, RandomOperationsKeepEveryTokenInExactlyOnePlace) {
  for (uint64_t seed : {1, 2, 3}) {
    RunRandomOperations(seed, 150);
    if (HasFatalFailure()) return;
  }
  const gpu::KvCacheStats& stats = cache_->stats();
  std::cout << "flushes=" << flushes_ << " reused=" << reused_ << " exhausted=" << exhausted_
            << " multi_chunk_steps=" << multi_chunk_steps_ << " decode_steps=" << steps_
            << " max_live_tokens=" << max_tokens_
            << " early_rounds_taken=" << stats.early_rounds_taken
            << " early_rounds_completed=" << stats.early_rounds_completed
            << " early_rounds_wasted=" << stats.early_rounds_wasted << "\n";
  // The run must have exercised what it claims to test.
  EXPECT_GT(flushes_, 0);
  EXPECT_GT(reused_, 0) << "freed slots were never reused";
  EXPECT_GT(exhausted_, 0) << "no exhaustion was provoked";
  EXPECT_GT(multi_chunk_steps_, 0) << "no step needed more than one ping-pong chunk";
  EXPECT_GT(stats.early_rounds_taken, 0u) << "no early round was ever taken";
  EXPECT_GT(stats.early_rounds_completed, 0u) << "no early round was ever taken in part";
  EXPECT_GT(stats.early_rounds_wasted, 0u) << "no early round was ever dropped";
  EXPECT_EQ(stats.early_rounds_wasted, stats.early_rounds_differed +
                                           stats.early_rounds_overwritten +
                                           stats.early_rounds_unoffered);
}

// The early rounds taken and dropped, deterministically: steps over an unchanged batch take
// both; a step over another sequence drops them; after a sequence is freed and another
// one's prefill is written into the very same slots (so the next plan's first rounds have
// the same runs), they are dropped and copied again. The ping-pong check of every
// DecodeStep proves what each round held.
TEST_P(KvCachePropertyTest, EarlyRoundsAreTakenOnlyWhileTheirSlotsAreUnwritten) {
  // Every geometry here has two layers or more: two rounds or more per step, two early.
  ASSERT_GE(g().num_layers, 2u);
  constexpr uint64_t kEarly = 2;
  std::mt19937_64 rng(11);
  const uint32_t bt = config_.block_tokens();
  auto transfer_only = [](const PlacementRequest&) { return KvRegion::kGpuTransfer; };
  auto prefill = [&](SequenceId id) -> std::vector<KvBlockRef> {
    EXPECT_TRUE(placement_->Admit(id).ok());
    auto plan = placement_->PlanPrefill(id, 2 * bt, transfer_only);
    EXPECT_TRUE(plan.ok()) << plan.status();
    if (!plan.ok()) return {};
    std::vector<TokenKv> tokens;
    for (uint32_t t = 0; t < 2 * bt; ++t) tokens.push_back(testing::RandomTokenKv(g(), rng));
    WritePrefill(*plan, tokens);
    reference_[id] = std::move(tokens);
    std::vector<KvBlockRef> refs;
    for (const PlacedBlock& b : plan->blocks) refs.push_back(b.ref);
    return refs;
  };
  const std::vector<KvBlockRef> first = prefill(1);
  ASSERT_EQ(first.size(), 2u);
  const std::vector<KvBlockRef> other = prefill(3);
  const gpu::KvCacheStats& stats = cache_->stats();
  DecodeStep({1}, rng, 0.0, /*early=*/1);
  DecodeStep({1}, rng, 0.0, /*early=*/1);
  ASSERT_NO_FATAL_FAILURE(CheckInvariants());
  EXPECT_EQ(stats.early_rounds_taken, kEarly);
  EXPECT_EQ(stats.early_rounds_wasted, 0u);
  EXPECT_EQ(cache_->transfer_missed_early_rounds(), 0u);

  // Another batch, nothing written: the next rounds copy other slots.
  DecodeStep({3}, rng, 0.0, /*early=*/0);
  ASSERT_NO_FATAL_FAILURE(CheckInvariants());
  EXPECT_EQ(stats.early_rounds_taken, kEarly);
  EXPECT_EQ(stats.early_rounds_wasted, kEarly);
  EXPECT_EQ(stats.early_rounds_differed, kEarly);
  EXPECT_EQ(cache_->transfer_missed_early_rounds(), kEarly);
  DecodeStep({1}, rng, 0.0, /*early=*/1);
  ASSERT_NO_FATAL_FAILURE(CheckInvariants());  // its checks ran: the references may go
  WS_ASSERT_OK(placement_->Free(3));
  reference_.erase(3);

  // Sequence 2 takes sequence 1's freed slots; its prefill writes them while the early
  // rounds of sequence 1's blocks are pending.
  WS_ASSERT_OK(placement_->Free(1));
  reference_.erase(1);
  const std::vector<KvBlockRef> second = prefill(2);
  ASSERT_EQ(second, first) << "the allocator did not hand the freed slots out again";
  DecodeStep({2}, rng, 0.0, /*early=*/0);
  ASSERT_NO_FATAL_FAILURE(CheckInvariants());
  EXPECT_EQ(stats.early_rounds_taken, kEarly);
  EXPECT_EQ(stats.early_rounds_wasted, 2 * kEarly);
  EXPECT_EQ(stats.early_rounds_overwritten, kEarly);
  EXPECT_EQ(stats.early_rounds_differed, kEarly);
  EXPECT_EQ(stats.early_rounds_unoffered, 0u);
  EXPECT_EQ(cache_->transfer_missed_early_rounds(), kEarly);
}

// A copy that fails while BeginTransfer completes an early round (a device error) leaves no
// plan and no early rounds: the next transfer copies every round anew, and its buffers hold
// what its plan names.
TEST_P(KvCachePropertyTest, AFailedCopyCompletingAnEarlyRoundDropsTheEarlyRounds) {
  if (deferred_ == nullptr) GTEST_SKIP() << "failing copies are the deferred device's";
  auto [transfer_only, both] = TwoPlansSharingABlock(/*seed=*/5);
  ASSERT_GT(both.num_rounds(), 0u);
  ASSERT_EQ(both.chunks[0].num_blocks, 2u);
  ASSERT_EQ(transfer_only.chunks[0].num_blocks, 1u);
  Sync();
  const gpu::KvCacheStats& stats = cache_->stats();

  WS_ASSERT_OK(cache_->QueueEarlyRounds(transfer_only));
  deferred_->FailCopiesToDeviceAfter(0);  // the CPU block that round 0 lacks
  EXPECT_EQ(cache_->BeginTransfer(both).code(), absl::StatusCode::kInternal);
  deferred_->FailCopiesToDeviceAfter(-1);
  EXPECT_EQ(stats.early_rounds_taken, 0u);
  EXPECT_EQ(stats.early_rounds_wasted, 2u);
  EXPECT_EQ(cache_->ReadyRound(0).status().code(), absl::StatusCode::kFailedPrecondition);

  const uint64_t copies = stats.transfer_copies;
  WS_ASSERT_OK(cache_->BeginTransfer(transfer_only));
  EXPECT_EQ(stats.early_rounds_taken, 0u);
  EXPECT_EQ(stats.transfer_copies, copies + 1);  // round 0 copied anew
  const uint64_t lbb = g().layer_block_bytes();
  for (uint32_t round = 0; round < transfer_only.num_rounds(); ++round) {
    auto ready = cache_->ReadyRound(round);
    WS_ASSERT_OK(ready.status());
    WS_ASSERT_OK(device_->SynchronizeAll());
    const gpu::TransferRun& run = ready->chunk_plan->runs.at(0);
    EXPECT_EQ(std::memcmp(ready->buffer + uint64_t{run.pingpong_block} * lbb,
                          cache_->BlockAddress({run.region, run.first_slot}, ready->layer), lbb),
              0)
        << "round " << round;
  }
  Sync();

  // Early rounds queued in part (the second round's copy fails) are dropped, never taken.
  const uint64_t unoffered = stats.early_rounds_unoffered;
  deferred_->FailCopiesToDeviceAfter(1);
  EXPECT_EQ(cache_->QueueEarlyRounds(transfer_only).code(), absl::StatusCode::kInternal);
  deferred_->FailCopiesToDeviceAfter(-1);
  EXPECT_EQ(stats.early_rounds_unoffered, unoffered + 1);
  WS_ASSERT_OK(cache_->BeginTransfer(transfer_only));
  EXPECT_EQ(stats.early_rounds_taken, 0u);
  for (uint32_t round = 0; round < transfer_only.num_rounds(); ++round) {
    WS_ASSERT_OK(cache_->ReadyRound(round).status());
  }
  Sync();
}

// Early rounds still pending when the markers are reset (past a step that failed before its
// transfer) are taken untimed: their markers would name the reset's new ones.
TEST_P(KvCachePropertyTest, EarlyRoundsPendingAcrossAMarkerResetAreTakenUntimed) {
  auto [transfer_only, both] = TwoPlansSharingABlock(/*seed=*/6);
  ASSERT_GE(transfer_only.num_rounds(), 2u);
  Sync();
  const gpu::KvCacheStats& stats = cache_->stats();
  cache_->set_time_rounds(true);
  for (bool reset_between : {false, true}) {
    SCOPED_TRACE(reset_between ? "reset between" : "no reset between");
    WS_ASSERT_OK(cache_->ResetRoundMarkers());
    WS_ASSERT_OK(cache_->QueueEarlyRounds(transfer_only));
    if (reset_between) WS_ASSERT_OK(cache_->ResetRoundMarkers());
    const uint64_t taken = stats.early_rounds_taken;
    WS_ASSERT_OK(cache_->BeginTransfer(transfer_only));
    EXPECT_EQ(stats.early_rounds_taken, taken + 2);
    for (uint32_t round = 0; round < transfer_only.num_rounds(); ++round) {
      WS_ASSERT_OK(cache_->ReadyRound(round).status());
    }
    const std::vector<std::pair<int, int>>& markers = cache_->round_markers();
    ASSERT_EQ(markers.size(), transfer_only.num_rounds());
    for (uint32_t round = 0; round < markers.size(); ++round) {
      // Every round copies one block; only the two early rounds after a reset go untimed.
      const bool timed = round >= 2 || !reset_between;
      EXPECT_EQ(markers[round].first >= 0, timed) << "round " << round;
      EXPECT_EQ(markers[round].second >= 0, timed) << "round " << round;
      if (timed) {
        EXPECT_TRUE(device_->MarkerNanos(markers[round].second).ok()) << "round " << round;
      }
    }
    Sync();
  }
  WS_ASSERT_OK(cache_->ResetRoundMarkers());
  for (const std::pair<int, int>& m : cache_->round_markers()) {
    EXPECT_EQ(m, (std::pair<int, int>{-1, -1}));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Geometries, KvCachePropertyTest,
    ::testing::Values(
        PropertyCase{"GqaBlockEqualsWindow", testing::SmallGqa(4), 4, 14, 11, 5, 3, false},
        PropertyCase{"GqaTwoBlocksPerWindow", testing::SmallGqa(3), 6, 13, 9, 4, 4, false},
        PropertyCase{"MlaBlockEqualsWindow", testing::SmallMla(5), 5, 9, 12, 6, 2, false},
        PropertyCase{"GqaDeferredStreams", testing::SmallGqa(4), 4, 14, 11, 5, 3, true},
        PropertyCase{"GqaTwoBlocksPerWindowDeferredStreams", testing::SmallGqa(3), 6, 13, 9, 4, 4,
                     true},
        PropertyCase{"MlaDeferredStreams", testing::SmallMla(5), 5, 9, 12, 6, 2, true}),
    CaseName);

}  // namespace
}  // namespace writescope
