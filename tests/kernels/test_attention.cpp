// Paged attention and KV-cache kernels against the CPU reference (exec/cpu_ops). Every problem is
// built in float32 from bf16-representable values, so the CPU and the GPU see identical inputs in
// the same layout; only the arithmetic differs. Without a CUDA device every test skips.
//
// Tolerances (|gpu - ref| <= atol + rtol * |ref|, ref the float32 CPU result):
//  * kv_write, copy_blocks: bit-exact, they only move bf16 values.
//  * decode: the kernel accumulates in fp32 (error ~1e-6 relative to sum |p v|) and rounds the
//    output once to bf16, whose 8-bit significand gives a relative error <= 2^-8 ~ 0.004. So
//    atol = 1e-3, rtol = 1e-2: 2.5x the rounding bound, far below the effect of a wrong key.
//  * prefill: additionally P is rounded to bf16 before P V (as in FlashAttention-2) while the row
//    sum l uses the unrounded weights: each weight is off by <= 2^-8 relative, so the output by
//    <= 2^-8 * sum_i p_i |v_i| <= 2^-8 max|v| ~ 0.004 for |v| <= 1. atol = 5e-3, rtol = 1e-2.
//  * split vs unsplit decode: the same fp32 sums in another order, each rounded to bf16: they
//    may differ by one bf16 ulp (<= 2^-7 |x|), so 1e-5 + 2^-7 |x|.
// Wrong reads are made loud rather than subtle: every pool slot outside a sequence's context
// (other layer, free blocks, the tail of a last block, the padding of the block tables) holds
// "poison" K = 4 and V = 100, and the q / out padding columns are checked untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/kv_layout.hpp"
#include "exec/cpu_ops.hpp"
#include "kernels/attention.hpp"
#include "kernels/device.hpp"
#include "tests/kernels/require_gpu.hpp"

namespace duet::kernels {
namespace {

constexpr float kPoisonK = 4.0f;
constexpr float kPoisonV = 100.0f;
constexpr bf16 kSentinel = 0x7fc1;  // a bf16 NaN: output elements that a kernel failed to write

float round_bf16(float x) { return from_bf16(to_bf16(x)); }

std::vector<bf16> to_bf16_vec(const std::vector<float>& v) {
  std::vector<bf16> out(v.size());
  std::transform(v.begin(), v.end(), out.begin(), [](float x) { return to_bf16(x); });
  return out;
}

template <typename T>
DeviceBuffer upload(const std::vector<T>& v, Stream s) {
  DeviceBuffer buf(std::max<std::size_t>(1, v.size()) * sizeof(T));
  if (!v.empty()) copy_to_device(buf.get(), v.data(), v.size() * sizeof(T), s);
  return buf;
}

template <typename T>
std::vector<T> download(const DeviceBuffer& buf, std::size_t n, const StreamHandle& stream) {
  std::vector<T> v(n);
  if (n) copy_to_host(v.data(), buf.get(), n * sizeof(T), stream.get());
  stream.synchronize();
  return v;
}

// The number of elements that differ (bit patterns), and the first one.
::testing::AssertionResult bit_equal(const std::vector<bf16>& got, const std::vector<bf16>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i] && bad++ == 0) first = i;
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " elements differ; first at " << first << ": got 0x" << std::hex
         << got[first] << ", want 0x" << want[first];
}

// --- an attention problem -------------------------------------------------------------------

struct Config {
  int kv_heads = 2;
  int group = 1;  // query heads per KV head
  int head_dim = 64;
  int block_size = 16;
};

struct SeqSpec {
  int context = 0;  // tokens in the cache, the new ones included
  int rows = 1;     // query rows (the last `rows` positions); 1 = a decode
};

std::string describe(const Config& c) {
  std::ostringstream os;
  os << "kv_heads=" << c.kv_heads << " group=" << c.group << " head_dim=" << c.head_dim
     << " block_size=" << c.block_size;
  return os.str();
}

