/* The launch ABI check (abi.h). */
#include "abi.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

unsigned rk_amd_lds_bytes(const rk_arch *a) { return strcmp(a->name, "gfx950") == 0 ? 160u * 1024 : 64u * 1024; }

/* Appends one broken rule to why. */
static void broke(char *why, size_t cap, size_t *w, const char *fmt, ...) {
    if (!why || *w >= cap) return;
    if (*w) *w += (size_t)snprintf(why + *w, cap - *w, "; ");
    if (*w >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    *w += (size_t)vsnprintf(why + *w, cap - *w, fmt, ap);
    va_end(ap);
}

static int is_hidden(const rk_amd_arg *a) { return strncmp(a->value_kind, "hidden_", 7) == 0; }

/* The code object v5 implicit block (AMDGPUUsage, "Code Object V5 Metadata": the hidden arguments'
 * offsets from the implicit argument pointer). */
static const struct {
    const char *kind;
    unsigned offset, size;
} V5_HIDDEN[] = {
    {"hidden_block_count_x", 0, 4},       {"hidden_block_count_y", 4, 4},      {"hidden_block_count_z", 8, 4},
    {"hidden_group_size_x", 12, 2},       {"hidden_group_size_y", 14, 2},      {"hidden_group_size_z", 16, 2},
    {"hidden_remainder_x", 18, 2},        {"hidden_remainder_y", 20, 2},       {"hidden_remainder_z", 22, 2},
    {"hidden_global_offset_x", 40, 8},    {"hidden_global_offset_y", 48, 8},   {"hidden_global_offset_z", 56, 8},
    {"hidden_grid_dims", 64, 2},          {"hidden_printf_buffer", 72, 8},     {"hidden_hostcall_buffer", 80, 8},
    {"hidden_multigrid_sync_arg", 88, 8}, {"hidden_heap_v1", 96, 8},           {"hidden_default_queue", 104, 8},
    {"hidden_completion_action", 112, 8}, {"hidden_dynamic_lds_size", 120, 4}, {"hidden_private_base", 192, 4},
    {"hidden_shared_base", 196, 4},       {"hidden_queue_ptr", 200, 8},
};

int rk_amd_abi_check_kernel(const rk_amd_kernel *k, int abi_version, const rk_desc *d, char *why, size_t cap) {
    size_t w = 0;
    if (why && cap) why[0] = '\0';
    const uint32_t args = (uint32_t)sizeof(rk_args), align = (uint32_t) _Alignof(rk_args);
    const uint32_t base = (args + 7) / 8 * 8; /* the v5 implicit block: after the explicit ones, 8-aligned */
    int bad = 0, n_explicit = 0;
#define BROKE(...) (bad = 1, broke(why, cap, &w, __VA_ARGS__))
    for (int i = 0; i < k->n_args; i++) {
        const rk_amd_arg *a = &k->args[i];
        if (!is_hidden(a)) {
            if (n_explicit++ > 0) {
                BROKE("explicit argument %d (%s at %u)", i, a->value_kind, a->offset);
                continue;
            }
            if (strcmp(a->value_kind, "by_value") != 0) BROKE("the argument is %s, not by_value", a->value_kind);
            if (a->offset != 0) BROKE("the argument is at offset %u, not 0", a->offset);
            if (a->size != args) BROKE("the argument is %u bytes, sizeof(rk_args) is %u", a->size, args);
            continue;
        }
        if (a->offset < args) BROKE("%s at %u, inside the rk_args block (%u bytes)", a->value_kind, a->offset, args);
        if ((uint64_t)a->offset + a->size > k->kernarg_size)
            BROKE("%s at %u + %u bytes, past .kernarg_segment_size %u", a->value_kind, a->offset, a->size,
                  k->kernarg_size);
        const uint32_t natural = a->size == 1 || a->size == 2 || a->size == 4 || a->size == 8 ? a->size : 8;
        if (strcmp(a->value_kind, "hidden_none") != 0 && a->offset % natural)
            BROKE("%s at %u, not aligned to %u", a->value_kind, a->offset, natural);
        if (abi_version >= 3)
            for (size_t j = 0; j < sizeof V5_HIDDEN / sizeof V5_HIDDEN[0]; j++)
                if (strcmp(a->value_kind, V5_HIDDEN[j].kind) == 0 &&
                    (a->offset != base + V5_HIDDEN[j].offset || a->size != V5_HIDDEN[j].size))
                    BROKE("%s at %u (%u bytes), the v5 implicit block puts it at %u (%u bytes)", a->value_kind,
                          a->offset, a->size, base + V5_HIDDEN[j].offset, V5_HIDDEN[j].size);
    }
    if (n_explicit == 0) BROKE("no explicit argument (the rk_args block)");
    for (int i = 1; i < k->n_args; i++)
        if (!is_hidden(&k->args[i]) && is_hidden(&k->args[i - 1])) BROKE("explicit argument %d after a hidden one", i);
    if (k->kernarg_size < args) BROKE(".kernarg_segment_size %u < sizeof(rk_args) %u", k->kernarg_size, args);
    if (k->kernarg_align < align || (k->kernarg_align & (k->kernarg_align - 1)))
        BROKE(".kernarg_segment_align %u, rk_args needs %u", k->kernarg_align, align);
    const unsigned wave = (unsigned)d->arch->wave, block = (unsigned)rk_arch_max_block(d->arch);
    if (k->wave != wave) BROKE(".wavefront_size %u, the %s row's wave is %u", k->wave, d->arch->name, wave);
    if (block > k->max_flat_wg) BROKE("block %u > .max_flat_workgroup_size %u", block, k->max_flat_wg);
    if (wave == 0 || block % wave) BROKE("block %u is not a multiple of the wave %u", block, wave);
    if (k->private_size) BROKE(".private_segment_fixed_size %u (scratch)", k->private_size);
    if (k->dynamic_stack) BROKE(".uses_dynamic_stack");
    if (k->group_size > rk_amd_lds_bytes(d->arch))
        BROKE(".group_segment_fixed_size %u > the device's %u bytes of LDS", k->group_size, rk_amd_lds_bytes(d->arch));
#undef BROKE
    return !bad;
}

int rk_amd_abi_check(const rk_amd_code *c, const rk_desc *d, char *why, size_t cap) {
    if (why && cap) why[0] = '\0';
    if (!rk_amd_target_compatible(c, d->arch->name, why, cap)) return 0;
    char name[sizeof d->name + 8], one[512];
    for (int i = 0; i < 2; i++) {
        snprintf(name, sizeof name, "%s%s", d->name, i ? "_i64" : "");
        const rk_amd_kernel *k = rk_amd_kernel_find(c, name);
        if (!k) {
            snprintf(why, cap, "no kernel %s in the metadata", name);
            return 0;
        }
        if (!rk_amd_abi_check_kernel(k, c->abi_version, d, one, sizeof one)) {
            snprintf(why, cap, "%s: %s", i ? "the _i64 entry" : "the entry", one);
            return 0;
        }
    }
    return 1;
}

void rk_amd_abi_facts(const rk_amd_kernel *k, char *out, size_t cap) {
    const rk_amd_arg *e = NULL;
    int hidden = 0;
    for (int i = 0; i < k->n_args; i++) {
        if (is_hidden(&k->args[i])) hidden++;
        else if (!e) e = &k->args[i];
    }
    char arg[96] = "none";
    if (e) snprintf(arg, sizeof arg, "%s at %u, %u bytes", e->value_kind, e->offset, e->size);
    snprintf(out, cap, "kernarg %u bytes, align %u; explicit arg: %s; %d hidden; wave %u; max flat work group %u",
             k->kernarg_size, k->kernarg_align, arg, hidden, k->wave, k->max_flat_wg);
}
