// hessian-collect: per-module input Hessians H = sum(x x^T) / n of a GGUF
// model that llama.cpp runs, written as the on-device engine's
// hessians.safetensors + hessian_metadata.json (docs/CALIBRATION.md).
//
// Built and run by scripts/hessians (which documents the usage); written for
// this project against llama.h / ggml.h / gguf.h of the llama.cpp tree that
// scripts/llama-cpp builds.
//
// How it works:
// - the text is tokenized as llama-imatrix does (one trailing newline
//   dropped, special tokens added as the vocab wants, no special-token
//   parsing) and cut into chunks of n_ctx tokens; each chunk is one
//   sequence, its first token replaced by BOS when the vocab adds BOS, the
//   KV cache cleared before it, every position an output (so the last
//   layer computes every row);
// - the scheduler's eval callback sees every GGML_OP_MUL_MAT whose weight
//   name starts with "blk." and whose activation (src1) is F32 with at
//   least 16 rows in dim 1 (llama-imatrix's rule); its rows x (length K)
//   go into sum x x^T in f32 per call (at most n_ubatch = 512 rows), added
//   into an f64 upper triangle per weight;
// - a weight whose activation is byte-identical to the previous call's
//   (q/k/v read one normed input, gate/up another) reuses that call's
//   product instead of recomputing it, and still gets its own entry;
// - at the end H = sum / n in f64, rounded to f32, mirrored from the upper
//   triangle (exactly symmetric); .diag is H's own diagonal (so it equals
//   diag(H) bit for bit), the statistic llama-imatrix sums per column.
//
// Every product entry is summed in a fixed order (rows ascending, in KC
// blocks), whatever the thread count, so the accumulation adds no thread
// dependence of its own.

#include "ggml-backend.h"
#include "ggml.h"
#include "gguf.h"
#include "llama.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <climits>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

