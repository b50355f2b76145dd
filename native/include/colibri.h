/* colibri.h — the one public header of the colibri C11 core.
 *
 * Role in the data flow: everything numeric in one MoE layer lives behind this
 * header (route -> group -> expert SwiGLU FFNs -> combine), plus the scratch
 * arena, the thread pool, NUMA memory binding and a reader for .colibri files
 * so C programs can embed the engine without Python.
 *
 * Rules: opaque handles; cb_<object>_<verb> names; every fallible call returns
 * cb_status; cb_status_str() gives a static string, cb_*_last_error() a
 * per-handle message (cb_last_error() a thread-local one for handle-less calls).
 * The library never exits or aborts. The caller owns every tensor; no pointer
 * is kept after a call returns. Matrices are row-major [rows=out, cols=in], the
 * layout of torch.nn.Linear.weight.
 *
 * The block between CFFI-BEGIN and CFFI-END is fed verbatim to cffi's cdef:
 * keep it free of preprocessor lines and macros (cb_dtype, generated from a
 * macro list, is declared to cffi by native/build_ffi.py).
 */
#ifndef COLIBRI_H
#define COLIBRI_H
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

/* Weight encodings of one matrix. Value of element (r, c):
 *   CB_F32        ((float*)data)[r*cols+c]
 *   CB_F16/BF16   raw 16-bit words, converted to f32
 *   CB_I8_ROW     q[r,c] * scales[r]                       (symmetric per row)
 *   CB_I8_G32/64/128  q[r,c] * scales[r*ngroups + c/g]     (symmetric per group
 *                 of g along cols; ngroups = ceil(cols/g); last group may be short)
 *   CB_I8_MINMAX  (q[r,c] - zero[0]) * scales[0]           (one scale, one int32
 *                 zero point per matrix)
 *   CB_I4_G32/64  q[r,c] * scales[r*ngroups + c/g]     (symmetric int4 per group
 *                 of g along cols, q in [-7, 7]; a row is ceil(cols/2) bytes,
 *                 element c in byte c/2: low nibble for even c, high nibble for
 *                 odd c, two's complement; an odd row's last high nibble is 0)
 *   CB_I6_G64     q[r,c] * scales[r*ngroups + c/64]    (symmetric int6 per group of 64 along
 *                 cols, q in [-31, 31]; a row is ceil(cols*6/8) bytes, a little-endian bit
 *                 stream: element c occupies bits 6c .. 6c+5 of the row (bit i of the row is
 *                 bit i%8 of byte i/8), two's complement, so 4 codes fill 3 bytes and a
 *                 64-group 48; the bits past the last code of a row are 0)
 *   CB_Q8_0       q[r,c] * d[r, c/32]                  (llama.cpp's Q8_0 blocks, bit for bit: a row is
 *                 ceil(cols/32) blocks of 34 bytes, each an IEEE half d then 32 int8 codes;
 *                 the value is (float)q * (float)d rounded to f32; no separate scales array)
 *   CB_Q4_K       d1 * q - m1                          (llama.cpp's Q4_K super-blocks, bit for bit: a row is
 *                 cols/256 blocks of 144 bytes: f16 d, f16 dmin, 12 bytes of 6-bit scales sc and
 *                 mins m of 8 sub-blocks of 32, 128 bytes of 4-bit codes q in [0, 15];
 *                 d1 = d * sc, m1 = dmin * m, each rounded to f32; native/src/kquants.h)
 *   CB_Q6_K       (d * sc) * (q - 32)                  (llama.cpp's Q6_K super-blocks, bit for bit: a row is
 *                 cols/256 blocks of 210 bytes: 128 bytes low nibbles, 64 bytes high 2-bit
 *                 pairs, 16 int8 scales sc (one per 16 elements), f16 d; kquants.h)
 *   CB_Q5_K       d1 * q - m1                          (llama.cpp's Q5_K super-blocks, bit for bit: a row is
 *                 cols/256 blocks of 176 bytes: Q4_K's d, dmin and 12 scale bytes, 32 bytes
 *                 holding each code's 5th bit, 128 bytes of low nibbles; q in [0, 31]; kquants.h)
 *   CB_MXFP4      kv[q] * e8m0_half(e)                 (llama.cpp's MXFP4 blocks (OCP microscaling FP4), bit for
 *                 bit: a row is cols/32 blocks of 17 bytes: an E8M0 exponent byte e, 16 bytes of
 *                 4-bit E2M1 codes q (element j < 16 the low nibble of byte j, j >= 16 the high
 *                 nibble of byte j - 16); kv = ggml's kvalues_mxfp4 (the E2M1 values doubled:
 *                 0 1 2 3 4 6 8 12, negated for q >= 8), e8m0_half(e) = 2^(e-128) (ggml's
 *                 GGML_E8M0_TO_FP32_HALF: 2^-128 / 2^-127 as subnormals for e < 2), so the value
 *                 is E2M1(q) * 2^(e-127), every product exact; native/src/mxfp4.h)
 *   CB_IQ4_XS     (d * (ls - 32)) * kv[q]              (llama.cpp's IQ4_XS super-blocks, bit for bit: a row is
 *                 cols/256 blocks of 136 bytes: f16 d, u16 scales_h, 4 bytes scales_l (the
 *                 6-bit ls of 8 sub-blocks of 32: low 4 bits from scales_l, high 2 from
 *                 scales_h), 128 bytes of 4-bit indices q (sub-block s's 16 bytes: element j < 16
 *                 the low nibble of byte j, j >= 16 the high nibble of byte j - 16) into kv =
 *                 kvalues_iq4nl (16 int8 values -127 .. 113); d * (ls - 32) rounded to f32
 *                 first, as dequantize_row_iq4_xs; native/src/iquants.h)
 *   CB_IQ4_NL     d * kv[q]                            (llama.cpp's IQ4_NL blocks, bit for bit: a row is cols/32
 *                 blocks of 18 bytes: f16 d, 16 bytes of indices q as IQ4_XS's sub-blocks; iquants.h)
 *   CB_Q5_0       (q - 16) * d                         (llama.cpp's Q5_0 blocks, bit for bit: a row is cols/32 blocks
 *                 of 22 bytes: f16 d, qh (4 bytes, bit j: element j's 5th bit), 16 bytes of low nibbles as
 *                 IQ4_NL's; q in [0, 31]; one rounded multiply; native/src/q5quants.h)
 *   CB_Q5_1       q * d + m                            (llama.cpp's Q5_1 blocks, bit for bit: 24 bytes per 32:
 *                 f16 d, f16 m, then Q5_0's qh and nibbles; the product rounded to f32, then the sum)
 *   CB_Q4_K_R8    d1 * q - m1                          (CB_Q4_K's blocks, every byte kept, laid out 8 rows at a time
 *                 so a vector holds 8 rows: rows must be a multiple of 8 (row_group); rows 8g .. 8g+7
 *                 are cols/256 units of 1152 bytes, unit b: their 8 blocks b' f16 d (row order),
 *                 then the 8 f16 dmin, then the 8 x 12 scale bytes, then for 32-byte code run p
 *                 (0..3) and 8-byte piece c (0..3) 64 bytes: rows 0 4 1 5 2 6 3 7's code bytes
 *                 32p + 8c .. 32p + 8c + 7; the values are CB_Q4_K's; native/src/kquants_r8.h)
 *   CB_Q6_K_R16   (d * sc) * (q - 32)                  (CB_Q6_K's blocks, every byte kept, laid out 16 rows at a
 *                 time: rows a multiple of 16 (row_group); rows 16g .. 16g+15 are cols/256 units
 *                 of 3360 bytes, unit b: their 16 blocks b' f16 d (row order), then 16 x 16 scale
 *                 bytes (scale j of rows 0..15 at 32 + 16j), then for half h (0, 1) and i (0..7)
 *                 three 64-byte pieces, row r's 4 bytes at 4r in each: ql bytes 64h + 4i .., ql
 *                 bytes 64h + 32 + 4i .., qh bytes 128 + 32h + 4i ..; the values are CB_Q6_K's;
 *                 its products with Q8_K differ from CB_Q6_K's in float order: kernels_kq.c;
 *                 native/src/kquants_r16.h)
 *
 * CB_ENCODING_LIST is the one list of encodings: one row each, in cb_dtype code order
 * (the codes are stored in .colibri containers: never renumber a row). It generates the
 * cb_dtype enum below and the cb_encoding table of encodings.c (cb_encoding_of: the
 * facts Python's colibri_dist/encodings.py copies, checked by a test); each kernel level
 * has a table indexed by these codes (native/src/kernels.h). Columns, as cb_encoding:
 *   X(ID -> CB_<ID>, code, name, bits, is_int, scale kind -> CB_SCALE_<kind>, group, zero_point, qmax,
 *     block_bytes, row_group)
 * cffi's cdef runs no preprocessor, so this list and the enum sit outside the CFFI block:
 * native/build_ffi.py reads the IDs from the rows and declares the enum to cffi with the
 * values left to the C compiler (cffi's "...": the codes cannot drift between the two). */