struct Problem {
  Config cfg;
  std::vector<SeqSpec> seqs;
  KvLayout layout;
  int layer = 1;  // of 2: layer 0 is poison
  int num_heads = 0;
  int width = 0;  // num_heads * head_dim
  std::vector<float> pool;
  std::vector<std::vector<BlockId>> tables;
  std::vector<std::int32_t> flat_tables;  // [seq][max_blocks], padded with the poison block
  int max_blocks = 0;
  std::vector<std::int32_t> query_start, context_len;
  int rows = 0, max_rows = 0;
  int q_stride = 0, out_stride = 0;
  std::vector<float> q;  // [rows][q_stride]: columns past `width` are random padding
};

Problem make_problem(const Config& cfg, const std::vector<SeqSpec>& seqs, std::uint32_t seed, int q_pad = 0,
                     int out_pad = 0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  Problem p;
  p.cfg = cfg;
  p.seqs = seqs;
  p.num_heads = cfg.kv_heads * cfg.group;
  p.width = p.num_heads * cfg.head_dim;
  int used = 0;
  for (const SeqSpec& s : seqs) used += (s.context + cfg.block_size - 1) / cfg.block_size;
  const int num_blocks = used + 5;  // free blocks stay poison
  p.layout = KvLayout{2, num_blocks, cfg.kv_heads, cfg.block_size, cfg.head_dim};

  // Scattered block tables: a shuffled permutation of the pool's blocks.
  std::vector<BlockId> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  const BlockId poison_block = ids.back();
  std::size_t next = 0;
  for (const SeqSpec& s : seqs) {
    const int n = (s.context + cfg.block_size - 1) / cfg.block_size;
    p.tables.emplace_back(ids.begin() + next, ids.begin() + next + n);
    next += n;
    p.max_blocks = std::max(p.max_blocks, n);
  }
  p.max_blocks += 1;
  for (const auto& t : p.tables) {
    p.flat_tables.insert(p.flat_tables.end(), t.begin(), t.end());
    p.flat_tables.insert(p.flat_tables.end(), p.max_blocks - t.size(), poison_block);
  }

  // Poison everywhere, then random K/V at every position of every context in `layer`.
  p.pool.assign(p.layout.total_elems(), 0.0f);
  const std::int64_t tile = p.layout.block_elems();  // one (layer, K or V) of a block
  for (int b = 0; b < num_blocks; ++b)
    for (int l = 0; l < p.layout.num_layers; ++l) {
      std::fill_n(p.pool.begin() + p.layout.offset(l, 0, b, 0, 0), tile, kPoisonK);
      std::fill_n(p.pool.begin() + p.layout.offset(l, 1, b, 0, 0), tile, kPoisonV);
    }
  for (std::size_t i = 0; i < seqs.size(); ++i)
    for (int pos = 0; pos < seqs[i].context; ++pos) {
      const KvSlot slot = kv_slot(p.tables[i], cfg.block_size, pos);
      for (int kv = 0; kv < 2; ++kv)
        for (int h = 0; h < cfg.kv_heads; ++h)
          for (int e = 0; e < cfg.head_dim; ++e)
            p.pool[p.layout.offset(p.layer, kv, slot.block, h, slot.offset) + e] = round_bf16(unit(rng));
    }

  p.query_start.push_back(0);
  for (const SeqSpec& s : seqs) {
    p.query_start.push_back(p.query_start.back() + s.rows);
    p.context_len.push_back(s.context);
    p.max_rows = std::max(p.max_rows, s.rows);
  }
  p.rows = p.query_start.back();
  p.q_stride = p.width + q_pad;
  p.out_stride = p.width + out_pad;
  // |q| <= 3: with |k| <= 1 the scaled scores have a standard deviation near 1, so the softmax
  // is far from uniform and a wrong key or weight shows.
  p.q.resize(std::size_t(p.rows) * p.q_stride);
  for (float& x : p.q) x = round_bf16(3.0f * unit(rng));
  return p;
}

// The float32 reference: rows x width.
std::vector<float> reference(const Problem& p) {
  std::vector<float> out(std::size_t(p.rows) * p.width);
  for (std::size_t i = 0; i < p.seqs.size(); ++i) {
    const int n = p.seqs[i].rows, first_row = p.query_start[i];
    MatrixRM q(n, p.width);
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < p.width; ++c) q(r, c) = p.q[std::size_t(first_row + r) * p.q_stride + c];
    const MatrixRM o =
        paged_attention(p.pool, p.layout, p.layer, p.tables[i], q, p.seqs[i].context - n, p.num_heads);
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < p.width; ++c) out[std::size_t(first_row + r) * p.width + c] = o(r, c);
  }
  return out;
}

