/* Spec files: Lua text run in a sandbox, its result converted strictly into rk_arch_table / rk_spec.
 *
 * The sandbox: a private lua_State per file with an allocator capped at SB_MEM_CAP, a hook capped at
 * SB_INSN_CAP instructions and SB_TIME_CAP of CPU time, text chunks only, and a private _ENV holding a
 * few safe base functions plus copies of string (no dump, no patterns), table and math (no random).
 * No io, os, package, debug, load.
 * Lua code that would run with hooks off is kept out: no __gc metamethods, and xpcall handlers are
 * skipped once the instruction cap is hit.
 * C library code is not interrupted by the hook, so the string functions that can run long on small
 * input (find, match, gmatch, gsub: backtracking patterns) are left out; string.rep and table.concat
 * are bounded by the memory cap, string.rep through a wrapper (sb_rep): Lua's own loops n times even
 * when the result is empty, so a call such as string.rep('', 1 << 50) would never return, and no cap
 * could stop it. The memory cap bounds what is live, not what is done: a few
 * instructions can call string.rep, table.concat or table.sort on megabytes again and again (minutes
 * of CPU within the instruction cap). So the hook also runs on every call and stops the chunk once it
 * has used SB_TIME_CAP of CPU time; one C call can overrun it by its own length (well under a second
 * for the largest table or string the memory cap allows).
 *
 * The conversion reads the returned table with raw access only (no metamethods run) inside one
 * protected call, so an allocation failure there is an error, never a panic. On a validation error
 * the helpers return at once and leave the Lua stack as it is: the protected call discards it. */
#include "rk.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SB_MEM_CAP ((size_t)16 << 20) /* bytes per state */
#define SB_INSN_CAP 1000000L          /* VM instructions per chunk */
#ifndef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define SB_TIME_CAP 1.0 /* seconds of CPU time per chunk (real specs need a tiny fraction of it) */
#define SB_TIME_CAP_TEXT "1 s"
#else
#define SB_TIME_CAP 0.05 /* fuzzing builds: the same code paths, slow inputs 20x cheaper */
#define SB_TIME_CAP_TEXT "50 ms"
#endif
#define SB_HOOK_STEP 1000 /* the hook runs every SB_HOOK_STEP instructions and on every call */

#define TRY(call)                         \
    do {                                  \
        int rc_ = (call);                 \
        if (rc_ != ROPEKV_OK) return rc_; \
    } while (0)

/* ---- the sandbox --------------------------------------------------------------------------------- */
typedef struct sandbox {
    size_t used;     /* bytes currently allocated */
    int mem_refused; /* the cap refused an allocation */
    int sys_oom;     /* the system allocator failed (below the cap) */
    long insns;      /* instructions run (in steps of SB_HOOK_STEP) */
    int insn_hit;    /* the instruction or time cap was reached */
    int time_hit;    /* ... and it was the time cap */
    double t0;       /* CPU time when the chunk started */
} sandbox;

static void *sb_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    sandbox *sb = ud;
    size_t old = ptr != NULL ? osize : 0; /* for a new block osize is a type tag, not a size */
    if (nsize == 0) {
        free(ptr);
        sb->used -= old;
        return NULL;
    }
    if (nsize > old && nsize - old > SB_MEM_CAP - sb->used) {
        sb->mem_refused = 1;
        return NULL;
    }
    void *p = realloc(ptr, nsize);
    if (p == NULL && nsize <= old) p = ptr; /* Lua requires that shrinking never fails: the old block is big enough */
    if (p != NULL) sb->used = sb->used - old + nsize;
    else sb->sys_oom = 1;
    return p;
}

/* CPU time of this thread in seconds (0 where the clock is missing: then only the instruction cap). */
static double cpu_seconds(void) {
    struct timespec t;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0) return 0;
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void sb_hook(lua_State *L, lua_Debug *ar) {
    void *ud;
    lua_getallocf(L, &ud);
    sandbox *sb = ud;
    if (ar->event == LUA_HOOKCOUNT) sb->insns += SB_HOOK_STEP;
    if (!sb->insn_hit) {
        int over_time = cpu_seconds() - sb->t0 > SB_TIME_CAP;
        if (sb->insns <= SB_INSN_CAP && !over_time) return;
        /* From now on every instruction raises, so a pcall around an endless loop cannot go on. */
        sb->insn_hit = 1;
        sb->time_hit = sb->insns <= SB_INSN_CAP;
        lua_sethook(L, sb_hook, LUA_MASKCOUNT, 1);
    }
    luaL_where(L, 0); /* in a hook, level 0 is the Lua function being run */
    if (sb->time_hit) lua_pushliteral(L, "time limit exceeded (" SB_TIME_CAP_TEXT " of CPU time)");
    else lua_pushfstring(L, "instruction limit exceeded (%d instructions)", (int)SB_INSN_CAP);
    lua_concat(L, 2);
    lua_error(L);
}

/* Message handler: the error text plus a traceback. Runs no Lua code (no __tostring). */
static int sb_msgh(lua_State *L) {
    const char *msg = lua_type(L, 1) == LUA_TSTRING ? lua_tostring(L, 1) : NULL;
    if (msg == NULL) msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    luaL_traceback(L, L, msg, 1);
    return 1;
}

/* Lua runs finalizers with hooks off, so a __gc that loops could never be stopped: metatables with a
 * __gc field (any value: it could be replaced by a function later) are refused. */
static int sb_setmetatable(lua_State *L) {
    if (lua_type(L, 2) == LUA_TTABLE) {
        lua_pushliteral(L, "__gc");
        if (lua_rawget(L, 2) != LUA_TNIL) return luaL_error(L, "__gc metamethods are not allowed in spec files");
        lua_pop(L, 1);
    }
    lua_pushvalue(L, lua_upvalueindex(1)); /* the real setmetatable */
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, 1);
    return 1;
}

/* The message handler xpcall gets: an error raised by the instruction hook runs handlers with hooks
 * off, so once the cap is hit the spec's handler is skipped and the message passes through. */
static int sb_xpcall_handler(lua_State *L) {
    void *ud;
    lua_getallocf(L, &ud);
    if (((sandbox *)ud)->insn_hit) return 1;
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, 1);
    return 1;
}

static int sb_xpcall(lua_State *L) {
    luaL_checktype(L, 2, LUA_TFUNCTION);
    lua_pushvalue(L, 2);
    lua_pushcclosure(L, sb_xpcall_handler, 1);
    lua_replace(L, 2);
    lua_pushvalue(L, lua_upvalueindex(1)); /* the real xpcall */
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

/* Base functions a spec may use (setmetatable and xpcall in their wrapped form). */
static const char *const base_allowed[] = {
    "assert", "error",    "ipairs", "next",   "pairs",  "pcall",        "select",       "tonumber", "tostring", "type",
    "xpcall", "rawequal", "rawget", "rawlen", "rawset", "setmetatable", "getmetatable", "_VERSION", NULL,
};
/* No dump (bytecode), and no pattern matching: the instruction hook cannot interrupt C code, and a
 * pathological pattern would run for hours. Specs are data; they need no patterns. */
static const char *const string_denied[] = {"dump", "find", "match", "gmatch", "gsub", NULL};
static const char *const math_denied[] = {"random", "randomseed", NULL}; /* specs are deterministic */
static const char *const none_denied[] = {NULL};

static int in_list(const char *const *list, const char *s, size_t len) {
    for (; *list != NULL; list++)
        if (strlen(*list) == len && memcmp(*list, s, len) == 0) return 1;
    return 0;
}

/* Pushes a new table with every field of the table at src except those in deny. */
static void copy_lib(lua_State *L, int src, const char *const *deny) {
    lua_newtable(L);
    lua_pushnil(L);
    while (lua_next(L, src) != 0) {
        size_t len;
        const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tolstring(L, -2, &len) : NULL;
        if (k != NULL && !in_list(deny, k, len)) {
            lua_pushvalue(L, -2);
            lua_insert(L, -2);
            lua_rawset(L, -4);
        } else {
            lua_pop(L, 1);
        }
    }
}

/* string.rep with its work bounded by its result: an empty result returns at once (Lua's own version
 * copies n pieces, even empty ones, inside one C call the hooks cannot interrupt); any other result
 * is allocated whole before the copying starts, so the memory cap refuses a large one up front.
 * Upvalue 1 is Lua's string.rep. */
static int sb_rep(lua_State *L) {
    size_t l, lsep;
    luaL_checklstring(L, 1, &l);
    lua_Integer n = luaL_checkinteger(L, 2);
    luaL_optlstring(L, 3, "", &lsep);
    if (n <= 0 || (l == 0 && (lsep == 0 || n == 1))) {
        lua_pushliteral(L, "");
        return 1;
    }
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, 1);
    return 1;
}