#define CB_ENCODING_LIST(X)                                            \
    X(F32,       0, "f32",         32, 0, NONE,   0,   0, 0,   0, 1)     \
    X(F16,       1, "f16",         16, 0, NONE,   0,   0, 0,   0, 1)     \
    X(BF16,      2, "bf16",        16, 0, NONE,   0,   0, 0,   0, 1)     \
    X(I8_ROW,    3, "int8",         8, 1, ROW,    0,   0, 127, 0, 1)     \
    X(I8_G32,    4, "int8-g32",     8, 1, GROUP,  32,  0, 127, 0, 1)     \
    X(I8_G64,    5, "int8-g64",     8, 1, GROUP,  64,  0, 127, 0, 1)     \
    X(I8_G128,   6, "int8-g128",    8, 1, GROUP,  128, 0, 127, 0, 1)     \
    X(I8_MINMAX, 7, "int8-minmax",  8, 1, MATRIX, 0,   1, 127, 0, 1)     \
    X(I4_G32,    8, "int4-g32",     4, 1, GROUP,  32,  0, 7,   0, 1)     \
    X(I4_G64,    9, "int4-g64",     4, 1, GROUP,  64,  0, 7,   0, 1)     \
    X(I6_G64,   10, "int6-g64",     6, 1, GROUP,  64,  0, 31,  0, 1)     \
    X(Q8_0,     11, "q8_0",         8, 1, BLOCK,  32,  0, 127, 34, 1)    \
    X(Q4_K,     12, "q4_k",         4, 1, SUPER,  256, 0, 15,  144, 1)   \
    X(Q6_K,     13, "q6_k",         6, 1, SUPER,  256, 0, 32,  210, 1)   \
    X(Q5_K,     14, "q5_k",         5, 1, SUPER,  256, 0, 31,  176, 1)   \
    X(MXFP4,    15, "mxfp4",        4, 1, SUPER,  32,  0, 12,  17, 1)    \
    X(IQ4_XS,   16, "iq4_xs",       4, 1, SUPER,  256, 0, 127, 136, 1)   \
    X(IQ4_NL,   17, "iq4_nl",       4, 1, SUPER,  32,  0, 127, 18, 1)    \
    X(Q5_0,     18, "q5_0",         5, 1, SUPER,  32,  0, 16,  22, 1)    \
    X(Q5_1,     19, "q5_1",         5, 1, SUPER,  32,  0, 31,  24, 1)    \
    X(Q4_K_R8,  20, "q4_k_r8",      4, 1, SUPER,  256, 0, 15,  144, 8)   \
    X(Q6_K_R16, 21, "q6_k_r16",     6, 1, SUPER,  256, 0, 32,  210, 16)