enum class Kernel { Decode, Prefill };

struct GpuResult {
  std::vector<float> out;   // rows x width
  int padding_touched = 0;  // out padding columns that changed
};

// A problem's queries, output and metadata on the device, and the AttentionBatch naming them.
struct DeviceProblem {
  DeviceProblem(const Problem& p, Stream s)
      : q(upload(to_bf16_vec(p.q), s)),
        out(upload(std::vector<bf16>(std::size_t(p.rows) * p.out_stride, kSentinel), s)),
        query_start(upload(p.query_start, s)),
        context_len(upload(p.context_len, s)),
        tables(upload(p.flat_tables, s)) {
    batch.q = q.as<bf16>();
    batch.q_stride = p.q_stride;
    batch.out = out.as<bf16>();
    batch.out_stride = p.out_stride;
    batch.query_start = query_start.as<std::int32_t>();
    batch.context_len = context_len.as<std::int32_t>();
    batch.block_tables = tables.as<std::int32_t>();
    batch.max_blocks = p.max_blocks;
    batch.num_seqs = int(p.seqs.size());
    batch.num_heads = p.num_heads;
    batch.scale = 1.0f / std::sqrt(float(p.cfg.head_dim));
  }
  DeviceBuffer q, out, query_start, context_len, tables;
  AttentionBatch batch;
};

// Runs one kernel on the problem; num_splits applies to decode. extra_rows enlarges the prefill
// grid past the longest sequence (those thread blocks must do nothing).
GpuResult run_gpu(const Problem& p, Kernel kernel, int num_splits = 1, int extra_rows = 0) {
  StreamHandle stream;
  const Stream s = stream.get();
  const DeviceBuffer pool = upload(to_bf16_vec(p.pool), s);
  const DeviceProblem d(p, s);
  const AttentionBatch& b = d.batch;
  const DeviceBuffer& out = d.out;
  const KvLayout shape = p.layout;
  if (kernel == Kernel::Decode) {
    const std::size_t bytes = decode_workspace_bytes(b.num_seqs, p.num_heads, p.cfg.head_dim, num_splits);
    DeviceBuffer workspace(std::max<std::size_t>(bytes, 1));
    paged_decode_attention(pool.as<bf16>(), shape, p.layer, b, num_splits, bytes ? workspace.get() : nullptr,
                           s);
    stream.synchronize();
  } else {
    paged_prefill_attention(pool.as<bf16>(), shape, p.layer, b, p.max_rows + extra_rows, s);
    stream.synchronize();
  }
  const std::vector<bf16> raw = download<bf16>(out, std::size_t(p.rows) * p.out_stride, stream);
  GpuResult r;
  r.out.resize(std::size_t(p.rows) * p.width);
  for (int row = 0; row < p.rows; ++row) {
    for (int c = 0; c < p.width; ++c)
      r.out[std::size_t(row) * p.width + c] = from_bf16(raw[std::size_t(row) * p.out_stride + c]);
    for (int c = p.width; c < p.out_stride; ++c)
      r.padding_touched += raw[std::size_t(row) * p.out_stride + c] != kSentinel;
  }
  return r;
}

// |got - want| <= atol + rtol * |want| everywhere (NaN fails); names the first misses.
::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<float>& want, int width,
                                     int head_dim, double atol, double rtol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
  std::size_t bad = 0;
  double worst = 0.0;
  std::ostringstream os;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - double(want[i]));
    const bool ok = err <= atol + rtol * std::fabs(double(want[i]));  // false for NaN
    if (ok) {
      worst = std::max(worst, err);
      continue;
    }
    if (bad++ < 6) {
      const std::size_t row = i / width, col = i % width;
      os << "\n  row " << row << " head " << col / head_dim << " dim " << col % head_dim << ": got " << got[i]
         << ", want " << want[i];
    }
    worst = std::isnan(err) ? err : std::max(worst, err);
  }
  if (bad == 0) return ::testing::AssertionSuccess() << "max error " << worst;
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements off (max error " << worst
                                       << ", atol " << atol << ", rtol " << rtol << "):" << os.str();
}

