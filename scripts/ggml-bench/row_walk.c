// row_walk.c: does the order in which a GEMV walks row-major weights
// change how fast it streams them from DRAM? (issue 15; docs/BENCHMARKS.md,
// session 28). A stand-alone experiment, not part of the build or of CI.
//
// A Q8_0-shaped matrix (34-byte blocks: an fp16 scale, then 32 int8) of
// N rows x K columns, cycled over copies totalling > 1.6 GB (cold), is
// multiplied by one int8 activation row (AVX-512 VNNI `vpdpbusd`, AVX2
// reductions), the rows split in equal parts over the threads, two ways:
//   8-row walk: eight rows at a time, block b of each of the eight before
//               block b + 1 (how this project's row-major kernels walk:
//               eight streams per thread, a row's bytes apart), each row
//               prefetched PF bytes ahead (env PF, default 512);
//   1-row walk: one row at a time, all its blocks (how ggml's vec_dot
//               walks: consecutive rows are contiguous, so one stream per
//               thread), prefetched PF1 bytes ahead (env PF1, default 4096);
// and a plain sum over the same bytes (the read rate). The three
// alternate pass by pass, each keeps its best pass; then the two walks
// hot (one copy over and over). The products are not checked: only the
// walk is measured.
//
//   cc -O2 -march=native -pthread -o row_walk scripts/ggml-bench/row_walk.c
//   ./row_walk N K THREADS        e.g. ./row_walk 2048 8192 2
//
// Needs AVX-512 VNNI (VL), AVX2 and F16C.
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define BLOCK 34 /* bytes of a Q8_0 block */
#define MAX_THREADS 64

enum { WALK8, WALK1, SUM };

static int N = 2048, K = 8192, NB, COPIES, THREADS = 2;
static int PF = 512, PF1 = 4096;
static size_t MAT; /* bytes of one copy */
static uint8_t *W;
static int8_t *A;
static float *Y;
static volatile uint64_t SINK;

typedef struct {
    int mode, r0, r1;
    const uint8_t *m;
} Job;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static inline uint16_t fp16_at(const uint8_t *p) { return *(const uint16_t *)p; }

/* Rows r0 .. r0 + 8: block b of every row, then block b + 1. */
static void walk8(const uint8_t *m, int r0) {
    const __m256i bias = _mm256_set1_epi8(-128);
    const size_t rb = (size_t)NB * BLOCK;
    const uint8_t *p0 = m + (size_t)r0 * rb;
    __m256 acc = _mm256_setzero_ps();
    for (int b = 0; b < NB; b++) {
        const __m256i av = _mm256_loadu_si256((const __m256i *)(A + b * 32));
        const uint8_t *pb = p0 + (size_t)b * BLOCK;
        __m256i v[8];
        for (int r = 0; r < 8; r++) {
            const uint8_t *p = pb + (size_t)r * rb;
            _mm_prefetch((const char *)p + PF, _MM_HINT_T0);
            const __m256i w = _mm256_loadu_si256((const __m256i *)(p + 2));
            v[r] = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_xor_si256(w, bias), av);
        }
        /* Lane r of s: the sum of v[r]'s lanes. */
        const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]), h23 = _mm256_hadd_epi32(v[2], v[3]);
        const __m256i h45 = _mm256_hadd_epi32(v[4], v[5]), h67 = _mm256_hadd_epi32(v[6], v[7]);
        const __m256i lo = _mm256_hadd_epi32(h01, h23), hi = _mm256_hadd_epi32(h45, h67);
        const __m256i s = _mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x20),
                                           _mm256_permute2x128_si256(lo, hi, 0x31));
        const __m128i d = _mm_set_epi16(fp16_at(pb + 7 * rb), fp16_at(pb + 6 * rb),
                                        fp16_at(pb + 5 * rb), fp16_at(pb + 4 * rb),
                                        fp16_at(pb + 3 * rb), fp16_at(pb + 2 * rb),
                                        fp16_at(pb + rb), fp16_at(pb));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_cvtph_ps(d), acc);
    }
    _mm256_storeu_ps(Y + r0, acc);
}

/* Row r alone, four blocks per step (four accumulators). */
static void walk1(const uint8_t *m, int r) {
    const __m256i bias = _mm256_set1_epi8(-128);
    const uint8_t *p = m + (size_t)r * NB * BLOCK;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    for (int b = 0; b + 4 <= NB; b += 4, p += 4 * BLOCK) {
        _mm_prefetch((const char *)p + PF1, _MM_HINT_T0);
        _mm_prefetch((const char *)p + PF1 + 64, _MM_HINT_T0);
        for (int u = 0; u < 4; u++) {
            const uint8_t *q = p + u * BLOCK;
            const __m256i av = _mm256_loadu_si256((const __m256i *)(A + (b + u) * 32));
            const __m256i w = _mm256_loadu_si256((const __m256i *)(q + 2));
            const __m256i v =
                _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_xor_si256(w, bias), av);
            const __m256 d = _mm256_set1_ps(_cvtsh_ss(fp16_at(q)));
            acc[u] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), d, acc[u]);
        }
    }
    const __m256 t = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    x = _mm_hadd_ps(x, x);
    x = _mm_hadd_ps(x, x);
    Y[r] = _mm_cvtss_f32(x);
}