#define CB_DTYPE_ENUMERATOR_(ID, CODE, ...) CB_##ID = CODE,
typedef enum { CB_ENCODING_LIST(CB_DTYPE_ENUMERATOR_) CB_DTYPE_COUNT } cb_dtype;
#undef CB_DTYPE_ENUMERATOR_

/* CFFI-BEGIN */
typedef enum {
    CB_OK = 0,
    CB_E_INVALID = 1,     /* bad argument: shape, dtype, null, out of range */
    CB_E_NOMEM = 2,       /* allocation failed / arena exhausted */
    CB_E_IO = 3,          /* open/read/mmap failed */
    CB_E_FORMAT = 4,      /* container damaged: magic, version, bounds, checksum */
    CB_E_UNSUPPORTED = 5, /* valid but not implemented (e.g. dtype on this path) */
    CB_E_SYS = 6,         /* a system call failed (affinity, mbind, ...) */
    CB_E_NONFINITE = 7    /* NaN/Inf found where the policy rejects it */
} cb_status;

typedef enum {
    CB_SCALE_NONE = 0,    /* float encodings */
    CB_SCALE_ROW = 1,     /* one f32 scale per row, applied after the dot */
    CB_SCALE_GROUP = 2,   /* one f32 scale per (row, group of `group` cols), applied per element */
    CB_SCALE_MATRIX = 3,  /* one f32 scale per matrix, applied after the dot */
    CB_SCALE_BLOCK = 4,   /* the scale inside each block of `group` codes (no scales array): a row is
                             ceil(cols/group) blocks of block_bytes (Q8_0: an f16 d then the codes) */
    CB_SCALE_SUPER = 5    /* llama.cpp blocks kept whole (k-quants, i-quants, MXFP4): each block of `group`
                             codes carries its own scales (and mins) inside the data (no scales array); a
                             row is cols/group blocks of block_bytes, and cols must be a multiple of group */
} cb_scale_kind;