constexpr double kDecodeAtol = 1e-3, kDecodeRtol = 1e-2;
constexpr double kPrefillAtol = 5e-3, kPrefillRtol = 1e-2;
constexpr double kSplitAtol = 1e-5, kSplitRtol = 1.0 / 128;  // one bf16 ulp is <= 2^-7 |x|

std::vector<Config> standard_configs() {
  std::vector<Config> out;
  for (int group : {1, 4, 8})
    for (int head_dim : {64, 128})
      for (int block_size : {16, 32}) out.push_back({2, group, head_dim, block_size});
  return out;
}

// Decode contexts around block boundaries, odd ones and long ones.
std::vector<SeqSpec> decode_seqs(int bs) {
  std::vector<SeqSpec> s;
  for (int c : {1, bs - 1, bs, bs + 1, 2 * bs, 2 * bs + 1, 100, 257, 1000, 1531}) s.push_back({c, 1});
  return s;
}

int test_sm_count() {
  const int sm = device_info().sm_count;
  return sm > 0 ? sm : 108;
}

// --- KV cache -------------------------------------------------------------------------------

struct KvWriteCase {
  int num_kv_heads, head_dim, block_size, rows;
  int pad;   // extra elements per row beyond K (or V): > 0 emulates a fused QKV buffer
  bool odd;  // an odd row stride, which forces the scalar path
};

void check_kv_write(const KvWriteCase& c, std::uint32_t seed) {
  SCOPED_TRACE("kv_heads=" + std::to_string(c.num_kv_heads) + " head_dim=" + std::to_string(c.head_dim) +
               " block_size=" + std::to_string(c.block_size) + " odd=" + std::to_string(c.odd));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  const KvLayout layout{3, 23, c.num_kv_heads, c.block_size, c.head_dim};
  const int layer = 2;
  const int row_elems = c.num_kv_heads * c.head_dim;
  // k and v live in one buffer [rows][stride] as in a fused QKV projection: k at column 0, v
  // right after it.
  const int stride = 2 * row_elems + c.pad + (c.odd ? 1 : 0);
  std::vector<float> pool(layout.total_elems()), kv(std::size_t(c.rows) * stride);
  for (float& x : pool) x = round_bf16(unit(rng));
  for (float& x : kv) x = round_bf16(unit(rng));
  // Distinct random slots; every 7th row is padding (slot -1) and writes nothing.
  std::vector<std::int64_t> slots(std::size_t(layout.num_blocks) * c.block_size);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  ASSERT_LE(c.rows, int(slots.size()));
  slots.resize(c.rows);
  for (int r = 6; r < c.rows; r += 7) slots[r] = -1;

  std::vector<float> want = pool;
  for (int r = 0; r < c.rows; ++r) {
    if (slots[r] < 0) continue;
    const std::vector<BlockId> table{BlockId(slots[r] / c.block_size)};
    const float* row = kv.data() + std::size_t(r) * stride;
    duet::kv_write(want, layout, layer, table, int(slots[r] % c.block_size), {row, std::size_t(row_elems)},
                   {row + row_elems, std::size_t(row_elems)});
  }

  StreamHandle stream;
  const DeviceBuffer d_pool = upload(to_bf16_vec(pool), stream.get());
  const DeviceBuffer d_kv = upload(to_bf16_vec(kv), stream.get());
  const DeviceBuffer d_slots = upload(slots, stream.get());
  const bf16* k = d_kv.as<bf16>();
  kv_write(d_pool.as<bf16>(), layout, layer, k, k + row_elems, stride, stride, d_slots.as<std::int64_t>(),
           c.rows, stream.get());
  EXPECT_TRUE(bit_equal(download<bf16>(d_pool, pool.size(), stream), to_bf16_vec(want)));
}

TEST(KvCacheWrite, VectorPathIsBitExact) {
  DUET_REQUIRE_GPU();
  check_kv_write({2, 64, 16, 150, 0, false}, 1);
  check_kv_write({4, 128, 32, 301, 32 * 128, false}, 2);  // fused-QKV-like stride
  check_kv_write({1, 256, 16, 40, 8, false}, 3);
}