namespace {

// ---------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------

[[noreturn]] void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("hessian-collect: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

double now_s() {
    using clock = std::chrono::steady_clock;
    return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

void cpu_s(double *user, double *sys) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *user = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6;
    *sys = ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

// CPU seconds of the calling thread.
double thread_cpu_s() {
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

struct FreeDeleter {
    void operator()(void *p) const { free(p); }
};

// A zeroed, 64-byte aligned float buffer.
struct Floats {
    std::unique_ptr<float, FreeDeleter> p;
    size_t n = 0;
    void resize(size_t count) {
        if (count <= n) return;
        size_t bytes = (count * sizeof(float) + 63) / 64 * 64;
        void *q = aligned_alloc(64, bytes);
        if (!q) die("out of memory (%zu bytes)", bytes);
        p.reset(static_cast<float *>(q));
        n = count;
    }
    float *data() { return p.get(); }
};

std::string json_str(const std::string &s) {
    std::string o = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') {
            o += '\\';
            o += static_cast<char>(c);
        } else if (c < 0x20) {
            char b[8];
            snprintf(b, sizeof b, "\\u%04x", c);
            o += b;
        } else {
            o += static_cast<char>(c);
        }
    }
    return o + "\"";
}

std::string fmt_double(double v) {
    char b[64];
    snprintf(b, sizeof b, "%.3f", v);
    return b;
}

// ---------------------------------------------------------------------------
// C = X^T X, upper triangle, blocked (the hot loop)
// ---------------------------------------------------------------------------
//
// X is n rows of K floats. It is packed twice, BLIS-style:
//   pa: ceil(K/MR) panels of n rows x MR columns (the broadcast side),
//   pb: ceil(K/NR) panels of n rows x NR columns (the vector side),
// zero-padded past K. The MR x NR micro-kernel keeps 12 vector
// accumulators over a block of at most KC rows. C has ceil(K/MR)*MR rows and
// ldc = ceil(K/NR)*NR columns; tiles wholly below the diagonal are skipped,
// other entries below it are computed (and ignored by the caller).

constexpr int MR = 6;
constexpr int NR = 16;
constexpr int KC = 256;

typedef float v8 __attribute__((vector_size(32)));

inline v8 load8(const float *p) {
    v8 v;
    memcpy(&v, p, sizeof v);
    return v;
}
inline void store8(float *p, v8 v) { memcpy(p, &v, sizeof v); }

void micro_kernel(const float *__restrict pa, const float *__restrict pb, int kc, float *__restrict c,
                  size_t ldc, bool first) {
    v8 acc[MR][2];
    for (int t = 0; t < MR; t++) acc[t][0] = acc[t][1] = v8{};
    for (int r = 0; r < kc; r++) {
        const v8 b0 = load8(pb + r * NR);
        const v8 b1 = load8(pb + r * NR + 8);
        const float *a = pa + r * MR;
        for (int t = 0; t < MR; t++) {
            acc[t][0] += a[t] * b0;
            acc[t][1] += a[t] * b1;
        }
    }
    for (int t = 0; t < MR; t++) {
        float *row = c + t * ldc;
        if (first) {
            store8(row, acc[t][0]);
            store8(row + 8, acc[t][1]);
        } else {
            store8(row, load8(row) + acc[t][0]);
            store8(row + 8, load8(row + 8) + acc[t][1]);
        }
    }
}

struct Syrk {
    int64_t K = 0, n = 0;
    int64_t ni = 0, nj = 0;  // panels of MR / NR columns
    size_t ldc = 0;
    Floats pa, pb, c;

    // Pack n rows (row r at base + r * stride bytes... given as pointers).
    void pack(const std::vector<const float *> &rows, int64_t k) {
        K = k;
        n = static_cast<int64_t>(rows.size());
        ni = (K + MR - 1) / MR;
        nj = (K + NR - 1) / NR;
        ldc = static_cast<size_t>(nj) * NR;
        pa.resize(static_cast<size_t>(ni) * n * MR);
        pb.resize(static_cast<size_t>(nj) * n * NR);
        c.resize(static_cast<size_t>(ni) * MR * ldc);
        float *A = pa.data();
        float *B = pb.data();
        for (int64_t ip = 0; ip < ni; ip++) {
            const int64_t k0 = ip * MR, w = std::min<int64_t>(MR, K - k0);
            float *dst = A + ip * n * MR;
            for (int64_t r = 0; r < n; r++) {
                const float *x = rows[r] + k0;
                int64_t t = 0;
                for (; t < w; t++) dst[r * MR + t] = x[t];
                for (; t < MR; t++) dst[r * MR + t] = 0.0f;
            }
        }
        for (int64_t jp = 0; jp < nj; jp++) {
            const int64_t k0 = jp * NR, w = std::min<int64_t>(NR, K - k0);
            float *dst = B + jp * n * NR;
            for (int64_t r = 0; r < n; r++) {
                const float *x = rows[r] + k0;
                int64_t t = 0;
                for (; t < w; t++) dst[r * NR + t] = x[t];
                for (; t < NR; t++) dst[r * NR + t] = 0.0f;
            }
        }
    }

    // Tiles of column panel jp: row tiles ip with ip*MR <= last column.
    int64_t tiles_of(int64_t jp) const {
        const int64_t last = std::min<int64_t>((jp + 1) * NR, ni * MR) - 1;
        return std::min<int64_t>(ni, last / MR + 1);
    }

    void panels(int64_t j_begin, int64_t j_end) {
        const float *A = pa.data();
        const float *B = pb.data();
        float *C = c.data();
        for (int64_t jp = j_begin; jp < j_end; jp++) {
            const int64_t tiles = tiles_of(jp);
            for (int64_t k0 = 0; k0 < n; k0 += KC) {
                const int kc = static_cast<int>(std::min<int64_t>(KC, n - k0));
                const float *b = B + (jp * n + k0) * NR;
                for (int64_t ip = 0; ip < tiles; ip++) {
                    micro_kernel(A + (ip * n + k0) * MR, b, kc, C + ip * MR * ldc + jp * NR, ldc, k0 == 0);
                }
            }
        }
    }

    // The product of the packed rows into c, on `threads` threads; each
    // column panel is one thread's, so the sums do not depend on the count.
    // Returns the CPU seconds of the helper threads (the caller's own are
    // on its thread clock).
    double run(int threads) {
        if (n == 0) {
            memset(c.data(), 0, static_cast<size_t>(ni) * MR * ldc * sizeof(float));
            return 0.0;
        }
        threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, nj)));
        if (threads == 1) {
            panels(0, nj);
            return 0.0;
        }
        // Contiguous panel ranges of about equal tile counts.
        int64_t total = 0;
        for (int64_t jp = 0; jp < nj; jp++) total += tiles_of(jp);
        std::vector<int64_t> cut(threads + 1, nj);
        cut[0] = 0;
        int64_t acc = 0;
        int t = 1;
        for (int64_t jp = 0; jp < nj && t < threads; jp++) {
            acc += tiles_of(jp);
            if (acc * threads >= total * t) cut[t++] = jp + 1;
        }
        std::vector<std::thread> pool;
        std::vector<double> cpu(threads, 0.0);
        for (int i = 1; i < threads; i++)
            pool.emplace_back([this, &cut, &cpu, i] {
                const double c0 = thread_cpu_s();
                panels(cut[i], cut[i + 1]);
                cpu[i] = thread_cpu_s() - c0;
            });
        panels(cut[0], cut[1]);
        for (auto &th : pool) th.join();
        double sum = 0.0;
        for (double v : cpu) sum += v;
        return sum;
    }

    float at(int64_t i, int64_t j) const { return c.p.get()[i * ldc + j]; }
};