typedef struct {
    const char *name;     /* scheme name (converter --experts, container header): "int8-g32" */
    int32_t dtype;        /* cb_dtype code */
    int32_t bits;         /* bits per stored element: 32, 16, 8, 6, 4 */
    int32_t is_int;       /* 1: integer codes q (scales apply), 0: float words */
    int32_t scale_kind;   /* cb_scale_kind */
    int32_t group;        /* CB_SCALE_GROUP / _BLOCK / _SUPER: group (block) size along cols, else 0 */
    int32_t zero_point;   /* 1: one int32 zero point per matrix */
    int32_t qmax;         /* integer kinds: |q| <= qmax (minmax: q in [-qmax-1, qmax]); 0 for floats */
    int32_t block_bytes;  /* CB_SCALE_BLOCK / CB_SCALE_SUPER: bytes of one block of `group` elements, else 0 */
    int32_t row_group;    /* rows are stored in groups of this many (a matrix's rows a multiple of it); 1: row by row */
} cb_encoding;

/* The encoding of a cb_dtype code; NULL when the code is unknown. */
const cb_encoding *cb_encoding_of(int32_t dtype);
/* Bytes of a rows x cols matrix's data (rows * ceil(cols * bits / 8)) and its scale count; -1 for a bad dtype/shape. */
int64_t cb_matrix_data_bytes(int32_t dtype, int32_t rows, int32_t cols);
int64_t cb_matrix_scale_count(int32_t dtype, int32_t rows, int32_t cols);

typedef struct {
    const void *data;      /* rows*cols elements of dtype */
    const float *scales;   /* int8 kinds only, else NULL */
    const int32_t *zero;   /* CB_I8_MINMAX only, else NULL */
    int32_t dtype;         /* cb_dtype */
    int32_t rows, cols;
} cb_matrix;

/* The gated activation of an expert, h = act(g, u) per element, g = gate x (+ gate_bias), u = up x (+ up_bias):
 *   CB_ACT_SILU         h = g / (1 + e^-g) * u                                  (SwiGLU)
 *   CB_ACT_SWIGLU_OAI   g' = min(g, limit), u' = min(max(u, -limit), limit),     (gpt-oss's clamped SwiGLU;
 *                       h = (u' + 1) * (g' / (1 + e^(-(g' * alpha))))             llama.cpp's swiglu_oai)
 * e^x is silu.c's one sequence of operations: every SIMD level gives the same bits. */
typedef enum { CB_ACT_SILU = 0, CB_ACT_SWIGLU_OAI = 1 } cb_act;

/* One gated expert: y = down( act(gate x + gate_bias, up x + up_bias) ) + down_bias.
 * gate, up: [inter, hidden]; down: [hidden, inter]. Biases are f32 [inter], [inter], [hidden] or NULL (none),
 * each added after its product's dot (no FMA). act: cb_act; alpha and limit are read by CB_ACT_SWIGLU_OAI only
 * (finite, limit > 0). A zero-initialized struct's extras are the plain SwiGLU without biases. */
typedef struct {
    cb_matrix gate, up, down;
    const float *gate_bias, *up_bias, *down_bias;
    int32_t act;
    float alpha, limit;
} cb_expert;

