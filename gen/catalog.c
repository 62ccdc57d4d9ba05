/* A loaded set of specs (the architecture table, the records library and the model specs), and one built-in spec by
 * name. */
#include <stdio.h>
#include <string.h>

#include "rk.h"

int rk_catalog_load_embedded(rk_catalog *c, rk_err *err) {
    size_t len;
    const char *text = rk_embedded("archs.lua", &len);
    memset(c, 0, sizeof *c);
    if (!text) return rk_fail(err, ROPEKV_ERR_IO, "specs/archs.lua is not embedded in this build");
    int rc = rk_archs_load("specs/archs.lua", text, len, &c->archs, err);
    if (rc == ROPEKV_OK) rc = rk_records_builtin(&c->records, err);
    for (size_t i = 0; rc == ROPEKV_OK; i++) {
        const char *name = rk_embedded_at(i, NULL);
        if (!name) break;
        size_t n = strlen(name);
        if (n < 4 || strcmp(name + n - 4, ".lua") != 0 || strcmp(name, "archs.lua") == 0 ||
            strcmp(name, "records.lua") == 0)
            continue;
        char file[RK_NAME_MAX + 16];
        snprintf(file, sizeof file, "specs/%s", name);
        text = rk_embedded(name, &len);
        rc = rk_catalog_add(c, file, text, len, err);
    }
    return rc;
}

int rk_catalog_add(rk_catalog *c, const char *file, const char *text, size_t len, rk_err *err) {
    rk_spec s;
    int rc = rk_spec_load_lib(file, text, len, &c->archs, c->records.n > 0 ? &c->records : NULL, &s, err);
    if (rc != ROPEKV_OK) return rc;
    for (int i = 0; i < c->n_specs; i++)
        if (strcmp(c->specs[i].name, s.name) == 0) {
            c->specs[i] = s;
            return ROPEKV_OK;
        }
    if (c->n_specs == RK_MAX_SPECS)
        return rk_fail(err, ROPEKV_ERR_SPEC_INVALID, "%s: more than %d specs", file, RK_MAX_SPECS);
    c->specs[c->n_specs++] = s;
    return ROPEKV_OK;
}

const rk_spec *rk_catalog_find(const rk_catalog *c, const char *name) {
    for (int i = 0; i < c->n_specs; i++)
        if (strcmp(c->specs[i].name, name) == 0) return &c->specs[i];
    return NULL;
}

int rk_spec_builtin(const char *name, const rk_arch_table *archs, rk_spec *out, rk_err *err) {
    char base[96], file[112], esc[128];
    size_t len;
    if (strlen(name) >= sizeof base - 4 || strcmp(name, "archs") == 0 || strcmp(name, "records") == 0)
        return rk_fail(err, ROPEKV_ERR_NO_SPEC, "no spec named '%s' is built in", rk_printable(name, esc, sizeof esc));
    snprintf(base, sizeof base, "%s.lua", name);
    const char *text = rk_embedded(base, &len);
    if (!text)
        return rk_fail(err, ROPEKV_ERR_NO_SPEC, "no spec named '%s' is built in or loaded",
                       rk_printable(name, esc, sizeof esc));
    snprintf(file, sizeof file, "specs/%s", base);
    int rc = rk_spec_load(file, text, len, archs, out, err);
    if (rc == ROPEKV_OK && strcmp(out->name, name) != 0)
        rc = rk_fail(err, ROPEKV_ERR_SPEC_INVALID,
                     "%s: name = '%s': a built-in spec's name must be its file's base name", file, out->name);
    return rc;
}