// Check the blocked product against a plain f64 sum over random data of
// awkward shapes (K not a multiple of MR or NR, n not of KC), on 1 and 3
// threads (which must agree bit for bit). Returns the number of failures.
int self_test_kernel() {
    const int64_t shapes[][2] = {{1, 16}, {5, 17}, {16, 16}, {17, 300}, {100, 257}, {128, 64}, {130, 513}};
    std::mt19937 rng(12345);
    std::normal_distribution<float> g(0.0f, 1.0f);
    int fails = 0;
    for (const auto &s : shapes) {
        const int64_t K = s[0], n = s[1];
        std::vector<float> x(static_cast<size_t>(K * n));
        for (auto &v : x) v = g(rng) * (1.0f + 3.0f * (rng() % 7 == 0));
        std::vector<const float *> rows(n);
        for (int64_t r = 0; r < n; r++) rows[r] = x.data() + r * K;
        Syrk one, three;
        one.pack(rows, K);
        one.run(1);
        three.pack(rows, K);
        three.run(3);
        double worst = 0.0;
        bool same = true;
        for (int64_t i = 0; i < K; i++) {
            for (int64_t j = i; j < K; j++) {
                double ref = 0.0, mag = 0.0;
                for (int64_t r = 0; r < n; r++) {
                    ref += static_cast<double>(x[r * K + i]) * x[r * K + j];
                    mag += std::fabs(static_cast<double>(x[r * K + i]) * x[r * K + j]);
                }
                // f32 sums of n products: |error| <= n * eps * sum |products|.
                const double bound = static_cast<double>(n) * 1.2e-7 * mag + 1e-30;
                worst = std::max(worst, std::fabs(one.at(i, j) - ref) / bound);
                if (memcmp(&one.c.p.get()[i * one.ldc + j], &three.c.p.get()[i * three.ldc + j], 4) != 0) same = false;
            }
        }
        const bool ok = worst <= 1.0 && same;
        printf("kernel K=%" PRId64 " n=%" PRId64 ": max |err|/bound %.3g, 1 vs 3 threads %s: %s\n", K, n, worst,
               same ? "identical" : "DIFFER", ok ? "ok" : "FAIL");
        fails += !ok;
    }
    return fails;
}