typedef enum {
    CB_GATE_SOFTMAX_TOPK_NORM = 0, /* softmax, top-k, renormalise (Mixtral, Qwen3-MoE norm_topk_prob) */
    CB_GATE_SOFTMAX_TOPK = 1,      /* softmax, top-k, no renormalise (Qwen2-MoE, OLMoE) */
    CB_GATE_SIGMOID_GROUP = 2      /* DeepSeek-V3: sigmoid, +bias for selection, group-limited top-k */
} cb_gating_kind;

typedef struct {
    int32_t kind;                  /* cb_gating_kind */
    int32_t n_experts, top_k;
    int32_t n_group, topk_group;   /* SIGMOID_GROUP; 1,1 = no grouping */
    int32_t norm_topk_prob;        /* SIGMOID_GROUP: renormalise the k weights */
    float routed_scaling_factor;   /* SIGMOID_GROUP: final weights *= this; 1.0 otherwise */
} cb_gating;

/* One MoE layer as the kernels see it. experts[e] may be NULL for an expert no
 * token of this call routes to; a routed NULL expert is CB_E_INVALID. */
typedef struct {
    int32_t hidden;
    cb_gating gating;
    const float *router;           /* [n_experts, hidden] f32 */
    const float *bias;             /* [n_experts] or NULL: SIGMOID_GROUP: e_score_correction_bias (selection only);
                                      softmax kinds: the router's linear bias, added to every logit (gpt-oss) */
    const cb_expert *const *experts; /* [n_experts] */
    int32_t n_shared;              /* 0 or 1 shared MLP (DeepSeek's n_shared are fused into one) */
    const cb_expert *shared;       /* NULL if n_shared == 0 */
    const float *shared_gate;      /* [hidden] Qwen2-MoE sigmoid shared gate, or NULL */
} cb_moe_layer;

/* ---- status ---- */
const char *cb_status_str(cb_status s);
const char *cb_last_error(void);          /* thread-local message of the last failing handle-less call */
/* Kernel families (one dispatch table each, chosen once at start-up from cpuid + the OS's XSAVE
 * state, then capped by COLIBRI_SIMD=scalar|avx2|avx512|amx). Every level gives the same bits.
 * amx = avx512 + AMX-INT8 tiles for the w8a8 products (the OS must grant the tile state). */
typedef enum { CB_SIMD_SCALAR = 0, CB_SIMD_AVX2 = 2, CB_SIMD_AVX512 = 3, CB_SIMD_AMX = 4 } cb_simd;
int cb_simd_level(void);                  /* the active cb_simd level */
const char *cb_simd_name(void);           /* its name: "scalar" | "avx2" | "avx512" | "amx" */
const char *cb_simd_level_name(int32_t level);   /* name of a level, NULL if not a level */
int32_t cb_simd_level_of(const char *name);      /* level of a name, -1 if unknown */
int32_t cb_simd_best(void);               /* best level this CPU and OS support (ignores COLIBRI_SIMD) */
/* What the CPU/OS lacks for a level ("" when it is supported), e.g. "avx512_vnni". */
const char *cb_simd_missing(int32_t level);
/* Tests and benchmarks: -1 re-detect (honours COLIBRI_SIMD), else force a cb_simd level
 * (CB_E_UNSUPPORTED naming the missing flags if the CPU lacks it). */
cb_status cb_simd_force(int level);

/* ---- arena: 64-byte aligned bump allocator ---- */
typedef struct cb_arena cb_arena;
cb_status cb_arena_create(size_t capacity, cb_arena **out);
void *cb_arena_alloc(cb_arena *a, size_t bytes);   /* NULL when exhausted */
void cb_arena_reset(cb_arena *a);
size_t cb_arena_used(const cb_arena *a);
size_t cb_arena_high_water(const cb_arena *a);
size_t cb_arena_capacity(const cb_arena *a);
void cb_arena_destroy(cb_arena *a);

/* ---- engine: a thread pool + arena; one caller thread at a time ---- */
typedef struct cb_engine cb_engine;
/* n_threads counts the calling thread; 0 = n_cpus if a CPU list is given, else one per online CPU.
 * cpus (optional): worker i (1..n_threads-1) is pinned to cpus[i % n_cpus]; the caller is not pinned. */