/* The read rate: every byte of rows r0 .. r1 (whole 64-byte lines). */
static void sum(const uint8_t *m, int r0, int r1) {
    const size_t rb = (size_t)NB * BLOCK;
    const size_t from = (size_t)r0 * rb / 64 * 64, to = (size_t)r1 * rb / 64 * 64;
    __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256();
    for (size_t i = from; i + 64 <= to; i += 64) {
        a = _mm256_add_epi64(a, _mm256_load_si256((const __m256i *)(m + i)));
        b = _mm256_add_epi64(b, _mm256_load_si256((const __m256i *)(m + i + 32)));
    }
    SINK += (uint64_t)_mm256_extract_epi64(_mm256_add_epi64(a, b), 0);
}

static void *work(void *arg) {
    const Job *j = arg;
    switch (j->mode) {
    case WALK8:
        for (int r = j->r0; r < j->r1; r += 8) walk8(j->m, r);
        break;
    case WALK1:
        for (int r = j->r0; r < j->r1; r++) walk1(j->m, r);
        break;
    default:
        sum(j->m, j->r0, j->r1);
    }
    return NULL;
}

/* One pass over copy c; seconds. Thread parts are whole groups of 8 rows. */
static double pass(int c, int mode) {
    pthread_t t[MAX_THREADS];
    Job j[MAX_THREADS];
    const int groups = N / 8;
    const double t0 = now();
    for (int i = 0; i < THREADS; i++) {
        j[i] = (Job){mode, 8 * (groups * i / THREADS), 8 * (groups * (i + 1) / THREADS),
                     W + (size_t)c * MAT};
        pthread_create(&t[i], NULL, work, &j[i]);
    }
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    return now() - t0;
}

int main(int argc, char **argv) {
    if (argc > 2) {
        N = atoi(argv[1]);
        K = atoi(argv[2]);
    }
    if (argc > 3) THREADS = atoi(argv[3]);
    if (getenv("PF")) PF = atoi(getenv("PF"));
    if (getenv("PF1")) PF1 = atoi(getenv("PF1"));
    if (N < 8 || N % 8 || K < 128 || K % 128 || THREADS < 1 || THREADS > MAX_THREADS) {
        fprintf(stderr, "usage: row_walk N K THREADS (N a multiple of 8, K of 128, 1..%d threads)\n",
                MAX_THREADS);
        return 2;
    }
    NB = K / 32;
    MAT = (size_t)N * NB * BLOCK;
    COPIES = (int)((1600ull << 20) / MAT) + 1;
    W = aligned_alloc(64, (MAT * COPIES + 63) / 64 * 64);
    A = aligned_alloc(64, K);
    Y = malloc(sizeof(float) * N);
    if (!W || !A || !Y) {
        fprintf(stderr, "row_walk: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < MAT * COPIES; i++) W[i] = (uint8_t)(i * 2654435761u >> 13);
    for (size_t i = 0; i < MAT * COPIES; i += BLOCK) *(uint16_t *)(W + i) = 0x3c00; /* 1.0 */
    for (int i = 0; i < K; i++) A[i] = (int8_t)(i * 7);

    double best[3] = {1e9, 1e9, 1e9};
    int c = 0;
    for (int it = 0; it < 12; it++)
        for (int mode = WALK8; mode <= SUM; mode++) {
            const double s = pass(c, mode);
            c = (c + 1) % COPIES;
            if (s < best[mode]) best[mode] = s;
        }
    printf("%dx%d %dt cold: 8-row walk %.1f GB/s, 1-row walk %.1f GB/s (%.2fx), read %.1f GB/s\n",
           N, K, THREADS, MAT / best[WALK8] / 1e9, MAT / best[WALK1] / 1e9,
           best[WALK8] / best[WALK1], MAT / best[SUM] / 1e9);
    best[WALK8] = best[WALK1] = 1e9;
    for (int it = 0; it < 20; it++)
        for (int mode = WALK8; mode <= WALK1; mode++) {
            const double s = pass(0, mode);
            if (s < best[mode]) best[mode] = s;
        }
    printf("%dx%d %dt hot:  8-row walk %.1f GB/s, 1-row walk %.1f GB/s\n", N, K, THREADS,
           MAT / best[WALK8] / 1e9, MAT / best[WALK1] / 1e9);
    return 0;
}
