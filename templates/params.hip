// ---- parameters bound by the generator (the only lines that differ between variants) ---------------
#define RK_BLOCK ${block}          // threads per block of a launch of fewer than the row's wide_from chunks
#define RK_WIDE_BLOCK ${wide_block}  // threads per block of a larger launch (RK_BLOCK where the row has no wide_block)
#define RK_WAVE ${wave}            // lanes per wave (warp)
#define RK_CHUNKS ${chunks}        // at most this many 16-byte output chunks per thread
#define RK_NT_STORES ${nt_stores}  // streaming stores for q_out and cache rows
#define RK_PDL ${pdl}              // programmatic dependent launch (griddepcontrol, NVIDIA sm_90+)
#define RK_HW_BF16 ${hw_bf16}      // hardware f32 -> bf16 conversion
#define RK_HW_FP8 ${hw_fp8}        // hardware f32 -> fp8 conversion
#define RK_HW_E2M1 ${hw_e2m1}      // hardware f32 -> e2m1 conversion (NVIDIA: the family target's)
#define RK_FP8_FNUZ ${fp8_fnuz}    // the target's fp8 bytes are FNUZ (else OCP)
#define RK_KV_GROUP ${kv_group}    // tokens a lane group of a large KV-only launch covers (rk_kv_group; else 1)
#define RK_WRITE_PAIRS ${write_pairs}  // such a group's latent lanes take two chunks each (rk_write_pairs)
namespace rkp {
// The enumerators are the spellings of the spec files (gen/rk.h, one table per enum); a binding names
// one, so a value the kernel does not know fails to compile.
enum class Rope { gptj, neox, none };
enum class CosSin { f32_cat, f32_split, bf16_split };
enum class Index { int32, int64 };
enum class Kv { bf16, fp8_e4m3, fp8_tile };
enum class Scale { none, mul_recip, div, mul };
enum class Neg { skip_kv, skip_all };
enum class QForm { absorbed, zero_copy, inplace, none };
enum class QDtype { bf16, fp8_e4m3 };
enum class Layout { flat, paged, split };
enum class Op { write, read };
enum class TileScale { f32, pow2 };
enum class ReadNeg { zero, skip };
enum class Norm { none, rms, rms_out };
enum class NormWeight { bf16, f32 };
enum class NormRounding { twice, once };
enum class NormOver { latent, head };
enum class QNorm { none, rms };
enum class Order { sections, rows };

//@ constants: one per row of gen/params.def with a kernel constant (written here by gen/render.c)

// The cache record (gen/record.h): what a token's row holds, byte for byte. The generic writer (kernel.hip,
// kv_chunk) and reader (read.hip) are specialized on these tables; every branch on them folds at compile time.
enum class Elem { bf16, e4m3, e2m1 };
enum class ScaleType { none, f32, ue8m0, e4m3 };
enum class ScaleRule { exact, pow2_up, up, exact_zero };
enum class BlockConv { div, mul_recip };
enum class ScaleAt { inl, tail };  // the tokens of RK_SCALE_AT_LIST (gen/record.h): "inline" is a keyword
enum class Outer { none, tensor, token };
struct Segment {
    int from, n;         // the logical values x[from, from + n) of the row (the latent, then the rope part)
    Elem elem;           // stored as
    int at;              // at this byte of the row
    int block;           // values per block scale (0: none)
    ScaleType scale;     // a block scale's storage
    ScaleRule rule;      // and rule
    ScaleAt scale_at;    // inline in the row, or in the token's page tail
    int scales_at;       // byte of the first block scale (in the row or the tail)
    float sat;           // the bound (the target's fp8 format's)
    Outer outer;         // an outer scale over the segment
    Scale conv;          // the tensor scale's convention with k_scale (none without one)
    int outer_at;        // a token scale's byte in the row
    bool rope_bf16;      // rope values rounded to bf16 first
    float floor;         // the least block scale (s = max(amax / sat, floor))
    BlockConv block_conv;  // how a block's values take its scale: y / d, or y * (1 / d)
    int interleave;      // 0: block b's scale at b; k: at (b % k) * (blocks / k) + b / k
};
${record}
}  // namespace rkp