cb_status cb_engine_create(int32_t n_threads, const int32_t *cpus, int32_t n_cpus, cb_engine **out);
void cb_engine_destroy(cb_engine *e);
const char *cb_engine_last_error(const cb_engine *e);
int32_t cb_engine_threads(const cb_engine *e);
size_t cb_engine_arena_high_water(const cb_engine *e);
uint64_t cb_engine_mallocs(const cb_engine *e);  /* arena (re)allocations so far: flat after warm-up */
/* Opt-in w8a8: CB_I8_ROW expert matrices use per-token dynamic int8 activations and exact
 * integer dots (docs/KERNELS.md). Still batch invariant; different bits than the default. */
cb_status cb_engine_set_w8a8(cb_engine *e, int32_t on);

/* Routing: idx[n,k] int32, w[n,k] f32. Ties go to the lower expert index. */
cb_status cb_route(cb_engine *e, const cb_gating *g, const float *router, const float *bias,
                   const float *x, int64_t n, int32_t hidden, int32_t *idx, float *w);

/* Gating only, on given router logits [n, n_experts] (handle-less, single thread). */
cb_status cb_gate_logits(const cb_gating *g, const float *logits, const float *bias, int64_t n,
                         int32_t *idx, float *w);

/* One expert on gathered rows: out[i,:] = E(x[rows[i],:]) for i < n_rows.
 * rows NULL means rows 0..n_rows-1. Batch invariant: out[i] bits depend only
 * on x[rows[i]] and the weights. */
cb_status cb_expert_forward(cb_engine *e, const cb_expert *ex, const float *x, int32_t hidden,
                            const int32_t *rows, int64_t n_rows, float *out);

/* Shared MLP with optional sigmoid gate: out[t] = sigmoid(g.x[t]) * S(x[t]) (gate NULL: S(x[t])). */
cb_status cb_shared_forward(cb_engine *e, const cb_expert *shared, const float *shared_gate,
                            const float *x, int64_t n, int32_t hidden, float *out);

/* Combine in slot order: y[t] = shared[t] (or 0) + sum_{j<k} w[t,j] * slot_out[t,j,:],
 * accumulated left to right, no fused multiply-add. */
cb_status cb_combine(int64_t n, int32_t k, int32_t hidden, const float *w, const float *slot_out,
                     const float *shared, float *y);

/* Whole layer: route, group tokens by expert (each expert read once), run, combine.
 * idx_out [n,k] and w_out [n,k] are required (the routing result). Bit-identical to cb_route + cb_expert_forward per expert + cb_shared_forward + cb_combine. */
cb_status cb_moe_forward(cb_engine *e, const cb_moe_layer *layer, const float *x, int64_t n,
                         float *y, int32_t *idx_out, float *w_out);

/* ---- NUMA (Linux syscalls, no libnuma) ---- */
typedef enum { CB_MPOL_NONE = 0, CB_MPOL_BIND = 1, CB_MPOL_INTERLEAVE = 2, CB_MPOL_PREFERRED = 3 } cb_mempolicy;
cb_status cb_numa_bind(void *addr, size_t len, int32_t policy, const int32_t *nodes, int32_t n_nodes);
cb_status cb_numa_set_policy(int32_t policy, const int32_t *nodes, int32_t n_nodes);
cb_status cb_pin_thread(const int32_t *cpus, int32_t n_cpus);

/* ---- .colibri container reader (docs/FORMAT.md) ---- */
typedef struct cb_model cb_model;
typedef struct {
    int32_t hidden, inter, n_experts, top_k, n_layers, n_moe_layers;
    int32_t shared_inter;   /* 0 when the model has no shared expert */
    cb_gating gating;
} cb_model_info;
cb_status cb_model_open(const char *path, int32_t verify, cb_model **out);
void cb_model_close(cb_model *m);
const char *cb_model_last_error(const cb_model *m);
cb_status cb_model_get_info(const cb_model *m, cb_model_info *out);
/* layer index is the model's layer number (dense layers are not MoE: CB_E_INVALID). */
cb_status cb_model_moe_layer(cb_model *m, int32_t layer, cb_moe_layer *out);
/* Any stored tensor (f32 only) by name, e.g. "model.embed_tokens.weight". */
cb_status cb_model_tensor_f32(cb_model *m, const char *name, const float **data, int64_t *shape, int32_t *ndim);

