// ggml's own mul_mat timed on the shapes and types of
// crates/kernels/benches/gemv.rs, so scripts/bench-gemv-vs-ggml can print
// ours / ggml per cell. Written for this project against the public ggml
// headers (ggml.h, ggml-cpu.h) of the llama.cpp tree scripts/llama-cpp
// builds; it links libggml-base / libggml-cpu from that build.
//
// What is timed: one graph holding one ggml_mul_mat(W, x), W a [K x N]
// weight tensor of the given type in ggml's plain row-major layout (the
// tensors live in no backend buffer, so the CPU backend's repack "extra
// buffer" path is never taken: this is ggml's plain vec_dot kernel), x an
// F32 [K x M] activation that ggml quantizes to the type's vec_dot type
// inside the op, as llama.cpp does. ggml_graph_compute runs it on a
// persistent ggml threadpool of n threads.
//
// Measured as in gemv.rs: the best pass (warm-up, then at least 3 passes
// and at least MIN_WINDOW s, until 1.5 s (0.3 s with --quick) or 200
// passes) in GB/s of weight bytes.
// Hot: the same W over and over. Cold: one pass computes, in turn, the
// graphs of enough distinct copies of W to exceed COLD_BYTES. The read
// bandwidth (best f32 sum over COLD_BYTES with n threads, 0.6 s / 0.2 s
// budget) is measured right before and after each cold run; the best of
// the two is printed. GEMM (--gemm): GF/s (2 M N K per call), hot.
//
// Kernel only (--kernel): the type's vec_dot (ggml_get_type_traits_cpu,
// the function mul_mat calls per row) over 8 rows of K = 2048, called over
// and over on one thread with the activation row quantized once: the
// compute ceiling without threads, graph or memory (9 - 17 KiB, L1/L2),
// beside crates/kernels/benches/gemv.rs GEMV_BENCH_KERNEL=1.
//
// Output: '#' comment lines, then tab-separated records
//   gemv TYPE N K THREADS HOT_GBs COLD_GBs BW_GBs
//   gemm TYPE N K M THREADS GFs
//   kernel TYPE K GBs
//
// Peer (--serve, one type and one shape): sets up the cold copies as for a
// cold run, prints "ready BYTES" (weight bytes of one cold pass), then
// answers each line "cold T" on stdin with the seconds of one cold pass on
// T threads (T in --threads) and exits on "quit" or end of input. gemv.rs
// (GEMV_BENCH_GGML_PEER) drives it so that its own cold passes and ggml's
// alternate pass by pass: the host's DRAM rate drifts over seconds
// (docs/BENCHMARKS.md, session 26), and passes run side by side see the
// same rate. Between passes this process waits on its input, idle.
//
// Usage: ggml_mulmat [--quick] [--gemm | --kernel | --serve] [--thread-clock] [--types Q8_0,Q4_0,...]
//                    [--shapes 2048x2048,...] [--threads 1,2]
// (--thread-clock: 1-thread GEMM passes timed by the thread's CPU time)
#define _GNU_SOURCE
#include <pthread.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml.h"
#include "ggml-cpu.h"

#define COLD_BYTES ((size_t)1536 << 20)

static int quick;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// --thread-clock: 1-thread passes are timed by the calling thread's CPU
// time (ggml computes a 1-thread graph on the calling thread), so waits
// for a core on a loaded machine are not charged (as gemv.rs with
// GEMV_BENCH_CLOCK=thread).
static int thread_clock;

static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void die(const char *msg) {
    fprintf(stderr, "ggml_mulmat: %s\n", msg);
    exit(1);
}

static void *xalloc(size_t n) {
    void *p = aligned_alloc(64, (n + 63) / 64 * 64);
    if (!p) die("out of memory");
    return p;
}