// Time the product alone: n = 512 rows of the widths of the measured models,
// best of 5, CPU seconds of this process (other load on the machine does
// not count); multiply-adds per second over the entries computed.
int bench_kernel(int threads) {
    std::mt19937 rng(1);
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (int64_t K : {576, 640, 1024, 1536, 2048}) {
        const int64_t n = 512;
        std::vector<float> x(static_cast<size_t>(K * n));
        for (auto &v : x) v = g(rng);
        std::vector<const float *> rows(n);
        for (int64_t r = 0; r < n; r++) rows[r] = x.data() + r * K;
        Syrk s;
        double best = 1e30;
        for (int rep = 0; rep < 5; rep++) {
            timespec a, b;
            clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
            s.pack(rows, K);
            s.run(threads);
            clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
            best = std::min(best, (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9);
        }
        int64_t entries = 0;
        for (int64_t jp = 0; jp < s.nj; jp++) entries += s.tiles_of(jp) * MR * NR;
        printf("kernel K=%" PRId64 " n=%" PRId64 ": %.2f ms CPU, %.1f G multiply-adds per CPU second\n", K, n,
               best * 1e3, entries * static_cast<double>(n) / best * 1e-9);
    }
    return 0;
}

// ---------------------------------------------------------------------------
// Names
// ---------------------------------------------------------------------------

// llama.cpp decorates node names on some backends: "CUDA0#blk.0.attn_k.weight#0".
std::string weight_name(const char *name) {
    const char *p = strchr(name, '#');
    if (!p) return name;
    p++;
    const char *q = strchr(p, '#');
    return q ? std::string(p, q - p) : std::string(p);
}

// blk.N.<kind>.weight -> <prefix>.N.<module>, or "" when not a target.
std::string hf_module(const std::string &gguf, const std::string &prefix) {
    static const std::pair<const char *, const char *> table[] = {
        {"attn_q", "self_attn.q_proj"}, {"attn_k", "self_attn.k_proj"},   {"attn_v", "self_attn.v_proj"},
        {"attn_output", "self_attn.o_proj"}, {"ffn_gate", "mlp.gate_proj"}, {"ffn_up", "mlp.up_proj"},
        {"ffn_down", "mlp.down_proj"},
    };
    if (gguf.compare(0, 4, "blk.") != 0) return "";
    const size_t dot = gguf.find('.', 4);
    if (dot == std::string::npos || dot == 4) return "";
    const std::string layer = gguf.substr(4, dot - 4);
    if (layer.find_first_not_of("0123456789") != std::string::npos) return "";
    const std::string rest = gguf.substr(dot + 1);
    for (const auto &e : table) {
        if (rest == std::string(e.first) + ".weight") {
            std::string key = prefix + "." + layer + "." + e.second;
            // The engine's key: the module path with '/' -> "__".
            std::string out;
            for (char ch : key) {
                if (ch == '/') out += "__";
                else out += ch;
            }
            return out;
        }
    }
    return "";
}

// The output projection (the lm_head role): a MUL_MAT whose weight is
// output.weight, or token_embd.weight when the embedding is tied (its lookup
// is a GET_ROWS, never a MUL_MAT). Key "lm_head", the HF module name.
bool is_lm_head(const std::string &gguf) { return gguf == "output.weight" || gguf == "token_embd.weight"; }

// The key of a target: blk.* as hf_module, the output projection with
// --lm-head, "" otherwise.
std::string target_key(const std::string &gguf, const std::string &prefix, bool lm_head) {
    if (lm_head && is_lm_head(gguf)) return "lm_head";
    return hf_module(gguf, prefix);
}

// ---------------------------------------------------------------------------
// The collector (the eval callback's state)
// ---------------------------------------------------------------------------

struct Entry {
    std::string gguf;
    std::string key;
    int64_t K = 0;
    std::vector<double> upper;  // row i holds j = i..K-1
    int64_t rows = 0;
    int64_t calls = 0;
    int last_chunk = -1;
    int chunks = 0;
};

struct Collector {
    std::string prefix;
    bool lm_head = false;  // --lm-head
    int threads = 1;
    int chunk = 0;  // the chunk being decoded
    std::map<std::string, Entry> entries;            // by GGUF name
    std::map<std::string, std::string> unresolved;   // GGUF name -> reason
    int64_t skipped_small_rows = 0;
    double acc_seconds = 0.0;
    double acc_cpu_seconds = 0.0;  // this thread's and the product threads
    int64_t products = 0, reused = 0;
    std::string dump_dir;  // --dump-activations

    Syrk syrk;
    bool have_prev = false;
    int64_t prev_k = 0;
    std::vector<float> prev;  // the previous call's rows, contiguous
    std::vector<const float *> rows;
    bool failed = false;

    // Rows of src1 (any dim 1..3), as pointers into its data.
    void rows_of(const ggml_tensor *src1) {
        rows.clear();
        const char *base = static_cast<const char *>(src1->data);
        for (int64_t i3 = 0; i3 < src1->ne[3]; i3++)
            for (int64_t i2 = 0; i2 < src1->ne[2]; i2++)
                for (int64_t i1 = 0; i1 < src1->ne[1]; i1++)
                    rows.push_back(reinterpret_cast<const float *>(base + i1 * src1->nb[1] + i2 * src1->nb[2] +
                                                                   i3 * src1->nb[3]));
    }

    bool same_as_prev(int64_t K) const {
        if (!have_prev || K != prev_k || static_cast<size_t>(K) * rows.size() != prev.size()) return false;
        for (size_t r = 0; r < rows.size(); r++)
            if (memcmp(rows[r], prev.data() + r * K, K * sizeof(float)) != 0) return false;
        return true;
    }

    bool ask(const ggml_tensor *t) {
        const ggml_tensor *src0 = t->src[0];
        const ggml_tensor *src1 = t->src[1];
        if (t->op != GGML_OP_MUL_MAT && t->op != GGML_OP_MUL_MAT_ID) return false;
        if (!src0 || !src1) return false;
        const std::string w = weight_name(src0->name);
        // A target has a key; a keyless matmul outside the layers is not ours.
        const bool keyed = !target_key(w, prefix, lm_head).empty();
        if (!keyed && w.compare(0, 4, "blk.") != 0) return false;
        if (t->op == GGML_OP_MUL_MAT_ID) {
            unresolved.emplace(w, "MUL_MAT_ID (MoE experts): out of scope");
            return false;
        }
        if (src1->type != GGML_TYPE_F32) {
            unresolved.emplace(w, "activation not F32");
            return false;
        }
        if (src0->ne[2] * src0->ne[3] != 1) {
            unresolved.emplace(w, "weight is not 2-D");
            return false;
        }
        if (!keyed) {
            unresolved.emplace(w, "no HF module name for this blk.* matmul");
            return false;
        }
        if (src1->ne[1] < 16) {
            // llama-imatrix's rule: batches under 16 rows are not observed.
            skipped_small_rows += ggml_nrows(src1);
            return false;
        }
        return true;
    }

    bool observe(const ggml_tensor *t) {
        const double t0 = now_s();
        const double c0 = thread_cpu_s();
        const ggml_tensor *src0 = t->src[0];
        const ggml_tensor *src1 = t->src[1];
        const std::string w = weight_name(src0->name);
        if (!ggml_backend_buffer_is_host(src1->buffer) || src1->nb[0] != sizeof(float)) {
            fprintf(stderr, "hessian-collect: error: %s: activation not in host memory or not contiguous rows\n",
                    w.c_str());
            failed = true;
            return false;
        }
        const int64_t K = src1->ne[0];
        rows_of(src1);
        Entry &e = entries[w];
        if (e.calls == 0) {
            e.gguf = w;
            e.key = target_key(w, prefix, lm_head);
            e.K = K;
            e.upper.assign(static_cast<size_t>(K) * (K + 1) / 2, 0.0);
        } else if (e.K != K) {
            fprintf(stderr, "hessian-collect: error: %s: input width %" PRId64 " then %" PRId64 "\n", w.c_str(), e.K,
                    K);
            failed = true;
            return false;
        }
        if (same_as_prev(K)) {
            reused++;
        } else {
            prev_k = K;
            prev.resize(static_cast<size_t>(K) * rows.size());
            for (size_t r = 0; r < rows.size(); r++) memcpy(prev.data() + r * K, rows[r], K * sizeof(float));
            have_prev = true;
            syrk.pack(rows, K);
            acc_cpu_seconds += syrk.run(threads);
            products++;
            for (int64_t i = 0; i < K; i++) {
                if (!std::isfinite(syrk.at(i, i))) {
                    fprintf(stderr, "hessian-collect: error: non-finite activations (or sum of squares) in the input of %s, chunk %d\n",
                            w.c_str(), chunk);
                    failed = true;
                    return false;
                }
            }
        }
        if (!dump_dir.empty()) {
            const std::string path = dump_dir + "/" + e.key + ".f32";
            FILE *f = fopen(path.c_str(), "ab");
            if (!f) die("cannot write %s", path.c_str());
            for (const float *r : rows) fwrite(r, sizeof(float), K, f);
            fclose(f);
        }
        double *u = e.upper.data();
        for (int64_t i = 0; i < K; i++) {
            const float *c = syrk.c.data() + i * syrk.ldc;
            for (int64_t j = i; j < K; j++) *u++ += c[j];
        }
        e.rows += static_cast<int64_t>(rows.size());
        e.calls++;
        if (e.last_chunk != chunk) {
            e.last_chunk = chunk;
            e.chunks++;
        }
        acc_seconds += now_s() - t0;
        acc_cpu_seconds += thread_cpu_s() - c0;
        return true;
    }
};

bool eval_callback(ggml_tensor *t, bool ask, void *user) {
    auto *c = static_cast<Collector *>(user);
    if (ask) return c->ask(t);
    return c->observe(t);
}

bool g_verbose = false;

void log_callback(ggml_log_level level, const char *text, void *) {
    if (g_verbose || level == GGML_LOG_LEVEL_ERROR || level == GGML_LOG_LEVEL_WARN) fputs(text, stderr);
}

// ---------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------

void write_all(FILE *f, const void *p, size_t n, const std::string &path) {
    if (fwrite(p, 1, n, f) != n) die("short write to %s", path.c_str());
}

// hessians.safetensors: for every entry, key -> F32 [K, K] and key.diag ->
// F32 [K]; tensors in name order, the header as safetensors' own writer
// lays it out (compact JSON, name order, no __metadata__, space-padded to 8
// bytes).
void write_safetensors(const std::string &path, const std::vector<const Entry *> &list) {
    struct Item {
        std::string name;
        const Entry *e;
        bool diag;
    };
    std::vector<Item> items;
    for (const Entry *e : list) {
        items.push_back({e->key, e, false});
        items.push_back({e->key + ".diag", e, true});
    }
    std::sort(items.begin(), items.end(), [](const Item &a, const Item &b) { return a.name < b.name; });
    std::string h = "{";
    uint64_t off = 0;
    for (size_t i = 0; i < items.size(); i++) {
        const Item &it = items[i];
        const uint64_t K = static_cast<uint64_t>(it.e->K);
        const uint64_t bytes = (it.diag ? K : K * K) * 4;
        if (i) h += ",";
        h += json_str(it.name) + ":{\"dtype\":\"F32\",\"shape\":[";
        h += it.diag ? std::to_string(K) : std::to_string(K) + "," + std::to_string(K);
        h += "],\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + bytes) + "]}";
        off += bytes;
    }
    h += "}";
    while (h.size() % 8) h += ' ';
    FILE *f = fopen(path.c_str(), "wb");
    if (!f) die("cannot create %s", path.c_str());
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(h.size()) >> (8 * i));
    write_all(f, len, 8, path);
    write_all(f, h.data(), h.size(), path);
    std::vector<float> buf;
    for (const Item &it : items) {
        const Entry &e = *it.e;
        const int64_t K = e.K;
        const double n = static_cast<double>(e.rows);
        // H from the upper triangle, divided in f64, mirrored.
        buf.assign(static_cast<size_t>(K) * K, 0.0f);
        const double *u = e.upper.data();
        for (int64_t i = 0; i < K; i++)
            for (int64_t j = i; j < K; j++) {
                const float v = static_cast<float>(*u++ / n);
                buf[i * K + j] = v;
                buf[j * K + i] = v;
            }
        if (it.diag) {
            std::vector<float> d(K);
            for (int64_t i = 0; i < K; i++) d[i] = buf[i * K + i];
            write_all(f, d.data(), d.size() * 4, path);
        } else {
            write_all(f, buf.data(), buf.size() * 4, path);
        }
    }
    if (fclose(f) != 0) die("cannot finish %s", path.c_str());
}