/* ---- whole-model ops (dense.c, norm.c, rope.c, attention.c, kv_write.c) ---- */
/* Dense products on any cb_matrix encoding. Matrix i: for t < n, r < ws[i]->rows:
 *   outs[i][t*out_stride + r] = dot(W_i[r,:], xs[i] + t*x_stride) (+ biases[i][r], added after the dot, no FMA)
 * biases may be NULL or hold NULL entries. Every element through cb_dot_rows' fixed sequence, work split over
 * (matrix, output-row block) items and token chunks; never over K. Batch/thread invariant. */
cb_status cb_matmul_batch(cb_engine *e, int32_t n_mats, const cb_matrix *const *ws, const float *const *biases,
                          const float *const *xs, int64_t x_stride, float *const *outs, int64_t out_stride, int64_t n);
/* One matrix: out [n, w->rows] = x [n, w->cols] W^T (+ bias). */
cb_status cb_matmul(cb_engine *e, const cb_matrix *w, const float *bias, const float *x, int64_t n, float *out);
/* RMSNorm of n rows of dim: out = x * (1/sqrt(mean(x^2) + eps)) * weight (weight NULL = no weight);
 * sum of squares in double, fixed order; out may equal x. Single thread. */
cb_status cb_rmsnorm(const float *x, int64_t n, int32_t dim, const float *weight, float eps, float *out);
/* Embedding gather: out[t, :] = decoded row ids[t] of w (every encoding: value = decode(q) * row/group scale,
 * exactly as the kernels decode); ids outside [0, w->rows) -> CB_E_INVALID naming the index. */
cb_status cb_embed(const cb_matrix *w, const int32_t *ids, int64_t n, float *out);
/* Rotary embedding in place on x: n tokens x n_heads heads, head h of token t at x + t*token_stride + h*head_stride;
 * rotates dims [offset, offset + rot_dim) of each head by angles a_i = (float)positions[t] * inv_freq[i]
 * (f32 multiply), i < rot_dim/2; c = (float)cos((double)a_i) * attention_factor, s likewise with sin.
 *   rotate-half (interleaved == 0), half = rot_dim/2:  y[i] = x[i]*c - x[i+half]*s;  y[i+half] = x[i+half]*c + x[i]*s
 *   interleaved (DeepSeek rope_interleave): y[i] = x[2i]*c - x[2i+1]*s;  y[half+i] = x[2i+1]*c + x[2i]*s
 *   (the output is de-interleaved exactly like transformers' apply_rotary_pos_emb_interleave). */
typedef struct { int32_t rot_dim; int32_t interleaved; float attention_factor; const float *inv_freq; } cb_rope;
cb_status cb_rope_apply(const cb_rope *r, float *x, int64_t n, int32_t n_heads, int64_t token_stride,
                        int32_t head_stride, int32_t offset, const int32_t *positions);
/* out[t, :] = log_softmax(x[t, :]) (max-subtracted, sum of exp in double, fixed order). */
cb_status cb_log_softmax(const float *x, int64_t n, int32_t dim, float *out);

/* Paged-KV attention. Cache pools of one layer:
 *   K: [n_blocks, n_kv_heads, block_size, qk_dim]   V: [n_blocks, n_kv_heads, block_size, v_row]
 * of cache_dtype (CB_F32, CB_F16 or CB_BF16 words). MLA passes v_cache == k_cache, v_row == qk_dim, v_dim < qk_dim
 * (values are the first v_dim elements of each K row). Query head h uses kv head h / (n_heads / n_kv_heads). */
