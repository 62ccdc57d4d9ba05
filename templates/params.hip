// ---- parameters bound by the generator (the only lines that differ between variants) ---------------
#define RK_BLOCK ${block}          // threads per block
#define RK_WAVE ${wave}            // lanes per wave (warp)
#define RK_CHUNKS ${chunks}        // at most this many 16-byte output chunks per thread
#define RK_NT_STORES ${nt_stores}  // streaming stores for q_out and cache rows
#define RK_PDL ${pdl}              // programmatic dependent launch (griddepcontrol, NVIDIA sm_90+)
#define RK_HW_BF16 ${hw_bf16}
#define RK_HW_FP8 ${hw_fp8}
#define RK_FP8_FNUZ ${fp8_fnuz}
namespace rkp {
constexpr int L = ${kv_lora_rank};          // kv_lora_rank
constexpr int R = ${rope_dim};              // qk_rope_head_dim
constexpr int ROPE = ${rope};               // 0 gptj, 1 neox, 2 none
constexpr int COS_SIN = ${cos_sin};         // 0 f32_cat, 1 f32_split, 2 bf16_split
constexpr bool POS_I64 = ${pos_i64};
constexpr bool SLOT_I64 = ${slot_i64};
constexpr bool KV_FP8 = ${kv_fp8};
constexpr int SCALE = ${scale};             // 0 none, 1 mul_recip, 2 div, 3 mul
constexpr float SAT = ${sat};               // fp8 saturation bound
constexpr bool ROPE_BF16 = ${rope_bf16};    // round the KV rope part to bf16 before fp8
constexpr bool SKIP_ALL = ${skip_all};      // a negative slot also skips the token's q rows
constexpr int QFORM = ${qform};             // 0 absorbed, 1 zero_copy, 2 inplace, 3 none
constexpr bool SANITIZE = ${sanitize};
}  // namespace rkp