struct Options {
    std::string model, text, out;
    int ctx = 512;
    int chunks = -1;
    int threads = 0;
    std::string prefix = "model.layers";
    bool timings = true;
    bool lm_head = false;
    std::string model_sha, text_sha;
    std::string dump_dir;
};

int parse_int(const char *opt, const char *v) {
    char *end = nullptr;
    const long x = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || x <= 0 || x > 1 << 30) die("%s needs a positive integer, got '%s'", opt, v ? v : "");
    return static_cast<int>(x);
}

void usage() {
    fputs("usage: hessian-collect MODEL.gguf TEXT OUT_DIR [--ctx N] [--chunks N] [--threads N]\n"
          "                       [--prefix model.layers] [--no-timings] [--model-sha256 HEX]\n"
          "                       [--text-sha256 HEX] [--dump-activations DIR] [--lm-head] [--verbose]\n"
          "       hessian-collect --self-test-kernel\n"
          "       hessian-collect --bench-kernel [THREADS]\n"
          "(scripts/hessians builds and drives this program; see its --help)\n",
          stderr);
}

}  // namespace

int main(int argc, char **argv) {
    Options o;
    std::vector<std::string> pos;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        auto val = [&]() -> const char * {
            if (i + 1 >= argc) die("%s needs a value", a.c_str());
            return argv[++i];
        };
        if (a == "--self-test-kernel") return self_test_kernel() ? 1 : 0;
        if (a == "--bench-kernel") return bench_kernel(i + 1 < argc ? parse_int("--bench-kernel", argv[i + 1]) : 1);
        if (a == "--ctx") o.ctx = parse_int("--ctx", val());
        else if (a == "--chunks") o.chunks = parse_int("--chunks", val());
        else if (a == "--threads") o.threads = parse_int("--threads", val());
        else if (a == "--prefix") o.prefix = val();
        else if (a == "--no-timings") o.timings = false;
        else if (a == "--lm-head") o.lm_head = true;
        else if (a == "--model-sha256") o.model_sha = val();
        else if (a == "--text-sha256") o.text_sha = val();
        else if (a == "--dump-activations") o.dump_dir = val();
        else if (a == "--verbose") g_verbose = true;
        else if (a == "-h" || a == "--help") {
            usage();
            return 0;
        } else if (!a.empty() && a[0] == '-') {
            usage();
            die("unknown option %s", a.c_str());
        } else pos.push_back(a);
    }
    if (pos.size() != 3) {
        usage();
        return 2;
    }
    o.model = pos[0];
    o.text = pos[1];
    o.out = pos[2];
    if (o.threads == 0) o.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const double t_start = now_s();

    // Fail now, not after the forward passes, when OUT_DIR cannot take the files.
    if (mkdir(o.out.c_str(), 0755) != 0 && errno != EEXIST) die("cannot create %s", o.out.c_str());
    {
        const std::string probe = o.out + "/hessians.safetensors.tmp";
        FILE *f = fopen(probe.c_str(), "wb");
        if (!f) die("cannot write into %s", o.out.c_str());
        fclose(f);
        remove(probe.c_str());
    }

    // The targets the file has: blk.N.<kind>.weight, 2-D, with an HF name.
    std::map<std::string, std::string> expected;  // GGUF name -> key
    std::string arch;
    {
        gguf_init_params gp = {true, nullptr};
        gguf_context *g = gguf_init_from_file(o.model.c_str(), gp);
        if (!g) die("cannot read %s as GGUF", o.model.c_str());
        const int64_t ka = gguf_find_key(g, "general.architecture");
        if (ka >= 0) arch = gguf_get_val_str(g, ka);
        bool has_output = false;
        for (int64_t i = 0; i < gguf_get_n_tensors(g); i++) {
            const std::string n = gguf_get_tensor_name(g, i);
            const int64_t *ne = gguf_get_tensor_ne(g, i);
            const std::string key = hf_module(n, o.prefix);
            if (!key.empty() && ne[2] == 1 && ne[3] == 1) expected[n] = key;
            has_output = has_output || n == "output.weight";
        }
        // --lm-head: the output projection's weight, the tied embedding when
        // the model has no output.weight.
        if (o.lm_head) expected[has_output ? "output.weight" : "token_embd.weight"] = "lm_head";
        gguf_free(g);
    }

    // The text, as llama-imatrix's -f reads it: one trailing newline dropped.
    std::string text;
    {
        FILE *f = fopen(o.text.c_str(), "rb");
        if (!f) die("cannot read %s", o.text.c_str());
        char buf[1 << 16];
        size_t got;
        while ((got = fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, got);
        fclose(f);
        if (!text.empty() && text.back() == '\n') text.pop_back();
    }

    llama_log_set(log_callback, nullptr);
    llama_backend_init();
    Collector col;
    col.prefix = o.prefix;
    col.lm_head = o.lm_head;
    col.threads = o.threads;
    col.dump_dir = o.dump_dir;

    double t0 = now_s();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model *model = llama_model_load_from_file(o.model.c_str(), mp);
    if (!model) die("llama.cpp cannot load %s", o.model.c_str());
    const llama_vocab *vocab = llama_model_get_vocab(model);
    const double load_s = now_s() - t0;

    t0 = now_s();
    std::vector<llama_token> tokens(text.size() + 8);
    int32_t nt = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), tokens.data(),
                                static_cast<int32_t>(tokens.size()), true, false);
    if (nt < 0 && nt != INT32_MIN) {
        tokens.resize(-nt);
        nt = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), tokens.data(),
                            static_cast<int32_t>(tokens.size()), true, false);
    }
    if (nt < 0) die("tokenizing %s failed", o.text.c_str());
    tokens.resize(nt);
    const double tokenize_s = now_s() - t0;
    const int n_chunk_max = static_cast<int>(tokens.size() / o.ctx);
    const int n_chunk = o.chunks < 0 ? n_chunk_max : std::min(o.chunks, n_chunk_max);
    if (n_chunk < 1)
        die("%s tokenizes to %zu tokens: not one chunk of %d", o.text.c_str(), tokens.size(), o.ctx);
    if (o.chunks > n_chunk_max)
        fprintf(stderr, "hessian-collect: the text has %d chunks of %d tokens, not %d: using %d\n", n_chunk_max, o.ctx,
                o.chunks, n_chunk);
    const bool add_bos = llama_vocab_get_add_bos(vocab);

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = static_cast<uint32_t>(o.ctx);
    cp.n_batch = static_cast<uint32_t>(o.ctx);
    cp.n_ubatch = static_cast<uint32_t>(std::min(o.ctx, 512));
    cp.n_seq_max = 1;
    cp.n_threads = o.threads;
    cp.n_threads_batch = o.threads;
    cp.cb_eval = eval_callback;
    cp.cb_eval_user_data = &col;
    cp.no_perf = true;
    llama_context *lctx = llama_init_from_model(model, cp);
    if (!lctx) die("llama.cpp cannot create a context (n_ctx %d)", o.ctx);

    llama_batch batch = llama_batch_init(o.ctx, 0, 1);
    const bool tty = isatty(fileno(stderr));
    t0 = now_s();
    for (int c = 0; c < n_chunk; c++) {
        col.chunk = c;
        llama_memory_clear(llama_get_memory(lctx), true);
        batch.n_tokens = o.ctx;
        for (int k = 0; k < o.ctx; k++) {
            batch.token[k] = tokens[static_cast<size_t>(c) * o.ctx + k];
            batch.pos[k] = k;
            batch.n_seq_id[k] = 1;
            batch.seq_id[k][0] = 0;
            batch.logits[k] = 1;  // every row through the last layer, as llama-imatrix
        }
        if (add_bos) batch.token[0] = llama_vocab_bos(vocab);
        const int rc = llama_decode(lctx, batch);
        if (col.failed) die("stopped in chunk %d (see above)", c);
        if (rc != 0) die("llama_decode failed on chunk %d (code %d)", c, rc);
        if (tty)
            fprintf(stderr, "\rhessian-collect: chunk %d/%d", c + 1, n_chunk);
        else if ((c + 1) % std::max(1, n_chunk / 8) == 0 && c + 1 < n_chunk)
            fprintf(stderr, "hessian-collect: chunk %d/%d, %.0f s\n", c + 1, n_chunk, now_s() - t0);
    }
    if (tty) fputc('\n', stderr);
    const double decode_s = now_s() - t0;
    llama_batch_free(batch);
    llama_free(lctx);
    llama_model_free(model);
    llama_backend_free();

    // Targets of the file never observed.
    for (const auto &kv : expected)
        if (!col.entries.count(kv.first) && !col.unresolved.count(kv.first))
            col.unresolved.emplace(kv.first, "in the file but never seen as a MUL_MAT input of >= 16 F32 rows");
    std::vector<const Entry *> list;
    for (const auto &kv : col.entries) list.push_back(&kv.second);

    t0 = now_s();
    const std::string st_path = o.out + "/hessians.safetensors";
    const std::string js_path = o.out + "/hessian_metadata.json";
    write_safetensors(st_path + ".tmp", list);
    const double write_s = now_s() - t0;

    std::vector<const Entry *> by_key = list;
    std::sort(by_key.begin(), by_key.end(), [](const Entry *a, const Entry *b) { return a->key < b->key; });
    double cu, cs;
    cpu_s(&cu, &cs);
    std::string j = "{\n  \"sample_counts\": {";
    for (size_t i = 0; i < by_key.size(); i++)
        j += std::string(i ? "," : "") + "\n    " + json_str(by_key[i]->key) + ": " + std::to_string(by_key[i]->chunks);
    j += "\n  },\n  \"rows\": {";
    for (size_t i = 0; i < by_key.size(); i++)
        j += std::string(i ? "," : "") + "\n    " + json_str(by_key[i]->key) + ": " + std::to_string(by_key[i]->rows);
    j += "\n  },\n  \"unresolved_targets\": [";
    {
        size_t i = 0;
        for (const auto &kv : col.unresolved)
            j += std::string(i++ ? "," : "") + "\n    {\"tensor\": " + json_str(kv.first) +
                 ", \"reason\": " + json_str(kv.second) + "}";
        j += i ? "\n  ],\n" : "],\n";
    }
    j += "  \"errors\": {},\n  \"error_samples\": [],\n  \"timings\": {";
    if (o.timings) {
        j += "\n    \"load_s\": " + fmt_double(load_s) + ",\n    \"tokenize_s\": " + fmt_double(tokenize_s) +
             ",\n    \"decode_s\": " + fmt_double(decode_s) + ",\n    \"accumulate_s\": " + fmt_double(col.acc_seconds) +
             ",\n    \"accumulate_cpu_s\": " + fmt_double(col.acc_cpu_seconds) +
             ",\n    \"write_s\": " + fmt_double(write_s) + ",\n    \"total_s\": " + fmt_double(now_s() - t_start) +
             ",\n    \"cpu_user_s\": " + fmt_double(cu) + ",\n    \"cpu_sys_s\": " + fmt_double(cs) + "\n  ";
    }
    j += "},\n  \"collector\": {";
    j += "\n    \"tool\": \"scripts/hessians (scripts/hessian-collector/collect.cpp, llama.cpp of llama-cpp-python 0.3.36)\"";
    j += ",\n    \"model\": " + json_str(o.model.substr(o.model.find_last_of('/') + 1));
    if (!o.model_sha.empty()) j += ",\n    \"model_sha256\": " + json_str(o.model_sha);
    j += ",\n    \"architecture\": " + json_str(arch);
    j += ",\n    \"text\": " + json_str(o.text.substr(o.text.find_last_of('/') + 1));
    if (!o.text_sha.empty()) j += ",\n    \"text_sha256\": " + json_str(o.text_sha);
    j += ",\n    \"text_tokens\": " + std::to_string(tokens.size());
    j += ",\n    \"ctx\": " + std::to_string(o.ctx);
    j += ",\n    \"chunks\": " + std::to_string(n_chunk);
    j += ",\n    \"add_bos\": " + std::string(add_bos ? "true" : "false");
    j += ",\n    \"threads\": " + std::to_string(o.threads);
    j += ",\n    \"module_prefix\": " + json_str(o.prefix);
    j += ",\n    \"rows_skipped_small_batches\": " + std::to_string(col.skipped_small_rows);
    j += ",\n    \"products\": " + std::to_string(col.products);
    j += ",\n    \"products_reused\": " + std::to_string(col.reused);
    j += "\n  }\n}\n";
    {
        FILE *f = fopen((js_path + ".tmp").c_str(), "wb");
        if (!f) die("cannot create %s.tmp", js_path.c_str());
        write_all(f, j.data(), j.size(), js_path);
        if (fclose(f) != 0) die("cannot finish %s.tmp", js_path.c_str());
    }
    if (rename((st_path + ".tmp").c_str(), st_path.c_str()) != 0 || rename((js_path + ".tmp").c_str(), js_path.c_str()) != 0)
        die("cannot move the outputs into %s", o.out.c_str());
    fprintf(stderr,
            "hessian-collect: %zu modules, %d chunks of %d tokens, %" PRId64 " products (%" PRId64
            " reused); decode %.1f s (of which accumulation %.1f s, %.1f CPU s), write %.1f s; cpu user %.1f s sys %.1f s\n",
            list.size(), n_chunk, o.ctx, col.products, col.reused, decode_s, col.acc_seconds, col.acc_cpu_seconds,
            write_s, cu, cs);
    if (!col.unresolved.empty())
        fprintf(stderr, "hessian-collect: %zu unresolved targets (hessian_metadata.json lists them)\n",
                col.unresolved.size());
    return 0;
}