typedef struct {
    int32_t n_heads, n_kv_heads, qk_dim, v_dim, v_row, block_size, cache_dtype;
    int32_t window;   /* sliding window: key j visible from position p iff p - window < j <= p; 0 = no window */
    float scale;      /* score = dot(q, k) * scale (multiply after the dot) */
    const float *sinks; /* [n_heads] finite learned logits, one more term of each head's softmax denominator whose
                           probability is dropped (gpt-oss's attention sinks), or NULL (none) */
} cb_attn;
/* Sequence s owns tokens seq_start[s] .. seq_start[s+1]-1 of q (q [n_tok, n_heads, qk_dim] f32); token i of s is at
 * position pos0[s] + (i - seq_start[s]) and attends to keys max(0, p-window+1) .. p, position j stored in block
 * block_tables[s][j / block_size], slot j % block_size (n_table[s] entries, each < n_blocks; checked).
 * out [n_tok, n_heads, v_dim] f32. The cache must already hold every visible position (write first).
 * Per (token, head): scores by cb_dot_rows' fixed sequence, softmax with max subtracted, exp sum in ascending j
 * (double), probabilities p_j = e_j / sum, out = sum_j p_j * v_j accumulated in ascending j with separate multiply
 * and add (no FMA); with sinks, the max also covers the head's sink s and the sum ends with exp(s - max). Bit-identical
 * whatever the batch, the other sequences, the chunking of a prompt into calls, the thread count and the SIMD level. */
cb_status cb_attention(cb_engine *e, const cb_attn *a, const void *k_cache, const void *v_cache, int64_t n_blocks,
                       int32_t n_seqs, const int32_t *seq_start, const int32_t *pos0,
                       const int32_t *const *block_tables, const int32_t *n_table, const float *q, float *out);
/* Store this step's keys/values: k [n_tok, n_kv_heads, qk_dim], v [n_tok, n_kv_heads, v_row] (v may be NULL for MLA)
 * at the positions defined as in cb_attention, converting to cache_dtype (f16 and bf16: round to nearest even). */
cb_status cb_kv_write(const cb_attn *a, void *k_cache, void *v_cache, int64_t n_blocks, int32_t n_seqs,
                      const int32_t *seq_start, const int32_t *pos0, const int32_t *const *block_tables,
                      const int32_t *n_table, const float *k, const float *v);
/* ---- one decoder layer in one call (layer.c) ---- */
typedef enum { CB_QK_NORM_NONE = 0, CB_QK_NORM_FULL = 1, CB_QK_NORM_HEAD = 2 } cb_qk_norm;
/* A GQA layer (attn.v_dim == attn.v_row == attn.qk_dim): pre-norms, projections (biases may be NULL), the family's
 * q/k normalisation (FULL: over the whole projection before clipping, OLMoE; HEAD: per head after it, Qwen3),
 * clip_qkv (> 0: clamp q, k, v), rope, the layer's cache pools, and exactly one of moe / mlp (dense SwiGLU). */
typedef struct {
    int32_t hidden;
    float rms_eps;
    const float *ln_attn, *ln_mlp;
    const cb_matrix *q, *k, *v, *o;
    const float *bias_q, *bias_k, *bias_v, *bias_o;
    int32_t qk_norm;
    const float *norm_q, *norm_k;
    float clip_qkv;
    cb_rope rope;
    cb_attn attn;
    void *k_cache, *v_cache;
    int64_t n_blocks;
    const cb_moe_layer *moe;
    const cb_expert *mlp;
} cb_decoder_layer;
/* The step's sequences as cb_attention takes them, plus every token's position (n = seq_start[n_seqs] - seq_start[0]). */
typedef struct {
    int32_t n_seqs;
    const int32_t *seq_start, *pos0;
    const int32_t *const *block_tables;
    const int32_t *n_table;
    const int32_t *positions;
} cb_step;
/* h [n, hidden] in place: h += attention(rmsnorm(h)); h += moe_or_mlp(rmsnorm(h)), each op the function above the
 * op-by-op path calls, in its order (same bits). idx/w [n, top_k]: the routing (required with moe). A non-finite
 * hidden state afterwards is CB_E_NONFINITE. */
cb_status cb_layer_forward(cb_engine *e, const cb_decoder_layer *layer, const cb_step *step, float *h, int64_t n,
                           int32_t *idx, float *w);
/* Integrity helpers (crc32_fast.c). CRC-32 (IEEE, equal to zlib.crc32), chainable: start at 0,
 * crc = cb_crc32_update(crc, data, n). cb_count_nonfinite: NaN/Inf among n values of kind
 * 0 f32, 1 f16, 2 bf16 (-1 for another kind). */
uint32_t cb_crc32_update(uint32_t crc, const void *data, size_t n);
int64_t cb_count_nonfinite(const void *data, size_t n, int32_t kind);
/* CFFI-END */

#ifdef __cplusplus
}
#endif
#endif