/* Protected: opens the allowed libraries and returns the sandbox _ENV. */
static int sb_open(lua_State *L) {
    luaL_requiref(L, LUA_GNAME, luaopen_base, 0);
    int g = lua_gettop(L);
    luaL_requiref(L, LUA_STRLIBNAME, luaopen_string, 0);
    int str = lua_gettop(L);
    luaL_requiref(L, LUA_TABLIBNAME, luaopen_table, 0);
    int tab = lua_gettop(L);
    luaL_requiref(L, LUA_MATHLIBNAME, luaopen_math, 0);
    int math = lua_gettop(L);

    lua_newtable(L);
    int env = lua_gettop(L);
    for (const char *const *f = base_allowed; *f != NULL; f++) {
        lua_getfield(L, g, *f);
        lua_setfield(L, env, *f);
    }
    lua_getfield(L, g, "setmetatable");
    lua_pushcclosure(L, sb_setmetatable, 1);
    lua_setfield(L, env, "setmetatable");
    lua_getfield(L, g, "xpcall");
    lua_pushcclosure(L, sb_xpcall, 1);
    lua_setfield(L, env, "xpcall");
    copy_lib(L, str, string_denied);
    lua_getfield(L, str, "rep");
    lua_pushcclosure(L, sb_rep, 1);
    lua_setfield(L, -2, "rep");
    lua_setfield(L, env, LUA_STRLIBNAME);
    copy_lib(L, tab, none_denied);
    lua_setfield(L, env, LUA_TABLIBNAME);
    copy_lib(L, math, math_denied);
    lua_setfield(L, env, LUA_MATHLIBNAME);

    /* Methods on strings ("x"):f() go through the string metatable: point it at the copy, and drop
     * dump from the real table too. */
    lua_pushnil(L);
    lua_setfield(L, str, "dump");
    lua_pushliteral(L, "");
    if (lua_getmetatable(L, -1)) {
        lua_getfield(L, env, LUA_STRLIBNAME);
        lua_setfield(L, -2, "__index");
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    lua_pushvalue(L, env);
    return 1;
}

/* The error text on top of the stack, without converting anything, escaped into buf (rk_escape: a spec's error()
 * is its text, which may hold control characters). */
static const char *top_msg(lua_State *L, char *buf, size_t cap) {
    if (lua_type(L, -1) != LUA_TSTRING) return "(no error message)";
    size_t len;
    const char *msg = lua_tolstring(L, -1, &len);
    return rk_escape(msg, len, buf, cap);
}

/* "<file>: <msg>", unless Lua already put the file name first ("<file>:3: ..."). */
static int lua_fail(rk_err *err, ropekv_status code, const char *file, const char *msg) {
    size_t n = strlen(file);
    if (strncmp(msg, file, n) == 0 && msg[n] == ':') return rk_fail(err, code, "%s", msg);
    return rk_fail(err, code, "%s: %s", file, msg);
}

static int mem_fail(rk_err *err, const char *file, const char *msg) {
    return rk_fail(err, ROPEKV_ERR_SPEC_LIMIT, "%s: memory limit exceeded (%d MiB): %s", file, (int)(SB_MEM_CAP >> 20),
                   msg);
}

/* Classifies a failed lua_pcall (or load). Running out of memory is the spec's fault when the cap
 * refused an allocation (ROPEKV_ERR_SPEC_LIMIT), the machine's when the system allocator failed (ROPEKV_ERR_NOMEM). */
static int run_fail(lua_State *L, const sandbox *sb, int status, const char *file, rk_err *err) {
    char buf[1024];
    const char *msg = top_msg(L, buf, sizeof buf);
    int oom = status == LUA_ERRMEM || status == LUA_ERRERR || strncmp(msg, "not enough memory", 17) == 0;
    if (sb->insn_hit) return lua_fail(err, ROPEKV_ERR_SPEC_LIMIT, file, msg);
    if (oom && sb->mem_refused) return mem_fail(err, file, msg);
    if (oom && sb->sys_oom) return rk_fail(err, ROPEKV_ERR_NOMEM, "%s: out of memory: %s", file, msg);
    if (status == LUA_ERRMEM) return mem_fail(err, file, msg);
    return lua_fail(err, ROPEKV_ERR_SPEC_RUNTIME, file, msg);
}

/* Loads and runs the chunk with the sandbox _ENV at index env; leaves its one result on the stack. */
static int run_chunk(lua_State *L, sandbox *sb, int env, const char *file, const char *text, size_t len, rk_err *err) {
    char chunkname[300];
    if (len > 0 && text[0] == LUA_SIGNATURE[0])
        return rk_fail(err, ROPEKV_ERR_SPEC_SYNTAX, "%s: binary chunks are not allowed (spec files are Lua text)",
                       file);
    snprintf(chunkname, sizeof chunkname, "=%s", file);
    lua_pushcfunction(L, sb_msgh);
    int h = lua_gettop(L);
    int st = luaL_loadbufferx(L, text, len, chunkname, "t");
    if (st == LUA_ERRMEM) return run_fail(L, sb, st, file, err);
    char buf[1024];
    if (st != LUA_OK) return lua_fail(err, ROPEKV_ERR_SPEC_SYNTAX, file, top_msg(L, buf, sizeof buf));
    lua_pushvalue(L, env);
    lua_setupvalue(L, -2, 1); /* a main chunk's only upvalue is _ENV */
    sb->t0 = cpu_seconds();
    lua_sethook(L, sb_hook, LUA_MASKCOUNT | LUA_MASKCALL, SB_HOOK_STEP);
    st = lua_pcall(L, 0, 1, h);
    if (st != LUA_OK) return run_fail(L, sb, st, file, err);
    if (sb->time_hit) /* the chunk caught the error and returned */
        return rk_fail(err, ROPEKV_ERR_SPEC_LIMIT, "%s: time limit exceeded (" SB_TIME_CAP_TEXT " of CPU time)", file);
    if (sb->insn_hit)
        return rk_fail(err, ROPEKV_ERR_SPEC_LIMIT, "%s: instruction limit exceeded (%d instructions)", file,
                       (int)SB_INSN_CAP);
    return ROPEKV_OK;
}

/* ---- reading the result: scopes and field helpers ------------------------------------------------ */
typedef struct scope {
    lua_State *L;
    const char *file;
    rk_err *err;
    int idx;       /* absolute stack index of the table */
    char path[96]; /* prefix of its keys in messages: "" or "fp8." or "archs[3]." */
} scope;

static int vfail_at(const scope *s, ropekv_status code, const char *key, const char *fmt, va_list ap) {
    char reason[1024], where[192];
    vsnprintf(reason, sizeof reason, fmt, ap);
    snprintf(where, sizeof where, "%s%s", s->path, key != NULL ? key : "");
    size_t n = strlen(where);
    if (n > 0 && where[n - 1] == '.') where[n - 1] = '\0';
    if (where[0] == '\0') return rk_fail(s->err, code, "%s: %s", s->file, reason);
    return rk_fail(s->err, code, "%s: %s: %s", s->file, where, reason);
}

#if defined(__GNUC__)
#define RK_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define RK_PRINTF(a, b)
#endif

/* "<file>: <path><key>: <reason>" as ROPEKV_ERR_SPEC_INVALID; key NULL names the table itself. */
static int RK_PRINTF(3, 4) bad(const scope *s, const char *key, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = vfail_at(s, ROPEKV_ERR_SPEC_INVALID, key, fmt, ap);
    va_end(ap);
    return rc;
}

static int RK_PRINTF(3, 4) bad_target(const scope *s, const char *key, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = vfail_at(s, ROPEKV_ERR_SPEC_TARGET, key, fmt, ap);
    va_end(ap);
    return rc;
}

/* Pushes s[key] (raw: metatables are ignored) and returns its type. */
static int push_field(const scope *s, const char *key) {
    lua_pushstring(s->L, key);
    return lua_rawget(s->L, s->idx);
}

static void copy_str(char *dst, size_t cap, const char *src) {
    size_t n = strlen(src);
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* Readable form of the key at idx for "unknown key" messages. */
static void describe_key(lua_State *L, int idx, char *buf, size_t cap) {
    switch (lua_type(L, idx)) {
    case LUA_TSTRING: {
        size_t len;
        const char *k = lua_tolstring(L, idx, &len);
        char esc[64];
        snprintf(buf, cap, "'%s'", rk_escape(k, len, esc, sizeof esc));
        break;
    }
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx)) snprintf(buf, cap, "[%lld]", (long long)lua_tointeger(L, idx));
        else snprintf(buf, cap, "[%.14g]", (double)lua_tonumber(L, idx));
        break;
    case LUA_TBOOLEAN: snprintf(buf, cap, "[%s]", lua_toboolean(L, idx) ? "true" : "false"); break;
    default: snprintf(buf, cap, "of type %s", luaL_typename(L, idx)); break;
    }
}

static void join(char *buf, size_t cap, const char *const *names) {
    size_t n = 0;
    buf[0] = '\0';
    for (; *names != NULL && n < cap; names++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", n > 0 ? ", " : "", *names);
}

/* Every key of the table must be a string in allowed. */
static int check_keys(const scope *s, const char *const *allowed) {
    lua_State *L = s->L;
    lua_pushnil(L);
    while (lua_next(L, s->idx) != 0) {
        lua_pop(L, 1);
        size_t len = 0;
        const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &len) : NULL;
        if (k == NULL || !in_list(allowed, k, len)) {
            char key[96], names[512];
            describe_key(L, -1, key, sizeof key);
            join(names, sizeof names, allowed);
            return bad(s, NULL, "unknown key %s (allowed: %s)", key, names);
        }
    }
    return ROPEKV_OK;
}

/* Pushes the sub-table s[key] (a new empty one when absent, so defaults apply) and opens it as sub. */
static int open_table(const scope *s, const char *key, scope *sub) {
    int t = push_field(s, key);
    if (t == LUA_TNIL) {
        lua_pop(s->L, 1);
        lua_newtable(s->L);
    } else if (t != LUA_TTABLE) {
        return bad(s, key, "must be a table, got %s", lua_typename(s->L, t));
    }
    *sub = *s;
    sub->idx = lua_gettop(s->L);
    if (snprintf(sub->path, sizeof sub->path, "%s%s.", s->path, key) >= (int)sizeof sub->path)
        return bad(s, key, "nested too deeply");
    return ROPEKV_OK;
}

/* An integer in lo..hi (a float with an integral value counts); def NULL: required. */
static int get_int(const scope *s, const char *key, const int *def, int lo, int hi, int *out) {
    lua_State *L = s->L;
    int t = push_field(s, key), isint = 0;
    if (t == LUA_TNIL && def != NULL) {
        *out = *def;
    } else if (t == LUA_TNIL) {
        return bad(s, key, "required (an integer)");
    } else if (t != LUA_TNUMBER) {
        return bad(s, key, "must be an integer, got %s", lua_typename(L, t));
    } else {
        lua_Integer v = lua_tointegerx(L, -1, &isint);
        if (!isint) return bad(s, key, "must be an integer, got %.14g", (double)lua_tonumber(L, -1));
        if (v < lo || v > hi) return bad(s, key, "must be in %d..%d, got %lld", lo, hi, (long long)v);
        *out = (int)v;
    }
    lua_pop(L, 1);
    return ROPEKV_OK;
}

