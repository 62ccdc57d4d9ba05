// ---- entry points --------------------------------------------------------------------------------------
namespace rk {
// Chunk g of the launch, for the kernel family of OP: only the one chosen is instantiated.
template <Op O>
struct op_tag {};
template <class I>
RK_DEVICE void lane(const args &a, I g, op_tag<Op::write>) { chunk<I>(a, g); }
template <class I>
RK_DEVICE void lane(const args &a, I g, op_tag<Op::read>) { read_lane<I>(a, g); }

// This thread's chunks of the launch: ceil(total / (a.block * a.chunks)) blocks of a.block <= RK_BLOCK
// threads, total = grid_tokens * a.lanes (rk_launch_plan in gen/desc.c).
template <class I>
RK_DEVICE void launch(const args &a) {
    const rk_i64 total = a.grid_tokens * a.lanes;
    if (RK_CHUNKS == 1 || a.chunks <= 1) {
        RK_FOR_ONE(g, total, a.block) lane<I>(a, (I)g, op_tag<OP>{});
    } else {
        RK_FOR_EACH(g, total, a.chunks, a.block) lane<I>(a, (I)g, op_tag<OP>{});
    }
}
}  // namespace rk

// ${name} uses 32-bit index math, ${name}_i64 64-bit (chosen by the launcher). RK_ENTRIES picks the ones
// compiled: 1 the first, 2 the second, 3 (unset) both. The runtime builds the 64-bit entry only for the
// first launch that needs it, which keeps its compile off ropekv_kernel_get's path.
#ifndef RK_ENTRIES
#define RK_ENTRIES 3
#endif
#if RK_ENTRIES & 1
RK_ENTRY void ${name}(const rk::args a) { rk::launch<int>(a); }
#endif
#if RK_ENTRIES & 2
RK_ENTRY void ${name}_i64(const rk::args a) { rk::launch<rk_i64>(a); }
#endif
