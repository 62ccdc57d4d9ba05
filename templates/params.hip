// ---- parameters bound by the generator (the only lines that differ between variants) ---------------
#define RK_BLOCK ${block}          // threads per block of a launch of fewer than the row's wide_from chunks
#define RK_WIDE_BLOCK ${wide_block}  // threads per block of a larger launch (RK_BLOCK where the row has no wide_block)
#define RK_WAVE ${wave}            // lanes per wave (warp)
#define RK_CHUNKS ${chunks}        // at most this many 16-byte output chunks per thread
#define RK_NT_STORES ${nt_stores}  // streaming stores for q_out and cache rows
#define RK_PDL ${pdl}              // programmatic dependent launch (griddepcontrol, NVIDIA sm_90+)
#define RK_HW_BF16 ${hw_bf16}      // hardware f32 -> bf16 conversion
#define RK_HW_FP8 ${hw_fp8}        // hardware f32 -> fp8 conversion
#define RK_FP8_FNUZ ${fp8_fnuz}    // the target's fp8 bytes are FNUZ (else OCP)
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

constexpr int L = ${kv_lora_rank};                // kv_lora_rank
constexpr int R = ${rope_dim};                    // qk_rope_head_dim
constexpr Rope ROPE = Rope::${rope};
constexpr CosSin COS_SIN = CosSin::${cos_sin};    // layout of the cos/sin tables
constexpr Index POS = Index::${positions};        // dtype of positions[]
constexpr Index SLOT = Index::${slots};           // dtype of slots[]
constexpr Kv KV = Kv::${kv};                      // cache dtype
constexpr Scale SCALE = Scale::${scale};          // fp8 scale convention (none for a bf16 cache)
constexpr float SAT = ${sat};                     // fp8 saturation bound
constexpr bool ROPE_BF16 = ${rope_bf16};          // round the KV rope part to bf16 before fp8
constexpr Neg NEG = Neg::${negative_slot};        // what a negative slot skips
constexpr QForm QFORM = QForm::${q};
constexpr QDtype Q_DTYPE = QDtype::${q_dtype};    // query output dtype
constexpr Layout LAYOUT = Layout::${layout};      // where a slot's KV row lies
constexpr Scale Q_SCALE = Scale::${q_scale};      // fp8 query: scale convention with q_scale
constexpr float Q_SAT = ${q_sat};                 // fp8 query: saturation bound
constexpr bool Q_ROPE_BF16 = ${q_rope_bf16};      // fp8 query: round the rope part to bf16 first
constexpr bool SANITIZE = ${sanitize};            // NaN -> 0, +-inf -> +-max finite in the KV row
constexpr Op OP = Op::${op};                      // the kernel family: the fused write, or the read-back
constexpr int TILE = ${tile};                     // fp8_tile row: values per tile (0 for other rows)
constexpr TileScale TILE_SCALE = TileScale::${tile_scale};  // fp8_tile row: scale kept as f32 or rounded up to 2^k
constexpr int SCALES_AT = ${scales_at};           // fp8_tile row: byte offset of the float32 tile scales
constexpr int ROPE_AT = ${rope_at};               // fp8_tile row: byte offset of the bf16 rope part
constexpr ReadNeg READ_NEG = ReadNeg::${read_negative_slot};  // read: a row without a valid slot
constexpr Norm NORM = Norm::${norm};              // the fused kv_a RMSNorm of c_kv (rms_out: also written out)
constexpr NormWeight NORM_WEIGHT = NormWeight::${norm_weight};  // its weight's dtype
constexpr float NORM_EPS = ${norm_eps};           // its eps
constexpr NormRounding NORM_ROUNDING = NormRounding::${norm_rounding};  // bf16(bf16(x * r) * w) or bf16(x * r * w)
}  // namespace rkp
