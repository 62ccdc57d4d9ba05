// ---- entry points --------------------------------------------------------------------------------------
namespace rk {
// Chunk g of the launch, for the kernel family of OP: only the one chosen is instantiated.
template <Op O>
struct op_tag {};
template <class I>
RK_DEVICE void lane(const args &a, I g, op_tag<Op::write>) { chunk<I>(a, g); }
template <class I>
RK_DEVICE void lane(const args &a, I g, op_tag<Op::read>) { read_lane<I>(a, g); }

// This thread's chunks of the launch: ceil(total / (B * a.chunks)) blocks of B threads, total = grid_groups *
// a.lanes (rk_launch_plan in gen/desc.c).
template <class I, int B>
RK_DEVICE void launch_blocks_of(const args &a) {
    const rk_i64 total = a.grid_groups * a.lanes;
    if (RK_CHUNKS == 1 || a.chunks <= 1) {
        RK_FOR_ONE(g, total, B) lane<I>(a, (I)g, op_tag<OP>{});
    } else {
        RK_FOR_EACH(g, total, a.chunks, B) lane<I>(a, (I)g, op_tag<OP>{});
    }
}
// The launch's block size is RK_BLOCK or, in a launch of at least the row's wide_from chunks, RK_WIDE_BLOCK.
template <class I>
RK_DEVICE void launch(const args &a) {
    if (RK_WIDE_BLOCK != RK_BLOCK && RK_BLOCK_DIM() == RK_WIDE_BLOCK) launch_blocks_of<I, RK_WIDE_BLOCK>(a);
    else launch_blocks_of<I, RK_BLOCK>(a);
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
