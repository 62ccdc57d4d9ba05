/* SHA-256 as specified in FIPS 180-4. Plain C, no allocation, no global state. */
#include <string.h>

#include "cache.h"

static const uint32_t K[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u, 0xab1c5ed5u,
    0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu, 0x9bdc06a7u, 0xc19bf174u,
    0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu, 0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau,
    0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u, 0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u,
    0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu, 0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u,
    0xa2bfe8a1u, 0xa81a664bu, 0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u,
    0x19a4c116u, 0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u, 0xc67178f2u,
};

/* Macros rather than functions: this also stays fast in unoptimized (debug) builds. */
#define ROTR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))
#define BSIG0(x) (ROTR(x, 2) ^ ROTR(x, 13) ^ ROTR(x, 22))
#define BSIG1(x) (ROTR(x, 6) ^ ROTR(x, 11) ^ ROTR(x, 25))
#define SSIG0(x) (ROTR(x, 7) ^ ROTR(x, 18) ^ ((x) >> 3))
#define SSIG1(x) (ROTR(x, 17) ^ ROTR(x, 19) ^ ((x) >> 10))
#define CH(x, y, z) (((x) & (y)) ^ (~(x) & (z)))
#define MAJ(x, y, z) (((x) & (y)) ^ ((x) & (z)) ^ ((y) & (z)))

/* Processes 64-byte blocks. */
static void compress(uint32_t h[8], const unsigned char *blk, size_t blocks) {
    uint32_t w[64];
    for (; blocks; blocks--, blk += 64) {
        for (int i = 0; i < 16; i++)
            w[i] = (uint32_t)blk[4 * i] << 24 | (uint32_t)blk[4 * i + 1] << 16 | (uint32_t)blk[4 * i + 2] << 8 |
                   (uint32_t)blk[4 * i + 3];
        for (int i = 16; i < 64; i++) w[i] = w[i - 16] + SSIG0(w[i - 15]) + w[i - 7] + SSIG1(w[i - 2]);
        uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
        for (int i = 0; i < 64; i++) {
            uint32_t t1 = k + BSIG1(e) + CH(e, f, g) + K[i] + w[i];
            uint32_t t2 = BSIG0(a) + MAJ(a, b, c);
            k = g;
            g = f;
            f = e;
            e = d + t1;
            d = c;
            c = b;
            b = a;
            a = t1 + t2;
        }
        h[0] += a;
        h[1] += b;
        h[2] += c;
        h[3] += d;
        h[4] += e;
        h[5] += f;
        h[6] += g;
        h[7] += k;
    }
}

void rk_sha256_init(rk_sha256 *s) {
    static const uint32_t iv[8] = {0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
                                   0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u};
    memcpy(s->h, iv, sizeof iv);
    s->n = 0;
    s->fill = 0;
}

void rk_sha256_update(rk_sha256 *s, const void *p, size_t n) {
    const unsigned char *in = p;
    if (n == 0) return;
    s->n += n;
    if (s->fill) {
        size_t take = 64 - s->fill < n ? 64 - s->fill : n;
        memcpy(s->buf + s->fill, in, take);
        s->fill += take;
        in += take;
        n -= take;
        if (s->fill < 64) return;
        compress(s->h, s->buf, 1);
        s->fill = 0;
    }
    if (n >= 64) {
        compress(s->h, in, n / 64);
        in += n / 64 * 64;
        n %= 64;
    }
    if (n) {
        memcpy(s->buf, in, n);
        s->fill = n;
    }
}

void rk_sha256_final(rk_sha256 *s, unsigned char out[32]) {
    uint64_t bits = s->n * 8u;
    s->buf[s->fill++] = 0x80;
    if (s->fill > 56) {
        memset(s->buf + s->fill, 0, 64 - s->fill);
        compress(s->h, s->buf, 1);
        s->fill = 0;
    }
    memset(s->buf + s->fill, 0, 56 - s->fill);
    for (int i = 0; i < 8; i++) s->buf[56 + i] = (unsigned char)(bits >> (56 - 8 * i));
    compress(s->h, s->buf, 1);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (unsigned char)(s->h[i] >> 24);
        out[4 * i + 1] = (unsigned char)(s->h[i] >> 16);
        out[4 * i + 2] = (unsigned char)(s->h[i] >> 8);
        out[4 * i + 3] = (unsigned char)s->h[i];
    }
    memset(s, 0, sizeof *s);
}

void rk_sha256_field(rk_sha256 *s, const void *p, size_t n) {
    unsigned char len[8];
    uint64_t v = n;
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)(v >> (8 * i));
    rk_sha256_update(s, len, sizeof len);
    rk_sha256_update(s, p, n);
}

void rk_sha256_hex(const unsigned char d[32], char out[65]) {
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = hex[d[i] >> 4];
        out[2 * i + 1] = hex[d[i] & 15];
    }
    out[64] = '\0';
}