/* A number (integer or float); def NULL: required. */
static int get_number(const scope *s, const char *key, const double *def, double *out) {
    int t = push_field(s, key);
    if (t == LUA_TNIL && def != NULL) *out = *def;
    else if (t == LUA_TNIL) return bad(s, key, "required (a number)");
    else if (t != LUA_TNUMBER) return bad(s, key, "must be a number, got %s", lua_typename(s->L, t));
    else *out = (double)lua_tonumber(s->L, -1);
    lua_pop(s->L, 1);
    return ROPEKV_OK;
}

/* true or false; def NULL: required. */
static int get_bool(const scope *s, const char *key, const int *def, int *out) {
    int t = push_field(s, key);
    if (t == LUA_TNIL && def != NULL) *out = *def;
    else if (t == LUA_TNIL) return bad(s, key, "required (true or false)");
    else if (t != LUA_TBOOLEAN) return bad(s, key, "must be a boolean (true or false), got %s", lua_typename(s->L, t));
    else *out = lua_toboolean(s->L, -1);
    lua_pop(s->L, 1);
    return ROPEKV_OK;
}

/* A string of at most cap - 1 bytes; def NULL: required. */
static int get_string(const scope *s, const char *key, const char *def, char *out, size_t cap) {
    size_t len;
    int t = push_field(s, key);
    if (t == LUA_TNIL && def != NULL) {
        copy_str(out, cap, def);
    } else if (t == LUA_TNIL) {
        return bad(s, key, "required (a string)");
    } else if (t != LUA_TSTRING) {
        return bad(s, key, "must be a string, got %s", lua_typename(s->L, t));
    } else {
        const char *v = lua_tolstring(s->L, -1, &len);
        if (len >= cap) return bad(s, key, "too long (at most %zu characters, got %zu)", cap - 1, len);
        if (strlen(v) != len) return bad(s, key, "must not contain NUL bytes");
        memcpy(out, v, len + 1);
    }
    lua_pop(s->L, 1);
    return ROPEKV_OK;
}

