/* The covering set: the variants the tests, selftest and the benchmarks run by default, instead of the
 * exhaustive product of every choice.
 *
 * A variant is a point along the dimensions of rk_cover_dims: the target row, then the caller's choices
 * (rk_choice). A dimension does not apply to some variants (the read-back op has no query, positions or norm;
 * q form none has no query dtype): there it takes no value. The covering set of a list of candidates holds
 *   - every value of every dimension that some candidate has,
 *   - every pair of values of two dimensions that some candidate has together,
 *   - every value triple of the declared interactions (rk_cover_triples) that some candidate has,
 * picked greedily (the candidate covering the most tuples not yet covered, the first on ties): deterministic,
 * and far smaller than the product, whose size is the product of the dimensions' sizes. */
#ifndef RK_COVER_H
#define RK_COVER_H

#include "rk.h"

enum {
    RK_DIM_TARGET,
    RK_DIM_KV,
    RK_DIM_Q,
    RK_DIM_Q_DTYPE,
    RK_DIM_POSITIONS,
    RK_DIM_SLOTS,
    RK_DIM_LAYOUT,
    RK_DIM_OP,
    RK_DIM_NORM,
    RK_COVER_DIMS
};

/* The dimensions' names, for messages ("target", "kv", "q", ...). */
extern const char *const rk_cover_dims[RK_COVER_DIMS];

/* The declared interactions: triples of dimensions whose every value triple is covered (beside every pair). */
#define RK_COVER_TRIPLES 4
extern const int rk_cover_triples[RK_COVER_TRIPLES][3];

/* d's value along dimension dim: its index in the dimension's enum (the target: the row's index in archs),
 * or -1 where the dimension does not apply to d. */
int rk_cover_value(const rk_desc *d, const rk_arch_table *archs, int dim);

/* Picks from cand[0..n) the covering set described above: pick[] (n entries of room) receives indices into cand
 * in the order picked. Returns the count, or -1 when out of memory. */
int rk_cover_pick(const rk_desc *cand, int n, const rk_arch_table *archs, int *pick);

/* The variants of every spec of cat whose keys contain filter (NULL: every one): with all, the exhaustive product
 * (rk_variants); else each spec's covering set. Variants whose rendered source has the same digest as an earlier
 * one are left out. Returns the count, or -1 with err set (cap too small, a spec that does not describe its
 * variants, out of memory). */
int rk_cover_catalog(const rk_catalog *cat, const char *filter, int all, rk_desc *out, int cap, rk_err *err);

/* rk_cover_catalog's covering set remade for one row (rk_desc_make of each variant's choices on target), once per
 * kernel name: the shapes a GPU or a compiler of that row runs. Returns the count, or -1 with err set. */
int rk_cover_retarget(const rk_catalog *cat, const rk_arch *target, rk_desc *out, int cap, rk_err *err);

#endif