// splitmix64 + Box-Muller: Gaussian test weights (values do not matter for
// speed; the tiling below mirrors gemv.rs's ggml_bytes).
static uint64_t rng_state = 1;
static uint64_t splitmix(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static float gaussian(void) {
    double u1 = ((double)(splitmix() >> 11) + 1.0) / 9007199254740993.0;
    double u2 = (double)(splitmix() >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

// Plain ggml bytes of an N x K matrix: 64 quantized Gaussian rows, tiled.
static uint8_t *weight_bytes(enum ggml_type ty, int64_t n, int64_t k, size_t *len) {
    size_t rb = ggml_row_size(ty, k);
    int64_t rows = n < 64 ? n : 64;
    float *w = xalloc(sizeof(float) * (size_t)(rows * k));
    for (int64_t i = 0; i < rows * k; i++) w[i] = 0.05f * gaussian();
    uint8_t *tile = xalloc(rb * (size_t)rows);
    ggml_quantize_chunk(ty, w, tile, 0, rows, k, NULL);
    *len = rb * (size_t)n;
    uint8_t *out = xalloc(*len);
    for (int64_t r = 0; r < n; r++) memcpy(out + rb * (size_t)r, tile + rb * (size_t)(r % rows), rb);
    free(w);
    free(tile);
    return out;
}

// --- read-bandwidth probe --------------------------------------------------
static float *bw_buf;
static size_t bw_len;  // floats

struct sum_job { const float *p; size_t n; float out; };

static void *sum_part(void *arg) {
    struct sum_job *j = arg;
    float acc[32] = {0};
    size_t i = 0;
    for (; i + 32 <= j->n; i += 32)
        for (int l = 0; l < 32; l++) acc[l] += j->p[i + l];
    float s = 0;
    for (int l = 0; l < 32; l++) s += acc[l];
    for (; i < j->n; i++) s += j->p[i];
    j->out = s;
    return NULL;
}

static volatile float bw_sink;

static void bw_pass(int threads) {
    pthread_t th[64];
    struct sum_job jobs[64];
    size_t per = (bw_len + (size_t)threads - 1) / (size_t)threads;
    for (int t = 0; t < threads; t++) {
        size_t lo = per * (size_t)t, hi = lo + per > bw_len ? bw_len : lo + per;
        jobs[t] = (struct sum_job){bw_buf + lo, hi - lo, 0};
        if (t > 0) pthread_create(&th[t], NULL, sum_part, &jobs[t]);
    }
    sum_part(&jobs[0]);
    float s = jobs[0].out;
    for (int t = 1; t < threads; t++) {
        pthread_join(th[t], NULL);
        s += jobs[t].out;
    }
    bw_sink = s;
}

// --- timing -------------------------------------------------------------------
typedef void (*pass_fn)(void *ctx);

// The least time a cell is measured over (gemv.rs's MIN_WINDOW): 200 hot
// 2048x2048 passes were a 10 ms window, which on a 2-vCPU guest sometimes
// ran every pass at the one-thread rate.
#define MIN_WINDOW 0.25

static double best_rate_clock(double units, double budget, pass_fn f, void *ctx, double (*clk)(void)) {
    f(ctx);  // warm-up
    double start = now_s(), best = 0;
    int n = 0;
    while (n < 3 || now_s() - start < MIN_WINDOW || (now_s() - start < budget && n < 200)) {
        double t = clk();
        f(ctx);
        double r = units / (clk() - t) / 1e9;
        if (r > best) best = r;
        n++;
    }
    return best;
}

static double best_rate(double units, double budget, pass_fn f, void *ctx) {
    return best_rate_clock(units, budget, f, ctx, now_s);
}

static void bw_pass_fn(void *ctx) { bw_pass(*(int *)ctx); }

static double bandwidth(int threads, double budget) {
    return best_rate((double)bw_len * 4, budget, bw_pass_fn, &threads);
}

// --- one mul_mat setup: copies of W, one graph each -----------------------------
struct setup {
    int copies;
    struct ggml_cgraph **graphs;
    struct ggml_cplan *plans;
    int first, count;  // graphs run by one pass
};

static void compute_pass(void *arg) {
    struct setup *s = arg;
    for (int i = s->first; i < s->first + s->count; i++)
        if (ggml_graph_compute(s->graphs[i], &s->plans[i]) != GGML_STATUS_SUCCESS)
            die("ggml_graph_compute failed");
}

struct bench {
    struct ggml_context *ctx;
    struct setup s;
    uint8_t **data;
    float *x, *y;
    uint8_t *work;
    size_t wbytes;
};

static void bench_init(struct bench *b, enum ggml_type ty, int64_t n, int64_t k, int64_t m, int copies) {
    size_t len;
    uint8_t *w = weight_bytes(ty, n, k, &len);
    b->wbytes = len;
    size_t meta = (size_t)copies * (2 * ggml_tensor_overhead() + ggml_graph_overhead_custom(4, false)) +
                  ggml_tensor_overhead() + (1 << 16);
    struct ggml_init_params ip = {meta, NULL, true};
    b->ctx = ggml_init(ip);
    if (!b->ctx) die("ggml_init failed");
    b->x = xalloc(sizeof(float) * (size_t)(k * m));
    for (int64_t i = 0; i < k * m; i++) b->x[i] = gaussian();
    b->y = xalloc(sizeof(float) * (size_t)(n * m));
    struct ggml_tensor *x = ggml_new_tensor_2d(b->ctx, GGML_TYPE_F32, k, m);
    x->data = b->x;
    b->data = calloc((size_t)copies, sizeof *b->data);
    b->s.copies = copies;
    b->s.graphs = calloc((size_t)copies, sizeof *b->s.graphs);
    b->s.plans = calloc((size_t)copies, sizeof *b->s.plans);
    for (int c = 0; c < copies; c++) {
        b->data[c] = xalloc(len);
        memcpy(b->data[c], w, len);
        struct ggml_tensor *wt = ggml_new_tensor_2d(b->ctx, ty, k, n);
        wt->data = b->data[c];
        struct ggml_tensor *out = ggml_mul_mat(b->ctx, wt, x);
        out->data = b->y;  // every copy writes the same output buffer
        b->s.graphs[c] = ggml_new_graph_custom(b->ctx, 4, false);
        ggml_build_forward_expand(b->s.graphs[c], out);
    }
    free(w);
    b->work = NULL;
}

// Plans for `threads` on `tp`; one shared work buffer.
static void bench_plan(struct bench *b, int threads, struct ggml_threadpool *tp) {
    size_t need = 0;
    for (int c = 0; c < b->s.copies; c++) {
        b->s.plans[c] = ggml_graph_plan(b->s.graphs[c], threads, tp);
        if (b->s.plans[c].work_size > need) need = b->s.plans[c].work_size;
    }
    free(b->work);
    b->work = xalloc(need + 64);
    for (int c = 0; c < b->s.copies; c++) b->s.plans[c].work_data = b->work;
}

static void bench_free(struct bench *b) {
    for (int c = 0; c < b->s.copies; c++) free(b->data[c]);
    free(b->data);
    free(b->s.graphs);
    free(b->s.plans);
    free(b->x);
    free(b->y);
    free(b->work);
    ggml_free(b->ctx);
}

// --- kernel only -------------------------------------------------------------
struct kernel_ctx {
    ggml_vec_dot_t dot;
    const uint8_t *w, *act;
    size_t row_bytes;
    int k, rows, reps;
    float out[8];
};

static void kernel_pass(void *arg) {
    struct kernel_ctx *c = arg;
    for (int it = 0; it < c->reps; it++)
        for (int r = 0; r < c->rows; r++) c->dot(c->k, &c->out[r], 0, c->w + (size_t)r * c->row_bytes, 0, c->act, 0, 1);
}

static void kernel_bench(enum ggml_type ty, double budget) {
    const struct ggml_type_traits_cpu *tr = ggml_get_type_traits_cpu(ty);
    if (!tr->vec_dot || !tr->from_float) die("type has no vec_dot");
    struct kernel_ctx c = {.dot = tr->vec_dot, .k = 2048, .rows = 8, .reps = 64};
    size_t len;
    c.w = weight_bytes(ty, c.rows, c.k, &len);
    c.row_bytes = len / (size_t)c.rows;
    float *x = xalloc(sizeof(float) * (size_t)c.k);
    for (int i = 0; i < c.k; i++) x[i] = gaussian();
    uint8_t *act = xalloc(ggml_row_size(tr->vec_dot_type, c.k));
    tr->from_float(x, act, c.k);
    c.act = act;
    double gbs = best_rate((double)len * c.reps, budget, kernel_pass, &c);
    printf("kernel\t%s\t%d\t%.2f\n", ggml_type_name(ty), c.k, gbs);
    fflush(stdout);
    free((void *)c.w);
    free(x);
    free(act);
}

// Copies of an N x K matrix a cold pass cycles through: enough to exceed
// COLD_BYTES, at least two.
static int cold_copies(enum ggml_type ty, int64_t n, int64_t k) {
    size_t rb = ggml_row_size(ty, k) * (size_t)n;
    int copies = (int)((COLD_BYTES + rb - 1) / rb);
    return copies < 2 ? 2 : copies;
}

// --- peer for paired cold passes (--serve) ------------------------------------
static void serve(enum ggml_type ty, int64_t n, int64_t k, const int *nthreads, struct ggml_threadpool **pools,
                  int nth) {
    int copies = cold_copies(ty, n, k);
    struct bench b;
    bench_init(&b, ty, n, k, 1, copies);
    b.s.first = 0;
    b.s.count = copies;
    int planned = -1;
    printf("ready\t%zu\n", b.wbytes * (size_t)copies);
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        int t;
        if (!strncmp(line, "quit", 4)) break;
        if (sscanf(line, "cold %d", &t) != 1) die("--serve: expected 'cold T' or 'quit'");
        int ti = -1;
        for (int i = 0; i < nth; i++)
            if (nthreads[i] == t) ti = i;
        if (ti < 0) die("--serve: thread count not in --threads");
        if (planned != ti) {
            bench_plan(&b, nthreads[ti], pools[ti]);
            planned = ti;
        }
        double t0 = now_s();
        compute_pass(&b.s);
        double secs = now_s() - t0;
        // Let the pool's threads stop spinning before the other side's pass.
        struct timespec pause = {0, 2000000};
        nanosleep(&pause, NULL);
        printf("%.9f\n", secs);
        fflush(stdout);
    }
    bench_free(&b);
}

static enum ggml_type type_of(const char *name) {
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        const char *tn = ggml_type_name((enum ggml_type)t);
        if (tn && strcasecmp(tn, name) == 0) return (enum ggml_type)t;
    }
    die("unknown type name");
    return GGML_TYPE_F32;
}

static int split(char *s, char **out, int max) {
    int n = 0;
    for (char *tok = strtok(s, ","); tok && n < max; tok = strtok(NULL, ",")) out[n++] = tok;
    return n;
}

int main(int argc, char **argv) {
    char types_s[256] = "q8_0,q4_0,q4_1,q4_K,q6_K";
    char shapes_s[256] = "2048x2048,8192x2048,2048x8192";
    char threads_s[64] = "1,2";
    int gemm = 0, kernel = 0, serve_mode = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--gemm")) gemm = 1;
        else if (!strcmp(argv[i], "--kernel")) kernel = 1;
        else if (!strcmp(argv[i], "--serve")) serve_mode = 1;
        else if (!strcmp(argv[i], "--thread-clock")) thread_clock = 1;
        else if (!strcmp(argv[i], "--types") && i + 1 < argc) snprintf(types_s, sizeof types_s, "%s", argv[++i]);
        else if (!strcmp(argv[i], "--shapes") && i + 1 < argc) snprintf(shapes_s, sizeof shapes_s, "%s", argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) snprintf(threads_s, sizeof threads_s, "%s", argv[++i]);
        else die("usage: ggml_mulmat [--quick] [--gemm | --kernel | --serve] [--thread-clock] [--types T,..] [--shapes NxK,..] [--threads 1,2]");
    }
    char *types[32], *shapes[16], *ths[8];
    int nty = split(types_s, types, 32), nsh = split(shapes_s, shapes, 16), nth = split(threads_s, ths, 8);
    double budget = quick ? 0.3 : 1.5, short_budget = quick ? 0.2 : 0.6;

    ggml_cpu_init();
    printf("# ggml_mulmat: ggml CPU features avx2=%d avx512=%d avx512_vnni=%d; cold working set %zu MiB\n",
           ggml_cpu_has_avx2(), ggml_cpu_has_avx512(), ggml_cpu_has_avx512_vnni(), COLD_BYTES >> 20);
    fflush(stdout);
    if (kernel) {
        for (int ti = 0; ti < nty; ti++) kernel_bench(type_of(types[ti]), budget);
        return 0;
    }

    struct ggml_threadpool *pools[8];
    int nthreads[8];
    for (int t = 0; t < nth; t++) {
        nthreads[t] = atoi(ths[t]);
        if (nthreads[t] < 1 || nthreads[t] > 64) die("bad thread count");
        struct ggml_threadpool_params tpp = ggml_threadpool_params_default(nthreads[t]);
        pools[t] = ggml_threadpool_new(&tpp);
        if (!pools[t]) die("ggml_threadpool_new failed");
    }

    if (serve_mode) {
        int64_t n, k;
        if (nty != 1 || nsh != 1 || sscanf(shapes[0], "%" SCNd64 "x%" SCNd64, &n, &k) != 2)
            die("--serve takes one type and one shape (NxK)");
        serve(type_of(types[0]), n, k, nthreads, pools, nth);
        for (int t = 0; t < nth; t++) ggml_threadpool_free(pools[t]);
        return 0;
    }

    if (!gemm) {
        bw_len = COLD_BYTES / 4;
        bw_buf = xalloc(COLD_BYTES);
        for (size_t i = 0; i < bw_len; i++) bw_buf[i] = (float)(i % 7);
    }

    for (int ti = 0; ti < nty; ti++) {
        enum ggml_type ty = type_of(types[ti]);
        for (int si = 0; si < nsh; si++) {
            int64_t n, k;
            if (sscanf(shapes[si], "%" SCNd64 "x%" SCNd64, &n, &k) != 2) die("bad shape (NxK)");
            if (k % ggml_blck_size(ty) != 0) continue;
            if (gemm) {
                static const int ms[] = {1, 16, 64};
                for (int mi = 0; mi < 3; mi++) {
                    struct bench b;
                    bench_init(&b, ty, n, k, ms[mi], 1);
                    for (int t = 0; t < nth; t++) {
                        bench_plan(&b, nthreads[t], pools[t]);
                        b.s.first = 0;
                        b.s.count = 1;
                        double (*clk)(void) = thread_clock && nthreads[t] == 1 ? cpu_s : now_s;
                        double gf = best_rate_clock(2.0 * (double)ms[mi] * (double)n * (double)k, budget,
                                                    compute_pass, &b.s, clk);
                        printf("gemm\t%s\t%" PRId64 "\t%" PRId64 "\t%d\t%d\t%.2f\n", ggml_type_name(ty), n, k, ms[mi],
                               nthreads[t], gf);
                        fflush(stdout);
                    }
                    bench_free(&b);
                }
                continue;
            }
            int copies = cold_copies(ty, n, k);
            struct bench b;
            bench_init(&b, ty, n, k, 1, copies);
            for (int t = 0; t < nth; t++) {
                bench_plan(&b, nthreads[t], pools[t]);
                b.s.first = 0;
                b.s.count = 1;
                double hot = best_rate((double)b.wbytes, budget, compute_pass, &b.s);
                double before = bandwidth(nthreads[t], short_budget);
                b.s.count = copies;
                double cold = best_rate((double)b.wbytes * copies, budget, compute_pass, &b.s);
                double after = bandwidth(nthreads[t], short_budget);
                printf("gemv\t%s\t%" PRId64 "\t%" PRId64 "\t%d\t%.2f\t%.2f\t%.2f\n", ggml_type_name(ty), n, k,
                       nthreads[t], hot, cold, before > after ? before : after);
                fflush(stdout);
            }
            bench_free(&b);
        }
    }
    for (int t = 0; t < nth; t++) ggml_threadpool_free(pools[t]);
    return 0;
}