/* A string of the characters in charset ([a-z0-9] plus extra), non-empty. */
static int get_ident(const scope *s, const char *key, const char *extra, char *out, size_t cap) {
    TRY(get_string(s, key, NULL, out, cap));
    for (const char *c = out;; c++) {
        if (*c == '\0' && c > out) return ROPEKV_OK;
        if (*c == '\0' || !((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || strchr(extra, *c))) {
            char esc[128];
            return bad(s, key, "must match [a-z0-9%s]+, got '%s'", extra, rk_printable(out, esc, sizeof esc));
        }
    }
}

/* ---- enumerations: the spellings come from the tables of rk.h ------------------------------------- */
/* Matches the string on top against the spellings of e; reports key when none matches. */
static int parse_top(const scope *s, const char *key, const rk_enum *e, int *out) {
    lua_State *L = s->L;
    if (lua_type(L, -1) != LUA_TSTRING) return bad(s, key, "must be a string, got %s", luaL_typename(L, -1));
    size_t len;
    const char *v = lua_tolstring(L, -1, &len);
    char known[256];
    size_t n = 0;
    known[0] = '\0';
    for (int i = 0; i < e->n; i++) {
        const char *name = e->v[i].name;
        if (strlen(name) == len && memcmp(name, v, len) == 0) {
            *out = e->v[i].value;
            return ROPEKV_OK;
        }
        if (n < sizeof known) n += (size_t)snprintf(known + n, sizeof known - n, "%s%s", i ? ", " : "", name);
    }
    char esc[64];
    return bad(s, key, "unknown value '%s' (one of: %s)", rk_escape(v, len, esc, sizeof esc), known);
}

/* One spelling of an enum; def < 0: required. */
static int get_enum(const scope *s, const char *key, const rk_enum *e, int def, int *out) {
    int t = push_field(s, key);
    if (t == LUA_TNIL && def >= 0) {
        *out = def;
    } else if (t == LUA_TNIL) {
        return bad(s, key, "required (a string)");
    } else {
        TRY(parse_top(s, key, e, out));
    }
    lua_pop(s->L, 1);
    return ROPEKV_OK;
}

/* Pushes s[key] and checks that it is a list: a sequence 1..n and nothing else, or a single string
 * (a list of one). Sets *n (0 when absent). Read elements with push_elem. */
static int open_list(const scope *s, const char *key, int max, int *n) {
    lua_State *L = s->L;
    int t = push_field(s, key), lv = lua_gettop(L);
    *n = 0;
    if (t == LUA_TNIL) return ROPEKV_OK;
    if (t == LUA_TSTRING) {
        *n = 1;
        return ROPEKV_OK;
    }
    if (t != LUA_TTABLE) return bad(s, key, "must be a list of strings (or one string), got %s", lua_typename(L, t));
    lua_Integer len = (lua_Integer)lua_rawlen(L, lv), count = 0;
    lua_pushnil(L);
    while (lua_next(L, lv) != 0) {
        lua_pop(L, 1);
        lua_Integer k = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : 0;
        if (k < 1 || k > len) {
            char what[96];
            describe_key(L, -1, what, sizeof what);
            return bad(s, key, "must be a list (a sequence without holes), found key %s", what);
        }
        count++;
    }
    if (count != len) return bad(s, key, "must be a list (a sequence without holes)");
    if (len == 0) return bad(s, key, "must not be empty");
    if (len > max) return bad(s, key, "at most %d entries, got %lld", max, (long long)len);
    *n = (int)len;
    return ROPEKV_OK;
}

/* Pushes element i (1-based) of the list at lv. */
static void push_elem(lua_State *L, int lv, int i) {
    if (lua_type(L, lv) == LUA_TSTRING) lua_pushvalue(L, lv);
    else lua_rawgeti(L, lv, i);
}

/* A list of distinct spellings of an enum; absent: defs[0..ndef). */
static int get_enum_list(const scope *s, const char *key, const rk_enum *e, const int *defs, int ndef, int max,
                         int *out, int *n) {
    lua_State *L = s->L;
    TRY(open_list(s, key, max, n));
    int lv = lua_gettop(L);
    if (*n == 0) {
        memcpy(out, defs, (size_t)ndef * sizeof *defs);
        *n = ndef;
        lua_pop(L, 1);
        return ROPEKV_OK;
    }
    for (int i = 0; i < *n; i++) {
        char elem[64];
        snprintf(elem, sizeof elem, "%s[%d]", key, i + 1);
        push_elem(L, lv, i + 1);
        TRY(parse_top(s, elem, e, &out[i]));
        lua_pop(L, 1);
        for (int j = 0; j < i; j++)
            if (out[j] == out[i])
                return bad(s, elem, "duplicate '%s' (also %s[%d])", rk_enum_name(e, out[i]), key, j + 1);
    }
    lua_pop(L, 1);
    return ROPEKV_OK;
}

/* ---- fp8 saturation bounds ------------------------------------------------------------------------ */
/* The value of the positive e4m3 code c (1..0x7f). OCP: bias 7, 0x7f is NaN; FNUZ: bias 8. */
static double e4m3_value(int c, rk_fp8_fmt fmt) {
    int bias = fmt == RK_FP8_FNUZ ? 8 : 7, e = c >> 3, m = c & 7;
    return e == 0 ? ldexp(m, 1 - bias - 3) : ldexp(8 + m, e - bias - 3);
}

/* A saturation bound: finite, positive, at most the format's max and exactly an e4m3 value. */
static int get_sat(const scope *s, const char *key, rk_fp8_fmt fmt, float *out) {
    const char *fname = fmt == RK_FP8_FNUZ ? "FNUZ" : "OCP";
    int top = fmt == RK_FP8_FNUZ ? 0x7f : 0x7e;
    double max = e4m3_value(top, fmt), v = 0, below = 0;
    TRY(get_number(s, key, &max, &v));
    if (!isfinite(v)) return bad(s, key, "must be finite, got %g", v);
    if (v <= 0) return bad(s, key, "must be positive, got %.14g", v);
    if (v > max) return bad(s, key, "must be at most %g (the e4m3 %s maximum), got %.14g", max, fname, v);
    for (int c = 1; c <= top; c++) {
        double x = e4m3_value(c, fmt);
        if (x == v) {
            *out = (float)v;
            return ROPEKV_OK;
        }
        if (x > v) return bad(s, key, "%.14g is not an e4m3 %s value (nearest: %.14g and %.14g)", v, fname, below, x);
        below = x;
    }
    return bad(s, key, "%.14g is not an e4m3 %s value", v, fname); /* not reached: v <= max */
}

/* ---- architecture table ----------------------------------------------------------------------------- */
static const char *const archs_keys[] = {"archs", NULL};
static const char *const arch_keys[] = {"name",        "vendor",      "wave",      "fp8",         "fp8_hw",
                                        "bf16_hw",     "vec_bytes",   "block",     "compiler",    "options",
                                        "chunks",      "chunks_from", "nt_stores", "pdl",         "wide_block",
                                        "wide_from",   "family",      "e2m1_hw",   "read_chunks", "read_chunks_from",
                                        "write_pairs", NULL};

static int compiler_fits(rk_compiler c, rk_vendor v) {
    switch (c) {
    case RK_CC_HIPRTC: return v == RK_VENDOR_AMD;
    case RK_CC_NVRTC: return v == RK_VENDOR_NVIDIA;
    case RK_CC_CLANG: return v != RK_VENDOR_HOST;
    case RK_CC_HOST: return v == RK_VENDOR_HOST;
    }
    return 0;
}

static int read_arch(const scope *s, rk_arch *a) {
    int v, c, f, def_vec = 16, def_block = 256, def_chunks = 1, def_nt = 0, def_pdl = 0, def_from = 1 << 20, from;
    TRY(check_keys(s, arch_keys));
    TRY(get_ident(s, "name", "_:+-", a->name, sizeof a->name));
    TRY(get_enum(s, "vendor", &rk_vendor_enum, -1, &v));
    TRY(get_enum(s, "compiler", &rk_compiler_enum, -1, &c));
    TRY(get_enum(s, "fp8", &rk_fp8_enum, -1, &f));
    a->vendor = (rk_vendor)v;
    a->compiler = (rk_compiler)c;
    a->fp8 = (rk_fp8_fmt)f;
    if (!compiler_fits(a->compiler, a->vendor))
        return bad(s, "compiler", "'%s' does not build for vendor '%s'", rk_compiler_name(a->compiler),
                   rk_vendor_name(a->vendor));
    TRY(get_int(s, "wave", NULL, 1, 1024, &a->wave));
    if (a->wave != 32 && a->wave != 64) return bad(s, "wave", "must be 32 or 64, got %d", a->wave);
    TRY(get_bool(s, "fp8_hw", NULL, &a->fp8_hw));
    TRY(get_bool(s, "bf16_hw", NULL, &a->bf16_hw));
    TRY(get_int(s, "vec_bytes", &def_vec, 1, 1024, &a->vec_bytes));
    if (a->vec_bytes != 8 && a->vec_bytes != 16) return bad(s, "vec_bytes", "must be 8 or 16, got %d", a->vec_bytes);
    TRY(get_int(s, "block", &def_block, 32, 1024, &a->block));
    if (a->block % a->wave != 0) return bad(s, "block", "must be a multiple of wave (%d), got %d", a->wave, a->block);
    int def_wide = a->block, def_wide_from = 1 << 30, wide_from;
    TRY(get_int(s, "wide_block", &def_wide, 32, 1024, &a->wide_block));
    if (a->wide_block % a->wave != 0)
        return bad(s, "wide_block", "must be a multiple of wave (%d), got %d", a->wave, a->wide_block);
    TRY(get_int(s, "wide_from", &def_wide_from, 0, 1 << 30, &wide_from));
    a->wide_from = wide_from;
    TRY(get_int(s, "chunks", &def_chunks, 1, 8, &a->chunks));
    TRY(get_int(s, "chunks_from", &def_from, 0, 1 << 30, &from));
    a->chunks_from = from;
    TRY(get_int(s, "read_chunks", &a->chunks, 1, 8, &a->read_chunks));
    TRY(get_int(s, "read_chunks_from", &from, 0, 1 << 30, &from));
    a->read_chunks_from = from;
    TRY(get_bool(s, "nt_stores", &def_nt, &a->nt_stores));
    TRY(get_bool(s, "pdl", &def_pdl, &a->pdl));
    if (a->pdl && a->vendor != RK_VENDOR_NVIDIA)
        return bad(s, "pdl", "programmatic dependent launch is an NVIDIA feature (sm_90 and later)");
    int def_family = 0;
    TRY(get_bool(s, "family", &def_family, &a->family));
    if (a->family && a->vendor != RK_VENDOR_NVIDIA)
        return bad(s, "family", "family-specific targets (sm_XYf) are NVIDIA's");
    int def_e2m1 = 0;
    TRY(get_bool(s, "e2m1_hw", &def_e2m1, &a->e2m1_hw));
    if (a->e2m1_hw && a->vendor != RK_VENDOR_AMD)
        return bad(s, "e2m1_hw",
                   "an AMD key (an NVIDIA row converts e2m1 in hardware through its family target, "
                   "family = true)");
    if (a->vendor == RK_VENDOR_NVIDIA) a->e2m1_hw = a->family;
    const int def_pairs = a->vendor != RK_VENDOR_AMD;
    TRY(get_bool(s, "write_pairs", &def_pairs, &a->write_pairs));
    return get_string(s, "options", "", a->options, sizeof a->options);
}

static int read_archs(const scope *s, rk_arch_table *t) {
    lua_State *L = s->L;
    int n;
    TRY(check_keys(s, archs_keys));
    int type = push_field(s, "archs");
    if (type == LUA_TNIL) return bad(s, "archs", "required (a list of tables)");
    if (type != LUA_TTABLE) return bad(s, "archs", "must be a list of tables, got %s", lua_typename(L, type));
    lua_pop(L, 1);
    TRY(open_list(s, "archs", RK_MAX_ARCHS, &n));
    int lv = lua_gettop(L);
    t->n = 0;
    for (int i = 0; i < n; i++) {
        scope row = *s;
        char key[32];
        snprintf(key, sizeof key, "archs[%d]", i + 1);
        if (lua_rawgeti(L, lv, i + 1) != LUA_TTABLE)
            return bad(s, key, "must be a table, got %s", luaL_typename(L, -1));
        row.idx = lua_gettop(L);
        snprintf(row.path, sizeof row.path, "%s.", key);
        TRY(read_arch(&row, &t->a[i]));
        for (int j = 0; j < i; j++)
            if (strcmp(t->a[j].name, t->a[i].name) == 0)
                return bad(&row, "name", "duplicate arch '%s' (also archs[%d])", t->a[i].name, j + 1);
        t->n = i + 1;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return ROPEKV_OK;
}

/* ---- model spec --------------------------------------------------------------------------------------- */
static const char *const spec_keys[] = {
    "name",       "description", "kv_lora_rank",  "qk_rope_head_dim",
    "rope",       "cos_sin",     "positions",     "slots",
    "kv_dtypes",  "fp8",         "negative_slot", "q_forms",
    "sanitize",   "targets",     "q_dtypes",      "q_fp8",
    "kv_layouts", "fp8_tile",    "ops",           "read",
    "norms",      "kv_norm",     "records",       "q_norm",
    NULL,
};
static const char *const fp8_keys[] = {"scale", "saturate", "rope_bf16_round", "matches", NULL};
static const char *const sat_keys[] = {"ocp", "fnuz", NULL};
static const char *const tile_keys[] = {"tile",    "scale",   "saturate", "scales_at",
                                        "rope_at", "matches", "readers",  NULL};
static const char *const read_keys[] = {"negative_slot", NULL};
static const char *const norm_keys[] = {"weight", "eps", "rounding", "over", "matches", NULL};
static const char *const q_norm_keys[] = {"eps", "matches", NULL};

static int given(const scope *s, const char *key);

/* An RMSNorm's eps: in (0, 1] and a float above zero. */
static int get_eps(const scope *f, double *eps) {
    TRY(get_number(f, "eps", NULL, eps));
    if (!(*eps > 0 && *eps <= 1) || !((float)*eps > 0))
        return bad(f, "eps", "must be in (0, 1] and above the smallest float, got %.14g", *eps);
    return ROPEKV_OK;
}

/* A norm's sum is a tree over the 16-byte chunks of the values it covers: their count a power of two. */
static int tree_fits(int values) { return ((values / 8) & (values / 8 - 1)) == 0; }
/* A norm over a whole row (kv_norm.over head, q_norm) sums over the row's lanes by shuffles within a wave: the row
 * is at least the widest wave (64 lanes of 16 bytes: W >= 512) and a power of two of chunks. */
static int row_fits(int W) { return tree_fits(W) && W / 8 >= 64; }

/* The `q_norm` table (DeepSeek-V4): a weightless RMSNorm of each query head over its W = L + R values before the
 * rotation; eps required. Every write kernel with a query output has it: the q forms that write only part of a
 * head (zero_copy, inplace) cannot see the whole head, so they are not built (the list's default leaves them out,
 * a list that names them is refused). */
static int read_q_norm(const scope *s, rk_spec *o) {
    memset(&o->q_norm, 0, sizeof o->q_norm);
    if (!given(s, "q_norm")) return ROPEKV_OK;
    scope f;
    double eps = 0;
    TRY(open_table(s, "q_norm", &f));
    TRY(check_keys(&f, q_norm_keys));
    TRY(get_eps(&f, &eps));
    TRY(get_string(&f, "matches", "", o->q_norm.matches, sizeof o->q_norm.matches));
    lua_pop(s->L, 1);
    if (!row_fits(o->kv_lora_rank + o->rope_dim))
        return bad(s, "q_norm",
                   "the query norm needs kv_lora_rank + qk_rope_head_dim a power of two of at least 512 (its sum is a "
                   "tree over the head's 16-byte chunks, one wave's lanes or more), got %d",
                   o->kv_lora_rank + o->rope_dim);
    o->q_norm.norm = RK_QN_RMS;
    o->q_norm.eps = (float)eps;
    return ROPEKV_OK;
}

static int read_dims(const scope *s, rk_spec *o) {
    TRY(get_int(s, "kv_lora_rank", NULL, 8, 8192, &o->kv_lora_rank));
    if (o->kv_lora_rank % 8 != 0)
        return bad(s, "kv_lora_rank", "must be a multiple of 8 (16-byte vectors of bf16), got %d", o->kv_lora_rank);
    /* 0: no rope part (GLM-5.3-Flash: NoPE, the cache row is the latent) */
    TRY(get_int(s, "qk_rope_head_dim", NULL, 0, 1024, &o->rope_dim));
    if (o->rope_dim % 2 != 0) return bad(s, "qk_rope_head_dim", "must be even, got %d", o->rope_dim);
    if (o->rope_dim % 8 != 0)
        return bad(s, "qk_rope_head_dim", "must be a multiple of 8 (one 16-byte vector of bf16), got %d", o->rope_dim);
    return ROPEKV_OK;
}

static int read_rope(const scope *s, rk_spec *o) {
    int r, c;
    /* no rope part rotates nothing: rope none, the default there */
    TRY(get_enum(s, "rope", &rk_rope_enum, o->rope_dim == 0 ? RK_ROPE_NONE : RK_ROPE_GPTJ, &r));
    TRY(get_enum(s, "cos_sin", &rk_cos_sin_enum, RK_CS_F32_CAT, &c));
    o->rope = (rk_rope)r;
    o->cos_sin = (rk_cos_sin)c;
    if (o->rope_dim == 0 && o->rope != RK_ROPE_NONE)
        return bad(s, "rope",
                   "'%s' with qk_rope_head_dim 0: R = 0: no rope part to rotate (say 'none', or leave rope out)",
                   rk_rope_name(o->rope));
    if (o->rope == RK_ROPE_NEOX && o->rope_dim % 16 != 0)
        return bad(s, "qk_rope_head_dim",
                   "must be a multiple of 16 with rope 'neox' (each half is whole 16-byte vectors), "
                   "got %d",
                   o->rope_dim);
    return ROPEKV_OK;
}

/* Reads a list-valued key into one of rk_spec's arrays: at most as many entries as the array holds (and every
 * entry a distinct value of the enum, so never more than the enum has); absent: defs[0..ndef). */
#define RK_NELEM(a) (sizeof(a) / sizeof((a)[0]))
#define RK_LIST_MAX 8
#define READ_LIST(s, key, e, defs, ndef, arr, count)                                              \
    do {                                                                                          \
        _Static_assert(RK_NELEM(arr) <= RK_LIST_MAX, "a spec list longer than RK_LIST_MAX");      \
        int v_[RK_LIST_MAX], n_ = 0;                                                              \
        if ((ndef) > (int)RK_NELEM(arr)) return bad(s, key, "more defaults than the list holds"); \
        TRY(get_enum_list(s, key, e, defs, ndef, (int)RK_NELEM(arr), v_, &n_));                   \
        for (int i_ = 0; i_ < n_; i_++) (arr)[i_] = v_[i_];                                       \
        (count) = n_;                                                                             \
    } while (0)

static int given(const scope *s, const char *key) {
    const int t = push_field(s, key);
    lua_pop(s->L, 1);
    return t != LUA_TNIL;
}

/* Refuses q form q where it writes part of a query head (zero_copy, inplace) and the spec's `with` needs whole heads
 * (a norm over a row: `needs` says why). */
static int whole_head_form(const scope *s, int q, const char *with, const char *needs) {
    if (q == ROPEKV_Q_ZERO_COPY || q == ROPEKV_Q_INPLACE)
        return bad(s, "q_forms", "'%s' with %s: %s (absorbed or none)", rk_qform_name(q), with, needs);
    return ROPEKV_OK;
}

/* The caller's choices: index types, row formats, layouts, ops, query dtypes, q forms. Each is open (every value)
 * unless the spec lists the values its model allows; values the model cannot have are left out of the defaults
 * (fp8_tile without an `fp8_tile` table, q form inplace with rope none). */
static int read_lists(const scope *s, rk_spec *o) {
    static const int idx[] = {ROPEKV_INDEX_INT64, ROPEKV_INDEX_INT32},
                     layouts[] = {ROPEKV_KV_FLAT, ROPEKV_KV_PAGED, ROPEKV_KV_SPLIT},
                     ops[] = {ROPEKV_OP_WRITE, ROPEKV_OP_READ}, qdt[] = {ROPEKV_Q_BF16, ROPEKV_Q_FP8_E4M3},
                     kv[] = {ROPEKV_KV_BF16, ROPEKV_KV_FP8_E4M3, ROPEKV_KV_FP8_TILE},
                     qf[] = {ROPEKV_Q_ABSORBED, ROPEKV_Q_ZERO_COPY, ROPEKV_Q_NONE, ROPEKV_Q_INPLACE};
    READ_LIST(s, "positions", &rk_index_enum, idx, 2, o->pos, o->n_pos);
    READ_LIST(s, "slots", &rk_index_enum, idx, 2, o->slot, o->n_slot);
    READ_LIST(s, "kv_dtypes", &rk_kv_enum, kv, given(s, "fp8_tile") ? 3 : 2, o->kv, o->n_kv);
    /* R = 0 leaves the layouts and q forms that hold or write only the rope part out (rk_geometry_refuses) */
    const int R0 = o->rope_dim == 0;
    READ_LIST(s, "kv_layouts", &rk_layout_enum, layouts, R0 ? 2 : 3, o->layouts, o->n_layout);
    for (int j = 0; j < o->n_layout; j++) {
        const char *rule = rk_geometry_refuses(o->rope_dim, ROPEKV_Q_NONE, o->layouts[j]);
        if (rule) return bad(s, "kv_layouts", "'%s': %s", rk_layout_name(o->layouts[j]), rule);
    }
    if (given(s, "kv_layouts"))
        for (int i = 0; i < o->n_kv; i++)
            for (int j = 0; j < o->n_layout; j++)
                if (o->kv[i] == ROPEKV_KV_FP8_TILE && o->layouts[j] == ROPEKV_KV_SPLIT)
                    return bad(s, "kv_layouts",
                               "'split' with kv dtype 'fp8_tile': a tile-scaled row is one row (flat or paged)");
    READ_LIST(s, "ops", &rk_op_enum, ops, 2, o->ops, o->n_ops);
    READ_LIST(s, "q_dtypes", &rk_qdtype_enum, qdt, 2, o->q_dtypes, o->n_qdt);
    static const int qf_whole[] = {ROPEKV_Q_ABSORBED, ROPEKV_Q_NONE};
    TRY(read_q_norm(s, o));
    /* R = 0 (no rope part) and a query norm (it needs the whole head): absorbed and none */
    if (R0 || o->q_norm.norm != RK_QN_NONE) READ_LIST(s, "q_forms", &rk_qform_enum, qf_whole, 2, o->q, o->n_q);
    else READ_LIST(s, "q_forms", &rk_qform_enum, qf, o->rope == RK_ROPE_NONE ? 3 : 4, o->q, o->n_q);
    for (int i = 0; i < o->n_q; i++) {
        const char *rule = rk_geometry_refuses(o->rope_dim, o->q[i], ROPEKV_KV_FLAT);
        if (rule) return bad(s, "q_forms", "'%s': %s", rk_qform_name(o->q[i]), rule);
    }
    for (int i = 0; i < o->n_q; i++) {
        if (o->q[i] == ROPEKV_Q_INPLACE && o->rope == RK_ROPE_NONE)
            return bad(s, "q_forms", "'inplace' with rope 'none' has nothing to do (q_pe stays as it is)");
        if (o->q_norm.norm != RK_QN_NONE)
            TRY(whole_head_form(s, o->q[i], "a q_norm", "the norm needs the whole query head"));
    }
    return ROPEKV_OK;
}

/* An fp8 policy table (`fp8` for the KV row, `q_fp8` for the query); every key optional. */
static int read_fp8(const scope *s, const char *key, rk_fp8_policy *o) {
    scope f, sat;
    int scale, no = 0;
    TRY(open_table(s, key, &f));
    TRY(check_keys(&f, fp8_keys));
    TRY(get_enum(&f, "scale", &rk_scale_enum, RK_SCALE_MUL_RECIP, &scale));
    o->scale = (rk_scale)scale;
    TRY(get_bool(&f, "rope_bf16_round", &no, &o->rope_bf16));
    TRY(get_string(&f, "matches", "", o->matches, sizeof o->matches));
    TRY(open_table(&f, "saturate", &sat));
    TRY(check_keys(&sat, sat_keys));
    TRY(get_sat(&sat, "ocp", RK_FP8_OCP, &o->sat_ocp));
    TRY(get_sat(&sat, "fnuz", RK_FP8_FNUZ, &o->sat_fnuz));
    lua_pop(s->L, 2);
    return ROPEKV_OK;
}

/* The `fp8_tile` table, read when kv_dtypes lists fp8_tile (every key optional; the defaults make
 * DeepSeek-V3.2's row for L = 512, R = 64): the tile, the scale's form, the bound amax maps to, where the
 * scales and the rope part sit in the row, and the spec's words on whose writer it matches and which readers
 * read it right (data: reported, never used). */
static int read_tile(const scope *s, rk_spec *o) {
    scope f, sat;
    int scale, def_tile = 128, L = o->kv_lora_rank, R = o->rope_dim;
    rk_tile_policy *t = &o->tile;
    int listed = 0;
    for (int i = 0; i < o->n_kv; i++) listed |= o->kv[i] == ROPEKV_KV_FP8_TILE;
    if (!listed) {
        memset(t, 0, sizeof *t);
        return given(s, "fp8_tile") ? bad(s, "fp8_tile", "kv_dtypes does not list 'fp8_tile'") : ROPEKV_OK;
    }
    TRY(open_table(s, "fp8_tile", &f));
    TRY(check_keys(&f, tile_keys));
    TRY(get_int(&f, "tile", &def_tile, 8, 256, &t->tile));
    const int lanes = t->tile / 8;
    if (t->tile % 8 != 0 || (lanes & (lanes - 1)) != 0)
        return bad(&f, "tile", "must be 8 times a power of two (a tile is 1 to 32 lanes of 8 values), got %d", t->tile);
    if (L % t->tile != 0) return bad(&f, "tile", "must divide kv_lora_rank (%d), got %d", L, t->tile);
    TRY(get_enum(&f, "scale", &rk_tile_scale_enum, RK_TILE_F32, &scale));
    t->scale = (rk_tile_scale)scale;
    TRY(get_string(&f, "matches", "", t->matches, sizeof t->matches));
    TRY(get_string(&f, "readers", "", t->readers, sizeof t->readers));
    TRY(open_table(&f, "saturate", &sat));
    TRY(check_keys(&sat, sat_keys));
    TRY(get_sat(&sat, "ocp", RK_FP8_OCP, &t->sat_ocp));
    TRY(get_sat(&sat, "fnuz", RK_FP8_FNUZ, &t->sat_fnuz));
    lua_pop(s->L, 1);
    const int n_scales = L / t->tile, def_rope = (L + 4 * n_scales + 15) / 16 * 16;
    TRY(get_int(&f, "scales_at", &L, 0, 1 << 20, &t->scales_at));
    TRY(get_int(&f, "rope_at", &def_rope, 0, 1 << 20, &t->rope_at));
    const int scales_end = t->scales_at + 4 * n_scales, rope_end = R > 0 ? t->rope_at + 2 * R : 0; /* R = 0: none */
    if (t->scales_at % 4 != 0)
        return bad(&f, "scales_at", "must be a multiple of 4 (float32 scales), got %d", t->scales_at);
    if (t->rope_at % 16 != 0)
        return bad(&f, "rope_at", "must be a multiple of 16 (16-byte vectors of bf16), got %d", t->rope_at);
    /* three parts: latent [0, L), scales [scales_at, scales_end), rope [rope_at, rope_end) */
    if (t->scales_at < L) return bad(&f, "scales_at", "%d overlaps the latent's fp8 bytes [0, %d)", t->scales_at, L);
    if (t->rope_at < L) return bad(&f, "rope_at", "%d overlaps the latent's fp8 bytes [0, %d)", t->rope_at, L);
    if (t->scales_at < rope_end && t->rope_at < scales_end)
        return bad(&f, "rope_at", "the rope part [%d, %d) overlaps the scales [%d, %d)", t->rope_at, rope_end,
                   t->scales_at, scales_end);
    t->row_bytes = scales_end > rope_end ? scales_end : rope_end;
    lua_pop(s->L, 1);
    return ROPEKV_OK;
}

/* `norms` (default {"none"}) and the `kv_norm` table, required when norms lists rms or rms_out (every key optional
 * but eps: DeepSeek-V3's and Kimi-K2's kv_a_layernorm have a bf16 weight and round twice). */
static int read_norm(const scope *s, rk_spec *o) {
    static const int def_norm[] = {ROPEKV_NORM_NONE, ROPEKV_NORM_RMS, ROPEKV_NORM_RMS_OUT};
    int fused = 0, w, r, over = RK_NO_LATENT;
    scope f;
    double eps = 0;
    memset(&o->norm, 0, sizeof o->norm);
    /* open when the spec describes the model's norm (kv_norm), else none; a norm over the whole head has no
     * rms_out (norm_out holds the normalized latent [Tkv, L] that prefill's up-projection reads: a V3 fact) */
    const int table = given(s, "kv_norm");
    if (table) {
        TRY(open_table(s, "kv_norm", &f));
        TRY(check_keys(&f, norm_keys));
        TRY(get_enum(&f, "over", &rk_norm_over_enum, RK_NO_LATENT, &over));
        lua_pop(s->L, 1);
    }
    READ_LIST(s, "norms", &rk_norm_enum, def_norm, !table ? 1 : over == RK_NO_HEAD ? 2 : 3, o->norms, o->n_norms);
    for (int i = 0; i < o->n_norms; i++) {
        fused |= o->norms[i] != ROPEKV_NORM_NONE;
        if (o->norms[i] == ROPEKV_NORM_RMS_OUT && over == RK_NO_HEAD)
            return bad(s, "norms", "'rms_out' with kv_norm.over 'head': norm_out holds a normalized latent only");
    }
    if (!fused) return table ? bad(s, "kv_norm", "norms lists neither 'rms' nor 'rms_out'") : ROPEKV_OK;
    if (over == RK_NO_HEAD && !row_fits(o->kv_lora_rank + o->rope_dim))
        return bad(s, "kv_norm",
                   "over 'head' needs kv_lora_rank + qk_rope_head_dim a power of two of at least 512 (its sum is a tree "
                   "over the head's 16-byte chunks, one wave's lanes or more), got %d",
                   o->kv_lora_rank + o->rope_dim);
    if (over == RK_NO_LATENT && !tree_fits(o->kv_lora_rank))
        return bad(s, "norms",
                   "the fused RMSNorm needs kv_lora_rank / 8 a power of two (its sum is a tree over "
                   "16-byte chunks), got kv_lora_rank %d",
                   o->kv_lora_rank);
    /* a norm over the head lays the lanes out row by row, which only the forms that write whole query rows have */
    for (int i = 0; over == RK_NO_HEAD && i < o->n_q; i++)
        TRY(whole_head_form(s, o->q[i], "kv_norm.over 'head'",
                            "the norm needs the lanes row by row, which only the whole query head's forms have"));
    /* the lanes row by row (a q_norm) leave a latent-only sum no wave of its own */
    if (over == RK_NO_LATENT && o->q_norm.norm != RK_QN_NONE && o->rope_dim > 0)
        return bad(s, "kv_norm", "a q_norm with a norm over the latent only: set over = 'head' or drop the kv norm");
    if (!table) return bad(s, "kv_norm", "required when norms lists 'rms' or 'rms_out' (at least its eps)");
    TRY(open_table(s, "kv_norm", &f));
    TRY(get_enum(&f, "weight", &rk_norm_weight_enum, RK_NW_BF16, &w));
    TRY(get_enum(&f, "rounding", &rk_norm_round_enum, RK_NR_TWICE, &r));
    TRY(get_eps(&f, &eps));
    TRY(get_string(&f, "matches", "", o->norm.matches, sizeof o->norm.matches));
    o->norm.weight = (rk_norm_weight)w;
    o->norm.round = (rk_norm_round)r;
    o->norm.over = (rk_norm_over)over;
    o->norm.eps = (float)eps;
    lua_pop(s->L, 1);
    return ROPEKV_OK;
}

static int read_targets(const scope *s, const rk_arch_table *archs, rk_spec *o) {
    lua_State *L = s->L;
    int n;
    if (!given(s, "targets")) { /* open: every row of the architecture table */
        if (archs == NULL || archs->n == 0) return bad(s, "targets", "no architecture table to take the rows from");
        if (archs->n > RK_MAX_TARGETS)
            return bad(s, "targets", "the architecture table has %d rows, a spec at most %d: list the targets",
                       archs->n, RK_MAX_TARGETS);
        for (int i = 0; i < archs->n; i++) copy_str(o->targets[i], sizeof o->targets[i], archs->a[i].name);
        o->n_targets = archs->n;
        return ROPEKV_OK;
    }
    TRY(open_list(s, "targets", RK_MAX_TARGETS, &n));
    int lv = lua_gettop(L);
    for (int i = 0; i < n; i++) {
        char key[32];
        snprintf(key, sizeof key, "targets[%d]", i + 1);
        push_elem(L, lv, i + 1);
        if (lua_type(L, -1) != LUA_TSTRING) return bad(s, key, "must be a string, got %s", luaL_typename(L, -1));
        size_t len;
        const char *name = lua_tolstring(L, -1, &len);
        char esc[64];
        if (strlen(name) != len) /* the part before the NUL may well be a known target */
            return bad_target(s, key, "'%s' holds a NUL byte", rk_escape(name, len, esc, sizeof esc));
        if (rk_arch_find(archs, name) == NULL) {
            char known[RK_MAX_ARCHS * (RK_NAME_MAX + 2) + 8];
            size_t k = 0;
            known[0] = '\0';
            for (int a = 0; archs != NULL && a < archs->n; a++)
                k += (size_t)snprintf(known + k, sizeof known - k, "%s%s", a ? ", " : "", archs->a[a].name);
            return bad_target(s, key, "unknown target '%s' (known: %s)", rk_escape(name, len, esc, sizeof esc),
                              k > 0 ? known : "none");
        }
        copy_str(o->targets[i], sizeof o->targets[i], name);
        lua_pop(L, 1);
        for (int j = 0; j < i; j++)
            if (strcmp(o->targets[j], o->targets[i]) == 0)
                return bad(s, key, "duplicate '%s' (also targets[%d])", o->targets[i], j + 1);
    }
    o->n_targets = n;
    lua_pop(L, 1);
    return ROPEKV_OK;
}

/* ---- cache records (gen/record.h) ------------------------------------------------------------------ */
static const char *const lib_keys[] = {"records", NULL};
static const char *const record_keys[] = {"name",       "like", "L",        "R",       "row_bytes", "split_at",
                                          "tail_bytes", "conv", "segments", "readers", "matches",   NULL};
static const char *const segment_keys[] = {"from",      "n",        "elem",       "at",
                                           "block",     "scale",    "rule",       "scale_at",
                                           "scales_at", "saturate", "outer",      "outer_at",
                                           "rope_bf16", "floor",    "block_conv", "scales_interleave",
                                           NULL};
static const char *const reader_keys[] = {"name", "scale", NULL};

/* Opens element i (1-based) of the list at lv, which must be a table, as sub ("<key>[i]."). */
static int open_elem(const scope *s, const char *key, int lv, int i, scope *sub) {
    char name[64];
    snprintf(name, sizeof name, "%s[%d]", key, i);
    if (lua_rawgeti(s->L, lv, i) != LUA_TTABLE) return bad(s, name, "must be a table, got %s", luaL_typename(s->L, -1));
    *sub = *s;
    sub->idx = lua_gettop(s->L);
    if (snprintf(sub->path, sizeof sub->path, "%s%s.", s->path, name) >= (int)sizeof sub->path)
        return bad(s, name, "nested too deeply");
    return ROPEKV_OK;
}

/* Pushes the list of tables s[key] (a table; absent: *n = 0, nothing pushed). */
static int open_table_list(const scope *s, const char *key, int max, int *n) {
    const int t = push_field(s, key);
    lua_pop(s->L, 1);
    *n = 0;
    if (t == LUA_TNIL) return ROPEKV_OK;
    if (t != LUA_TTABLE) return bad(s, key, "must be a list of tables, got %s", lua_typename(s->L, t));
    return open_list(s, key, max, n);
}

/* The bound of a segment's elements: `saturate = { ocp, fnuz }`; e4m3 values take exact e4m3 values (get_sat),
 * e2m1 and bf16 any number (rk_record_check bounds them). Absent: the base's (same element type), else the
 * element's largest finite value (0 for bf16). */
static int read_seg_sat(const scope *s, const rk_segment *base, rk_segment *o) {
    scope f;
    TRY(open_table(s, "saturate", &f));
    TRY(check_keys(&f, sat_keys));
    const int same = base != NULL && base->elem == o->elem;
    const double full = o->elem == RK_EL_E2M1 ? 6 : 0;
    double ocp = same ? base->sat_ocp : full, fnuz = same ? base->sat_fnuz : full;
    if (o->elem == RK_EL_E4M3 && (!same || given(&f, "ocp"))) {
        TRY(get_sat(&f, "ocp", RK_FP8_OCP, &o->sat_ocp));
    } else {
        TRY(get_number(&f, "ocp", &ocp, &ocp));
        o->sat_ocp = (float)ocp;
    }
    if (o->elem == RK_EL_E4M3 && (!same || given(&f, "fnuz"))) {
        TRY(get_sat(&f, "fnuz", RK_FP8_FNUZ, &o->sat_fnuz));
    } else {
        TRY(get_number(&f, "fnuz", &fnuz, &fnuz));
        o->sat_fnuz = (float)fnuz;
    }
    lua_pop(s->L, 1);
    return ROPEKV_OK;
}

/* One segment; every key defaults to base's (NULL: from, n, elem and at are required). */
static int read_segment(const scope *s, const rk_segment *base, rk_segment *o) {
    const rk_segment none = {0};
    const rk_segment *b = base != NULL ? base : &none;
    int v;
    TRY(check_keys(s, segment_keys));
    TRY(get_int(s, "from", base ? &b->from : NULL, 0, 1 << 16, &o->from));
    TRY(get_int(s, "n", base ? &b->n : NULL, 0, 1 << 16, &o->n));
    TRY(get_enum(s, "elem", &rk_elem_enum, base ? (int)b->elem : -1, &v));
    o->elem = (rk_elem)v;
    TRY(get_int(s, "at", base ? &b->at : NULL, 0, 1 << 16, &o->at));
    TRY(get_int(s, "block", &b->block, 0, 1 << 16, &o->block));
    TRY(get_enum(s, "scale", &rk_scale_type_enum, (int)b->scale, &v));
    o->scale = (rk_scale_type)v;
    const int def_rule = base != NULL ? (int)b->rule : o->scale == RK_ST_UE8M0 ? RK_SR_POW2_UP : RK_SR_EXACT;
    TRY(get_enum(s, "rule", &rk_scale_rule_enum, def_rule, &v));
    o->rule = (rk_scale_rule)v;
    TRY(get_enum(s, "scale_at", &rk_scale_at_enum, (int)b->scale_at, &v));
    o->scale_at = (rk_scale_at)v;
    const int need_scales = base == NULL && o->scale != RK_ST_NONE;
    TRY(get_int(s, "scales_at", need_scales ? NULL : &b->scales_at, 0, 1 << 16, &o->scales_at));
    TRY(read_seg_sat(s, base, o));
    TRY(get_enum(s, "outer", &rk_outer_enum, (int)b->outer, &v));
    o->outer = (rk_outer)v;
    const int need_outer = base == NULL && o->outer == RK_OUT_TOKEN;
    TRY(get_int(s, "outer_at", need_outer ? NULL : &b->outer_at, 0, 1 << 16, &o->outer_at));
    const double def_floor = b->floor;
    double floor;
    TRY(get_number(s, "floor", &def_floor, &floor));
    o->floor = (float)floor; /* rk_record_check bounds it */
    TRY(get_enum(s, "block_conv", &rk_block_conv_enum, (int)b->block_conv, &v));
    o->block_conv = (rk_block_conv)v;
    TRY(get_int(s, "scales_interleave", &b->interleave, 0, 1 << 16, &o->interleave));
    return get_bool(s, "rope_bf16", &b->rope_bf16, &o->rope_bf16);
}

/* One record. Its base: `like` (a record of lib), else none (name, row_bytes and segments required; L and R
 * default to def_L and def_R when those are >= 0). Over a base, every key given replaces the base's, but
 * `segments`, whose entries are read over the base's entries one by one. */
static int read_record(const scope *s, const rk_record_lib *lib, int def_L, int def_R, rk_record *o) {
    lua_State *L = s->L;
    const rk_record *base = NULL;
    int n, v;
    TRY(check_keys(s, record_keys));
    memset(o, 0, sizeof *o);
    if (given(s, "like")) {
        char like[sizeof o->name];
        TRY(get_string(s, "like", NULL, like, sizeof like));
        base = rk_record_find(lib, like);
        if (base == NULL) {
            char known[RK_RECORDS_MAX * 34 + 8], esc[64];
            size_t k = 0;
            known[0] = '\0';
            for (int i = 0; lib != NULL && i < lib->n; i++)
                k += (size_t)snprintf(known + k, sizeof known - k, "%s%s", i ? ", " : "", lib->r[i].name);
            return bad(s, "like", "unknown record '%s' (known: %s)", rk_printable(like, esc, sizeof esc),
                       k > 0 ? known : "none");
        }
        *o = *base;
    }
    if (base == NULL || given(s, "name")) TRY(get_ident(s, "name", "_", o->name, sizeof o->name));
    const int dl = base ? base->L : def_L, dr = base ? base->R : def_R;
    TRY(get_int(s, "L", dl >= 0 ? &dl : NULL, 0, 8192, &o->L));
    TRY(get_int(s, "R", dr >= 0 ? &dr : NULL, 0, 1024, &o->R));
    TRY(get_int(s, "row_bytes", base ? &base->row_bytes : NULL, 1, 1 << 16, &o->row_bytes));
    const int zero = 0;
    TRY(get_int(s, "split_at", base ? &base->split_at : &zero, 0, 1 << 16, &o->split_at));
    TRY(get_int(s, "tail_bytes", base ? &base->tail_bytes : &zero, 0, 1 << 16, &o->tail_bytes));
    TRY(get_enum(s, "conv", &rk_scale_enum, base ? base->conv : RK_SCALE_NONE, &v));
    o->conv = v;
    TRY(open_table_list(s, "segments", RK_RECORD_SEGMENTS, &n));
    if (n == 0 && base == NULL) return bad(s, "segments", "required (a list of tables)");
    if (n > 0) {
        const int lv = lua_gettop(L);
        for (int i = 0; i < n; i++) {
            scope seg;
            TRY(open_elem(s, "segments", lv, i + 1, &seg));
            TRY(read_segment(&seg, base != NULL && i < base->n_seg ? &base->seg[i] : NULL, &o->seg[i]));
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
        if (base == NULL || n > base->n_seg) o->n_seg = n;
    }
    TRY(open_table_list(s, "readers", RK_RECORD_READERS, &n));
    if (n > 0) {
        const int lv = lua_gettop(L);
        memset(o->readers, 0, sizeof o->readers);
        for (int i = 0; i < n; i++) {
            scope rd;
            TRY(open_elem(s, "readers", lv, i + 1, &rd));
            TRY(check_keys(&rd, reader_keys));
            TRY(get_ident(&rd, "name", "_", o->readers[i].name, sizeof o->readers[i].name));
            TRY(get_enum(&rd, "scale", &rk_read_scale_enum, RK_RS_EXACT, &v));
            o->readers[i].scale = (rk_read_scale)v;
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
        o->n_readers = n;
    }
    return get_string(s, "matches", base ? base->matches : "", o->matches, sizeof o->matches);
}

/* A records library: `records`, a list of records, each checked, names distinct. */
static int read_lib(const scope *s, rk_record_lib *lib) {
    int n;
    TRY(check_keys(s, lib_keys));
    TRY(open_table_list(s, "records", RK_RECORDS_MAX, &n));
    if (n == 0) return bad(s, "records", "required (a list of tables)");
    const int lv = lua_gettop(s->L);
    lib->n = 0;
    for (int i = 0; i < n; i++) {
        scope row;
        rk_record r;
        TRY(open_elem(s, "records", lv, i + 1, &row));
        TRY(read_record(&row, lib, -1, -1, &r));
        TRY(rk_record_check(&r, s->file, s->err));
        if (rk_record_find(lib, r.name) != NULL) return bad(&row, "name", "duplicate record '%s'", r.name);
        lib->r[lib->n++] = r;
        lua_pop(s->L, 1);
    }
    lua_pop(s->L, 1);
    return ROPEKV_OK;
}

typedef struct job job;
static const rk_record_lib *job_lib(job *j, rk_err *err, int *rc);

/* A model spec's `records`: library names, tables of their own, or { like = name, ... } (absent: none). Each must
 * be for the spec's L and R; names distinct. */
static int read_records(const scope *s, job *j, rk_spec *o) {
    lua_State *L = s->L;
    int n;
    o->n_records = 0;
    if (!given(s, "records")) return ROPEKV_OK;
    TRY(open_list(s, "records", RK_SPEC_RECORDS, &n));
    const int lv = lua_gettop(L);
    for (int i = 0; i < n; i++) {
        char key[32];
        rk_record *r = &o->records[i];
        snprintf(key, sizeof key, "records[%d]", i + 1);
        push_elem(L, lv, i + 1);
        const int t = lua_type(L, -1);
        if (t == LUA_TSTRING) {
            size_t len;
            const char *name = lua_tolstring(L, -1, &len);
            char esc[64];
            int rc = ROPEKV_OK;
            const rk_record_lib *lib = job_lib(j, s->err, &rc);
            if (lib == NULL) return rc;
            const rk_record *found = strlen(name) == len ? rk_record_find(lib, name) : NULL;
            if (found == NULL) {
                char known[RK_RECORDS_MAX * 34 + 8];
                size_t k = 0;
                known[0] = '\0';
                for (int x = 0; x < lib->n; x++)
                    k += (size_t)snprintf(known + k, sizeof known - k, "%s%s", x ? ", " : "", lib->r[x].name);
                return bad(s, key, "unknown record '%s' (known: %s)", rk_escape(name, len, esc, sizeof esc),
                           k > 0 ? known : "none");
            }
            *r = *found;
        } else if (t == LUA_TTABLE) {
            scope rec = *s;
            rec.idx = lua_gettop(L);
            if (snprintf(rec.path, sizeof rec.path, "%s%s.", s->path, key) >= (int)sizeof rec.path)
                return bad(s, key, "nested too deeply");
            const rk_record_lib *lib = NULL;
            if (given(&rec, "like")) {
                int rc = ROPEKV_OK;
                lib = job_lib(j, s->err, &rc);
                if (lib == NULL) return rc;
            }
            TRY(read_record(&rec, lib, o->kv_lora_rank, o->rope_dim, r));
        } else {
            return bad(s, key, "must be a record's name or a table, got %s", luaL_typename(L, -1));
        }
        lua_pop(L, 1);
        if (r->L != o->kv_lora_rank || r->R != o->rope_dim)
            return bad(s, key, "record '%s' is for L = %d, R = %d; the spec has kv_lora_rank %d, qk_rope_head_dim %d",
                       r->name, r->L, r->R, o->kv_lora_rank, o->rope_dim);
        TRY(rk_record_check(r, s->file, s->err));
        for (int x = 0; x < i; x++)
            if (strcmp(o->records[x].name, r->name) == 0)
                return bad(s, key, "duplicate record '%s' (also records[%d])", r->name, x + 1);
        /* a record named as a kv dtype is that dtype's row (rk_spec_rows): it must be the row the tables make */
        for (int k = 0; k < rk_kv_enum.n; k++) {
            rk_record row;
            if (strcmp(r->name, rk_kv_enum.v[k].name) != 0) continue;
            if (rk_kv_enum.v[k].value == ROPEKV_KV_FP8_TILE && !given(s, "fp8_tile"))
                return bad(s, key, "record '%s' is named as the kv dtype, but the spec has no fp8_tile table", r->name);
            rk_record_of_kv(o, (ropekv_kv_dtype)rk_kv_enum.v[k].value, &row);
            if (rk_record_digest(&row) != rk_record_digest(r))
                return bad(s, key,
                           "record '%s' is named as the kv dtype but differs from the row the spec's tables make "
                           "(rename it)",
                           r->name);
        }
        o->n_records = i + 1;
    }
    lua_pop(L, 1);
    return ROPEKV_OK;
}

static int read_spec(const scope *s, job *j, const rk_arch_table *archs, rk_spec *o) {
    int v, no = 0;
    TRY(check_keys(s, spec_keys));
    TRY(get_ident(s, "name", "_", o->name, sizeof o->name));
    TRY(get_string(s, "description", "", o->description, sizeof o->description));
    TRY(read_dims(s, o));
    TRY(read_rope(s, o));
    TRY(read_lists(s, o));
    TRY(read_fp8(s, "fp8", &o->fp8));
    TRY(read_fp8(s, "q_fp8", &o->q_fp8));
    TRY(read_tile(s, o));
    TRY(read_norm(s, o));
    scope rd;
    TRY(open_table(s, "read", &rd));
    TRY(check_keys(&rd, read_keys));
    TRY(get_enum(&rd, "negative_slot", &rk_read_neg_enum, RK_READ_ZERO, &v));
    o->read_neg = (rk_read_neg)v;
    lua_pop(s->L, 1);
    TRY(get_enum(s, "negative_slot", &rk_neg_enum, RK_NEG_SKIP_KV, &v));
    o->negative_slot = (rk_neg)v;
    TRY(get_bool(s, "sanitize", &no, &o->sanitize));
    TRY(read_targets(s, archs, o));
    return read_records(s, j, o);
}

/* ---- driver: state, chunk, protected conversion ------------------------------------------------------ */
struct job {
    const char *file;
    rk_err *err;
    const rk_arch_table *archs; /* model specs: the known targets */
    rk_arch_table *archs_out;   /* one of archs_out / spec_out / lib_out is set */
    rk_spec *spec_out;
    rk_record_lib *lib_out;
    const rk_record_lib *lib; /* model specs: the library their `records` names come from (NULL: the built-in) */
    rk_record_lib *own_lib;   /* the built-in library, read on first use (freed by the loader) */
    int rc;
};

/* The job's records library: its own, or the built-in one read on first use; NULL with *rc set when that fails. */
static const rk_record_lib *job_lib(job *j, rk_err *err, int *rc) {
    if (j->lib != NULL) return j->lib;
    if (j->own_lib == NULL) {
        rk_record_lib *lib = calloc(1, sizeof *lib);
        if (lib == NULL) {
            *rc = rk_fail(err, ROPEKV_ERR_NOMEM, "%s: out of memory (the records library)", j->file);
            return NULL;
        }
        *rc = rk_records_builtin(lib, err);
        if (*rc != ROPEKV_OK) {
            free(lib);
            return NULL;
        }
        j->own_lib = lib;
    }
    return j->own_lib;
}

/* Protected: (job, result) -> converts the result into the job's output. */
static int convert(lua_State *L) {
    job *j = lua_touserdata(L, 1);
    luaL_checkstack(L, 32, "spec conversion");
    scope s = {L, j->file, j->err, 2, ""};
    if (lua_type(L, 2) != LUA_TTABLE)
        j->rc = rk_fail(j->err, ROPEKV_ERR_SPEC_INVALID, "%s: the chunk must return a table, got %s", j->file,
                        luaL_typename(L, 2));
    else if (j->archs_out != NULL) j->rc = read_archs(&s, j->archs_out);
    else if (j->lib_out != NULL) j->rc = read_lib(&s, j->lib_out);
    else j->rc = read_spec(&s, j, j->archs, j->spec_out);
    return 0;
}

static int run_job(const char *text, size_t len, job *j) {
    sandbox sb = {0};
    if (text == NULL) return rk_fail(j->err, ROPEKV_ERR_IO, "%s: no text", j->file);
    if (len > RK_SPEC_TEXT_MAX)
        return rk_fail(j->err, ROPEKV_ERR_SPEC_LIMIT,
                       "%s: %zu bytes, larger than the %zu bytes (1 MiB) a spec may have", j->file, len,
                       RK_SPEC_TEXT_MAX);
    lua_State *L = lua_newstate(sb_alloc, &sb);
    if (L == NULL) return rk_fail(j->err, ROPEKV_ERR_NOMEM, "%s: cannot create a Lua state", j->file);
    int rc = ROPEKV_OK;
    lua_pushcfunction(L, sb_open);
    int st = lua_pcall(L, 0, 1, 0);
    if (st != LUA_OK) rc = run_fail(L, &sb, st, j->file, j->err);
    if (rc == ROPEKV_OK) rc = run_chunk(L, &sb, lua_gettop(L), j->file, text, len, j->err);
    if (rc == ROPEKV_OK) {
        int result = lua_gettop(L);
        lua_pushcfunction(L, convert);
        lua_pushlightuserdata(L, j);
        lua_pushvalue(L, result);
        j->rc = ROPEKV_OK;
        st = lua_pcall(L, 2, 0, 0);
        rc = st != LUA_OK ? run_fail(L, &sb, st, j->file, j->err) : j->rc;
    }
    lua_close(L);
    return rc;
}

int rk_archs_load(const char *file, const char *text, size_t len, rk_arch_table *out, rk_err *err) {
    rk_arch_table *t = calloc(1, sizeof *t);
    char shown[4400]; /* the name messages give the file */
    file = file ? rk_printable(file, shown, sizeof shown) : "(archs)";
    if (t == NULL) return rk_fail(err, ROPEKV_ERR_NOMEM, "%s: out of memory", file);
    job j = {file, err, NULL, t, NULL, NULL, NULL, NULL, ROPEKV_OK};
    int rc = run_job(text, len, &j);
    if (rc == ROPEKV_OK && out != NULL) *out = *t;
    free(t);
    return rc;
}

int rk_spec_load_lib(const char *file, const char *text, size_t len, const rk_arch_table *archs,
                     const rk_record_lib *lib, rk_spec *out, rk_err *err) {
    rk_spec s;
    char shown[4400]; /* the name messages give the file */
    file = file ? rk_printable(file, shown, sizeof shown) : "(spec)";
    memset(&s, 0, sizeof s);
    copy_str(s.file, sizeof s.file, file);
    job j = {file, err, archs, NULL, &s, NULL, lib, NULL, ROPEKV_OK};
    int rc = run_job(text, len, &j);
    if (rc == ROPEKV_OK && out != NULL) *out = s;
    free(j.own_lib);
    return rc;
}

int rk_spec_load(const char *file, const char *text, size_t len, const rk_arch_table *archs, rk_spec *out,
                 rk_err *err) {
    return rk_spec_load_lib(file, text, len, archs, NULL, out, err);
}

int rk_records_load(const char *file, const char *text, size_t len, rk_record_lib *out, rk_err *err) {
    char shown[4400];
    file = file ? rk_printable(file, shown, sizeof shown) : "(records)";
    rk_record_lib *lib = calloc(1, sizeof *lib);
    if (lib == NULL) return rk_fail(err, ROPEKV_ERR_NOMEM, "%s: out of memory", file);
    job j = {file, err, NULL, NULL, NULL, lib, NULL, NULL, ROPEKV_OK};
    int rc = run_job(text, len, &j);
    if (rc == ROPEKV_OK && out != NULL) *out = *lib;
    free(lib);
    return rc;
}

int rk_records_builtin(rk_record_lib *out, rk_err *err) {
    size_t len;
    const char *text = rk_embedded("records.lua", &len);
    if (text == NULL) return rk_fail(err, ROPEKV_ERR_IO, "specs/records.lua is not embedded in this build");
    return rk_records_load("specs/records.lua", text, len, out, err);
}
