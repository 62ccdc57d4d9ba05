/* Helpers shared by the test programs (testutil.h). */
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc.h"

int rk_test_setup(char *dir, rk_catalog *cat) {
    rk_err err = {0};
    if (!mkdtemp(dir)) return -1;
    chmod(dir, 0700);
    setenv("ROPEKV_BACKEND", "host", 1);
    unsetenv("ROPEKV_DISABLE_CACHE");
    unsetenv("ROPEKV_COMPILE_TIMEOUT");
    if (cat && rk_catalog_load_embedded(cat, &err) != ROPEKV_OK) {
        fprintf(stderr, "catalog: %s\n", err.msg);
        return -1;
    }
    return 0;
}

void rk_test_remove_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return;
    if (!S_ISDIR(st.st_mode)) {
        unlink(path);
        return;
    }
    chmod(path, 0700);
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char sub[4400];
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        rk_test_remove_tree(sub);
    }
    if (d) closedir(d);
    rmdir(path);
}

int rk_test_write_file(const char *path, const void *p, size_t n, mode_t mode) {
    if (rk_write_file(path, p, n) != ROPEKV_OK) return ROPEKV_ERR_IO;
    return chmod(path, mode) == 0 ? ROPEKV_OK : ROPEKV_ERR_IO;
}

pid_t rk_test_fork(void) {
    fflush(stdout);
    fflush(stderr);
    return fork();
}

int rk_test_wait(pid_t pid) {
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

rk_test_census rk_test_count_files(const char *dir) {
    rk_test_census k = {0, 0, 0, 0};
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        size_t n = strlen(e->d_name);
        if (strstr(e->d_name, ".rkco.tmp.")) k.temps++;
        else if (n > 5 && !strcmp(e->d_name + n - 5, ".rkco")) k.entries++;
        else if (n > 5 && !strcmp(e->d_name + n - 5, ".lock")) k.locks++;
        else k.other++;
    }
    if (d) closedir(d);
    return k;
}

const rk_desc *rk_test_variant(const rk_catalog *cat, const char *key) {
    static rk_desc v[RK_MAX_VARIANTS_PER_SPEC];
    for (int s = 0; s < cat->n_specs; s++) {
        rk_err err = {0};
        int n = rk_variants(&cat->specs[s], &cat->archs, v, RK_MAX_VARIANTS_PER_SPEC, &err);
        for (int i = 0; i < n; i++)
            if (!strcmp(v[i].key, key)) return &v[i];
    }
    return NULL;
}

const rk_desc *rk_test_ref_variant(const rk_catalog *cat, const char *spec, const ropekv_variant *pv) {
    static rk_desc ring[8]; /* the last 8 results stay valid */
    static unsigned next;
    const rk_spec *s = rk_catalog_find(cat, spec);
    const rk_arch *host = rk_arch_find(&cat->archs, "host");
    rk_choice c = {pv->kv, pv->q, pv->positions, pv->slots, pv->q_dtype, pv->layout, pv->op, pv->norm, 0};
    rk_desc *d = &ring[next++ % 8];
    rk_err err = {0};
    if (s && pv->size >= offsetof(ropekv_variant, record) + sizeof pv->record && pv->record &&
        rk_spec_row_find(s, pv->record, &c, &err) != ROPEKV_OK)
        return NULL;
    return s && host && rk_desc_listed(s, host, &c, d, &err) == ROPEKV_OK ? d : NULL;
}

static int saved_err = -1;
static char capture_path[4096];

int rk_test_capture_begin(const char *path) {
    fflush(stderr);
    snprintf(capture_path, sizeof capture_path, "%s", path);
    int fd = open(capture_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return -1; /* nothing captured: rk_test_capture_end returns "" */
    saved_err = dup(2);
    dup2(fd, 2);
    close(fd);
    return 0;
}

const char *rk_test_capture_end(void) {
    static char text[16384];
    text[0] = '\0';
    if (saved_err < 0) return text;
    fflush(stderr);
    dup2(saved_err, 2);
    close(saved_err);
    saved_err = -1;
    rk_codeobj f;
    if (rk_read_file(capture_path, &f) == ROPEKV_OK) snprintf(text, sizeof text, "%s", (const char *)f.data);
    rk_code_free(&f);
    unlink(capture_path);
    fputs(text, stderr); /* still shown */
    return text;
}