TEST(KvCacheWrite, ScalarPathIsBitExact) {
  DUET_REQUIRE_GPU();
  check_kv_write({2, 64, 16, 77, 0, true}, 4);   // odd stride: rows not 16-byte aligned
  check_kv_write({3, 12, 8, 90, 5, false}, 5);   // head_dim not a multiple of 8
  check_kv_write({2, 40, 24, 100, 3, true}, 6);  // block size not a power of two
}

TEST(KvCacheWrite, ZeroRowsIsANoOp) {
  DUET_REQUIRE_GPU();
  StreamHandle stream;
  const KvLayout layout{1, 2, 1, 16, 64};
  const std::vector<bf16> pool(layout.total_elems(), to_bf16(1.5f));
  const DeviceBuffer d_pool = upload(pool, stream.get());
  kv_write(d_pool.as<bf16>(), layout, 0, nullptr, nullptr, 64, 64, nullptr, 0, stream.get());
  EXPECT_TRUE(bit_equal(download<bf16>(d_pool, pool.size(), stream), pool));
}

TEST(KvCacheCopyBlocks, EveryLayerKAndVBitExact) {
  DUET_REQUIRE_GPU();
  for (const KvLayout layout :
       {KvLayout{3, 40, 2, 16, 64}, KvLayout{2, 17, 4, 32, 128}, KvLayout{2, 9, 3, 5, 12}}) {
    SCOPED_TRACE("block_elems=" + std::to_string(layout.block_elems()));
    std::mt19937 rng(7 + layout.num_blocks);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    std::vector<float> pool(layout.total_elems());
    for (float& x : pool) x = round_bf16(unit(rng));
    // Sources and destinations disjoint (copy-on-write targets are fresh blocks); one source
    // is copied twice, as when a sequence forks into two.
    std::vector<std::int32_t> ids(layout.num_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    const int n = layout.num_blocks / 3;
    std::vector<std::int32_t> src(ids.begin(), ids.begin() + n), dst(ids.begin() + n, ids.begin() + 2 * n);
    src.back() = src.front();
    std::vector<float> want = pool;
    for (int i = 0; i < n; ++i) kv_copy_block(want, layout, src[i], dst[i]);

    StreamHandle stream;
    const DeviceBuffer d_pool = upload(to_bf16_vec(pool), stream.get());
    const DeviceBuffer d_src = upload(src, stream.get()), d_dst = upload(dst, stream.get());
    copy_blocks(d_pool.as<bf16>(), layout, d_src.as<std::int32_t>(), d_dst.as<std::int32_t>(), n,
                stream.get());
    EXPECT_TRUE(bit_equal(download<bf16>(d_pool, pool.size(), stream), to_bf16_vec(want)));
  }
}

// --- decode ---------------------------------------------------------------------------------

TEST(AttentionDecode, MatchesCpuReferenceWithoutSplits) {
  DUET_REQUIRE_GPU();
  std::uint32_t seed = 100;
  for (const Config& cfg : standard_configs()) {
    SCOPED_TRACE(describe(cfg));
    const Problem p = make_problem(cfg, decode_seqs(cfg.block_size), seed++);
    const GpuResult r = run_gpu(p, Kernel::Decode, 1);
    EXPECT_TRUE(all_close(r.out, reference(p), p.width, cfg.head_dim, kDecodeAtol, kDecodeRtol));
  }
}

TEST(AttentionDecode, SplitsMatchCpuReferenceAndUnsplitResult) {
  DUET_REQUIRE_GPU();
  std::uint32_t seed = 200;
  for (const Config& cfg : standard_configs()) {
    SCOPED_TRACE(describe(cfg));
    const Problem p = make_problem(cfg, decode_seqs(cfg.block_size), seed++);
    const std::vector<float> want = reference(p);
    const GpuResult one = run_gpu(p, Kernel::Decode, 1);
    const int chosen = choose_decode_splits(int(p.seqs.size()), cfg.kv_heads, 1531, test_sm_count());
    // 2, 3 and 7 leave some splits of the short sequences empty; 100 exceeds every block count.
    for (int splits : {2, 3, 7, chosen, 100}) {
      SCOPED_TRACE("num_splits=" + std::to_string(splits));
      const GpuResult r = run_gpu(p, Kernel::Decode, splits);
      EXPECT_TRUE(all_close(r.out, want, p.width, cfg.head_dim, kDecodeAtol, kDecodeRtol));
      EXPECT_TRUE(all_close(r.out, one.out, p.width, cfg.head_dim, kSplitAtol, kSplitRtol));
    }
  }
}

TEST(AttentionDecode, LongContextWithChosenSplits) {
  DUET_REQUIRE_GPU();
  const Config cfg{4, 4, 128, 16};
  const Problem p = make_problem(cfg, {{4097, 1}, {5000, 1}, {1024, 1}}, 300);
  const int splits = choose_decode_splits(3, cfg.kv_heads, 5000, test_sm_count());
  EXPECT_GT(splits, 1);
  const std::vector<float> want = reference(p);
  const GpuResult one = run_gpu(p, Kernel::Decode, 1);
  const GpuResult split = run_gpu(p, Kernel::Decode, splits);
  EXPECT_TRUE(all_close(one.out, want, p.width, cfg.head_dim, kDecodeAtol, kDecodeRtol));
  EXPECT_TRUE(all_close(split.out, want, p.width, cfg.head_dim, kDecodeAtol, kDecodeRtol));
  EXPECT_TRUE(all_close(split.out, one.out, p.width, cfg.head_dim, kSplitAtol, kSplitRtol));
}

TEST(AttentionDecode, OtherGroupsHeadDimsAndStrides) {
  DUET_REQUIRE_GPU();
  // Groups of 16 take two head chunks per KV head; 2, 3, 5 and 6 pad an instantiated chunk;
  // head dims other than 64 and 128 leave lanes idle; block size 24 is not a power of two.
  const std::vector<Config> configs = {{1, 16, 128, 16}, {2, 6, 64, 16}, {3, 2, 96, 32}, {1, 3, 256, 16},
                                       {2, 5, 40, 24},   {4, 1, 8, 16},  {1, 12, 80, 32}};
  std::uint32_t seed = 400;
  for (const Config& cfg : configs) {
    SCOPED_TRACE(describe(cfg));
    // q rows with a fused-QKV-like stride, out rows with padding that must stay untouched.
    const int q_pad = 2 * cfg.kv_heads * cfg.head_dim;
    const Problem p = make_problem(cfg, decode_seqs(cfg.block_size), seed++, q_pad, 8);
    const std::vector<float> want = reference(p);
    for (int splits : {1, 4}) {
      SCOPED_TRACE("num_splits=" + std::to_string(splits));
      const GpuResult r = run_gpu(p, Kernel::Decode, splits);
      EXPECT_TRUE(all_close(r.out, want, p.width, cfg.head_dim, kDecodeAtol, kDecodeRtol));
      EXPECT_EQ(r.padding_touched, 0);
    }
  }
}

TEST(AttentionDecode, ChooseSplitsAndWorkspace) {
  DUET_REQUIRE_GPU();
  EXPECT_EQ(choose_decode_splits(1, 8, 1023, 132), 1);    // short contexts: one pass
  EXPECT_EQ(choose_decode_splits(256, 8, 8192, 132), 1);  // the batch already fills the GPU
  const int s = choose_decode_splits(2, 8, 8192, 132);
  EXPECT_GE(2 * 8 * s, 2 * 132);  // ~2 thread blocks per SM
  EXPECT_LE(s, 64);
  EXPECT_LE(choose_decode_splits(1, 1, 1100, 132), 1100 / 256);  // no split below 256 tokens
  for (int seqs : {1, 3, 5, 7, 12}) {  // a power of two: few graph keys as contexts grow
    for (int context = 1024; context <= 20000; context += 256) {
      const int n = choose_decode_splits(seqs, 8, context, 132);
      EXPECT_TRUE(n >= 1 && (n & (n - 1)) == 0) << seqs << " seqs at " << context << ": " << n;
    }
  }
  EXPECT_EQ(decode_workspace_bytes(4, 32, 128, 1), 0u);
  EXPECT_GE(decode_workspace_bytes(4, 32, 128, 5), std::size_t(4 * 32 * 5) * (128 + 1) * sizeof(float));
}

// --- prefill --------------------------------------------------------------------------------

TEST(AttentionPrefill, FromEmptyCacheMatchesCpuReference) {
  DUET_REQUIRE_GPU();
  std::uint32_t seed = 500;
  for (const Config& cfg : standard_configs()) {
    SCOPED_TRACE(describe(cfg));
    const int bs = cfg.block_size;
    // Whole prompts: rows == context; lengths around block and 64-key tile boundaries.
    std::vector<SeqSpec> seqs;
    for (int n : {1, 7, bs, bs + 1, 63, 64, 65, 200}) seqs.push_back({n, n});
    const Problem p = make_problem(cfg, seqs, seed++);
    const GpuResult r = run_gpu(p, Kernel::Prefill);
    EXPECT_TRUE(all_close(r.out, reference(p), p.width, cfg.head_dim, kPrefillAtol, kPrefillRtol));
  }
}

TEST(AttentionPrefill, ChunksAfterCachedContext) {
  DUET_REQUIRE_GPU();
  std::uint32_t seed = 600;
  for (const Config& cfg : standard_configs()) {
    SCOPED_TRACE(describe(cfg));
    // Chunked prefill: `rows` new tokens after context - rows cached ones; several query tiles.
    const Problem p =
        make_problem(cfg, {{100, 37}, {512, 64}, {333, 200}, {1100, 130}, {cfg.block_size + 1, 2}}, seed++);
    const GpuResult r = run_gpu(p, Kernel::Prefill, 1, /*extra_rows=*/13);
    EXPECT_TRUE(all_close(r.out, reference(p), p.width, cfg.head_dim, kPrefillAtol, kPrefillRtol));
  }
}

TEST(AttentionPrefill, MixedPrefillsAndDecodes) {
  DUET_REQUIRE_GPU();
  std::uint32_t seed = 700;
  const std::vector<SeqSpec> seqs = {{50, 50}, {129, 1}, {700, 128}, {16, 1},
                                     {1, 1},   {33, 1},  {300, 45},  {1500, 1}};
  for (const Config& cfg : standard_configs()) {
    SCOPED_TRACE(describe(cfg));
    const Problem p =
        make_problem(cfg, seqs, seed++, /*q_pad=*/2 * cfg.kv_heads * cfg.head_dim, /*out_pad=*/8);
    const GpuResult r = run_gpu(p, Kernel::Prefill);
    EXPECT_TRUE(all_close(r.out, reference(p), p.width, cfg.head_dim, kPrefillAtol, kPrefillRtol));
    EXPECT_EQ(r.padding_touched, 0);
  }
}

TEST(AttentionPrefill, DecodeRowsAgreeWithDecodeKernel) {
  DUET_REQUIRE_GPU();
  const Config cfg{2, 4, 128, 16};
  const Problem p = make_problem(cfg, decode_seqs(cfg.block_size), 800);
  const GpuResult prefill = run_gpu(p, Kernel::Prefill);
  const GpuResult decode = run_gpu(p, Kernel::Decode, 1);
  EXPECT_TRUE(all_close(prefill.out, reference(p), p.width, cfg.head_dim, kPrefillAtol, kPrefillRtol));
  EXPECT_TRUE(all_close(prefill.out, decode.out, p.width, cfg.head_dim, kPrefillAtol, kPrefillRtol));
}

TEST(AttentionPrefill, OtherGroupsAndHeadDims) {
  DUET_REQUIRE_GPU();
  // Generic instantiations (head_dim padded to 128 or 256, 72 not even a multiple of 16),
  // groups that do not divide the 64-row tile, a 16-head group, a block size that is not a
  // power of two (division instead of shift).
  const std::vector<Config> configs = {{2, 3, 80, 16},  {1, 6, 72, 32}, {2, 2, 256, 16}, {3, 1, 32, 16},
                                       {1, 16, 64, 16}, {2, 5, 96, 24}, {1, 2, 192, 16}};
  std::uint32_t seed = 900;
  for (const Config& cfg : configs) {
    SCOPED_TRACE(describe(cfg));
    // q_pad = head_dim + 3: q rows not 16-byte aligned (the kernel's scalar Q loads).
    const Problem p = make_problem(cfg, {{90, 90}, {300, 70}, {cfg.block_size * 3, 1}, {257, 1}}, seed++,
                                   cfg.head_dim + 3, 8);
    const GpuResult r = run_gpu(p, Kernel::Prefill);
    EXPECT_TRUE(all_close(r.out, reference(p), p.width, cfg.head_dim, kPrefillAtol, kPrefillRtol));
    EXPECT_EQ(r.padding_touched, 0);
  }
}

TEST(AttentionPrefill, KvWriteThenPrefillMatchesReference) {
  DUET_REQUIRE_GPU();
  // The engine's order: the new tokens' K/V are scattered into the pool by kv_write, then
  // attention reads them through the block table. The problem's pool provides the values; the
  // GPU pool starts with the cached part only.
  const Config cfg{2, 4, 64, 16};
  const Problem p = make_problem(cfg, {{80, 30}, {40, 40}, {17, 1}}, 1000);
  std::vector<float> cached = p.pool;
  const int row_elems = cfg.kv_heads * cfg.head_dim;
  std::vector<float> k(std::size_t(p.rows) * row_elems), v(k.size());
  std::vector<std::int64_t> slots(p.rows);
  for (std::size_t i = 0; i < p.seqs.size(); ++i)
    for (int r = 0; r < p.seqs[i].rows; ++r) {
      const int pos = p.seqs[i].context - p.seqs[i].rows + r, row = p.query_start[i] + r;
      const KvSlot slot = kv_slot(p.tables[i], cfg.block_size, pos);
      slots[row] = std::int64_t(slot.block) * cfg.block_size + slot.offset;
      for (int h = 0; h < cfg.kv_heads; ++h)
        for (int e = 0; e < cfg.head_dim; ++e)
          for (int kvi = 0; kvi < 2; ++kvi) {
            float& x = cached[p.layout.offset(p.layer, kvi, slot.block, h, slot.offset) + e];
            (kvi == 0 ? k : v)[std::size_t(row) * row_elems + h * cfg.head_dim + e] = x;
            x = kvi == 0 ? kPoisonK : kPoisonV;  // not yet written
          }
    }
  StreamHandle stream;
  const Stream s = stream.get();
  const DeviceBuffer pool = upload(to_bf16_vec(cached), s);
  const DeviceBuffer d_k = upload(to_bf16_vec(k), s), d_v = upload(to_bf16_vec(v), s);
  const DeviceBuffer d_slots = upload(slots, s);
  kv_write(pool.as<bf16>(), p.layout, p.layer, d_k.as<bf16>(), d_v.as<bf16>(), row_elems, row_elems,
           d_slots.as<std::int64_t>(), p.rows, s);
  EXPECT_TRUE(bit_equal(download<bf16>(pool, p.pool.size(), stream), to_bf16_vec(p.pool)));

  const DeviceProblem d(p, s);
  paged_prefill_attention(pool.as<bf16>(), p.layout, p.layer, d.batch, p.max_rows, s);
  const std::vector<bf16> raw = download<bf16>(d.out, std::size_t(p.rows) * p.out_stride, stream);
  std::vector<float> got(raw.size());
  std::transform(raw.begin(), raw.end(), got.begin(), [](bf16 x) { return from_bf16(x); });
  EXPECT_TRUE(all_close(got, reference(p), p.width, cfg.head_dim, kPrefillAtol, kPrefillRtol));
}

TEST(AttentionPrefill, RejectsBadShapes) {
  DUET_REQUIRE_GPU();
  AttentionBatch b;
  b.num_seqs = 1;
  b.num_heads = 6;
  const KvLayout shape{1, 4, 4, 16, 64};  // 6 heads over 4 KV heads
  EXPECT_THROW(paged_prefill_attention(nullptr, shape, 0, b, 1, nullptr), Error);
  EXPECT_THROW(paged_decode_attention(nullptr, shape, 0, b, 1, nullptr, nullptr), Error);
  b.num_heads = 8;
  const KvLayout odd{1, 4, 4, 16, 60};  // head_dim not a multiple of 8
  EXPECT_THROW(paged_prefill_attention(nullptr, odd, 0, b, 1, nullptr), Error);
  EXPECT_THROW(paged_decode_attention(nullptr, shape, 0, b, 2, nullptr, nullptr),
               Error);  // splits, no workspace
}

}  // namespace
}  // namespace duet::kernels
