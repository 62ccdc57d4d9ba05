// rcp.approx.ftz.f32 against the IEEE reciprocal on every positive finite e4m3 (OCP) value, and on all f32 in [1, 2)
#include <cstdio>
#include <cstdint>
#include <cstring>
__device__ float rcp_approx(float x) { float y; asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
__global__ void k(const float *d, float *a, float *r, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { a[i] = rcp_approx(d[i]); r[i] = __frcp_rn(d[i]); }
}
__global__ void mant(unsigned long long *bad, unsigned *first) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (1u << 23)) return;
    float x = __uint_as_float(0x3f800000u | i);
    if (__float_as_uint(rcp_approx(x)) != __float_as_uint(__frcp_rn(x))) { atomicAdd(bad, 1ull); atomicMin(first, i); }
}
int main() {
    float h[127]; int n = 0;
    for (int c = 1; c < 0x7f; c++) { int e = c >> 3, m = c & 7; h[n++] = e == 0 ? m / 8.0f * 0.015625f : (1 + m / 8.0f) * ldexpf(1, e - 7); }
    float *d, *a, *r; cudaMalloc(&d, 4 * n); cudaMalloc(&a, 4 * n); cudaMalloc(&r, 4 * n);
    cudaMemcpy(d, h, 4 * n, cudaMemcpyHostToDevice);
    k<<<1, 128>>>(d, a, r, n);
    float ha[127], hr[127]; cudaMemcpy(ha, a, 4 * n, cudaMemcpyDeviceToHost); cudaMemcpy(hr, r, 4 * n, cudaMemcpyDeviceToHost);
    int diff = 0;
    for (int i = 0; i < n; i++) if (memcmp(&ha[i], &hr[i], 4)) { diff++; if (diff < 10) printf("e4m3 %g: approx %a rn %a\n", h[i], ha[i], hr[i]); }
    printf("e4m3 values: %d of %d differ\n", diff, n);
    unsigned long long *bad; unsigned *first; cudaMalloc(&bad, 8); cudaMalloc(&first, 4);
    cudaMemset(bad, 0, 8); cudaMemset(first, 0xff, 4);
    mant<<<(1 << 23) / 256, 256>>>(bad, first);
    unsigned long long hb; unsigned hf; cudaMemcpy(&hb, bad, 8, cudaMemcpyDeviceToHost); cudaMemcpy(&hf, first, 4, cudaMemcpyDeviceToHost);
    printf("f32 in [1,2): %llu of 8388608 differ (first mantissa 0x%x)\n", hb, hf);
    return 0;
}
