/* model_parse.c — decode and check a .colibri header and tensor table in C.
 *
 * Role: the C twin of colibri_dist/format/{spec,validate}.py. Every field is
 * read byte by byte as little-endian (host order does not matter), every
 * offset is bounds-checked against the file before model.c hands out a
 * pointer, and a damaged or inconsistent file yields CB_E_FORMAT with a
 * message naming the file and the layer/expert/tensor.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cb_internal.h"
#include "model_internal.h"

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static int32_t rdi32(const uint8_t *p) { return (int32_t)rd32(p); }
static float rdf32(const uint8_t *p) { uint32_t u = rd32(p); float f; memcpy(&f, &u, 4); return f; }

static const int dtype_size[10] = {4, 2, 2, 1, 1, 2, 4, 8, 8, 1};

cb_status cbf_parse_header(cb_model *m, const uint8_t *h, uint64_t *table_off, uint64_t *table_count,
                           uint32_t *table_crc) {
    const char *p = m->path;
    if (memcmp(h, "COLIBRI\0", 8) != 0) return cb_fail(CB_E_FORMAT, "%s: not a .colibri file (bad magic)", p);
    uint32_t version = rd32(h + 8);
    if (version > CBF_VERSION)
        return cb_fail(CB_E_FORMAT, "%s: format version %u is newer than this reader supports (%d)", p,
                       version, CBF_VERSION);
    if (version < 1) return cb_fail(CB_E_FORMAT, "%s: invalid format version %u", p, version);
    if (cb_crc32(h, CBF_HEADER_SIZE - 4) != rd32(h + 508))
        return cb_fail(CB_E_FORMAT, "%s: header is damaged (checksum mismatch)", p);
    if (rd32(h + 12) != CBF_HEADER_SIZE || rd32(h + 20) != CBF_ENTRY_SIZE || rd32(h + 16) != 0)
        return cb_fail(CB_E_FORMAT, "%s: unexpected header/entry size or flags", p);
    uint64_t file_size = rd64(h + 56);
    if (m->size < file_size)
        return cb_fail(CB_E_FORMAT, "%s: truncated: %zu bytes on disk, header says %llu", p, m->size,
                       (unsigned long long)file_size);
    *table_off = rd64(h + 24);
    *table_count = rd64(h + 32);
    *table_crc = rd32(h + 64);
    uint64_t meta_off = rd64(h + 40), meta_bytes = rd64(h + 48);
    if (*table_off < CBF_DATA_START || *table_off > file_size
        || *table_count > (file_size - *table_off) / CBF_ENTRY_SIZE
        || *table_off + *table_count * CBF_ENTRY_SIZE > meta_off || meta_off > file_size
        || meta_bytes > file_size - meta_off)
        return cb_fail(CB_E_FORMAT, "%s: table or metadata out of bounds", p);
    cb_model_info *in = &m->info;
    in->hidden = rdi32(h + 124); in->inter = rdi32(h + 128); in->n_experts = rdi32(h + 132);
    in->top_k = rdi32(h + 136); in->n_layers = rdi32(h + 140); in->n_moe_layers = rdi32(h + 144);
    in->shared_inter = rdi32(h + 148);
    cb_gating *g = &in->gating;
    g->kind = rdi32(h + 156); g->n_experts = in->n_experts; g->top_k = in->top_k;
    g->n_group = rdi32(h + 160); g->topk_group = rdi32(h + 164); g->norm_topk_prob = rdi32(h + 168);
    g->routed_scaling_factor = rdf32(h + 172);
    memcpy(m->moe_mask, h + 176, sizeof m->moe_mask);
    m->scheme = rdi32(h + 120);
    m->shared_gate = rdi32(h + 152);
    m->act = rdi32(h + 304);
    m->alpha = rdf32(h + 308);
    m->limit = rdf32(h + 312);
    char scheme[17] = {0};
    memcpy(scheme, h + 104, 16);
    const cb_encoding *enc = cb_encoding_of(m->scheme);
    if (m->scheme == CBF_MIXED ? strcmp(scheme, "mixed") != 0 : !enc || strcmp(scheme, enc->name) != 0)
        return cb_fail(CB_E_FORMAT, "%s: unknown expert scheme in header", p);
    if (in->hidden <= 0 || in->inter <= 0 || in->n_experts <= 0 || in->top_k < 1 || in->top_k > in->n_experts
        || in->n_layers <= 0 || in->n_layers > CBF_MAX_LAYERS || in->shared_inter < 0 || g->kind < 0
        || g->kind > 2 || g->n_group < 1 || g->topk_group < 1 || g->topk_group > g->n_group
        || in->n_experts % g->n_group || (g->norm_topk_prob != 0 && g->norm_topk_prob != 1)
        || !isfinite(g->routed_scaling_factor) || (m->shared_gate != 0 && m->shared_gate != 1)
        || (m->shared_gate && in->shared_inter == 0))
        return cb_fail(CB_E_FORMAT, "%s: invalid model config in header", p);
    if ((m->act != CB_ACT_SILU && m->act != CB_ACT_SWIGLU_OAI)
        || (m->act == CB_ACT_SWIGLU_OAI && !(isfinite(m->alpha) && isfinite(m->limit) && m->limit > 0)))
        return cb_fail(CB_E_FORMAT, "%s: invalid expert activation in header (expert_act %d, alpha %g, limit %g)", p,
                       (int)m->act, (double)m->alpha, (double)m->limit);
    int32_t marked = 0;
    for (int32_t l = 0; l < CBF_MAX_LAYERS; l++) {
        if (!(m->moe_mask[l / 8] >> (l % 8) & 1)) continue;
        if (l >= in->n_layers) return cb_fail(CB_E_FORMAT, "%s: MoE layer mask marks layer %d >= n_layers", p, l);
        marked++;
    }
    if (marked != in->n_moe_layers)
        return cb_fail(CB_E_FORMAT, "%s: header counts %d MoE layers, mask has %d", p, in->n_moe_layers, marked);
    return CB_OK;
}

static int is_moe(const cb_model *m, int32_t layer) {
    return layer >= 0 && layer < m->info.n_layers && (m->moe_mask[layer / 8] >> (layer % 8) & 1);
}

static void decode_entry(const uint8_t *r, cbf_entry *e) {
    memcpy(e->name, r, 128);
    e->name[127] = 0;
    e->kind = rd16(r + 128); e->dtype = rd16(r + 130);
    e->layer = rdi32(r + 132); e->expert = rdi32(r + 136); e->ndim = rd32(r + 140);
    for (int i = 0; i < CBF_MAX_NDIM; i++) e->shape[i] = (int64_t)rd64(r + 144 + 8 * i);
    e->offset = rd64(r + 176); e->nbytes = rd64(r + 184); e->crc = rd32(r + 192);
    for (int k = 0; k < 3; k++) {
        const uint8_t *q = r + 200 + 48 * k;
        cbf_matrix *x = &e->mats[k];
        x->dtype = rdi32(q); x->rows = rdi32(q + 4); x->cols = rdi32(q + 8); x->scale_count = rdi32(q + 12);
        x->data_off = (int64_t)rd64(q + 16); x->data_bytes = (int64_t)rd64(q + 24);
        x->scale_off = (int64_t)rd64(q + 32); x->zero_off = (int64_t)rd64(q + 40);
    }
    for (int k = 0; k < 3; k++) e->bias_off[k] = (int64_t)rd64(r + 344 + 8 * k);
}


static void describe(const cbf_entry *e, char *buf, size_t n) {
    if (e->kind == CBF_EXPERT) snprintf(buf, n, "layer %d expert %d", e->layer, e->expert);
    else if (e->kind == CBF_TENSOR) snprintf(buf, n, "tensor %s", e->name);
    else snprintf(buf, n, "layer %d %s", e->layer, e->name);
}

static int part_ok(int64_t off, int64_t size, uint64_t blob) {
    return off == -1 || (off >= 0 && size >= 0 && (uint64_t)off <= blob && (uint64_t)size <= blob - (uint64_t)off);
}

/* The f32 biases of an expert / shared / dense-MLP blob: none (every offset 0) or each inside the blob,
 * 4-aligned, past offset 0 (the gate data starts there). */
static int biases_ok(const cbf_entry *e, int32_t inter, int32_t hidden) {
    int64_t n[3] = {inter, inter, hidden};
    if (!e->bias_off[0] && !e->bias_off[1] && !e->bias_off[2]) return 1;
    for (int k = 0; k < 3; k++)
        if (e->bias_off[k] <= 0 || e->bias_off[k] % 4 || !part_ok(e->bias_off[k], 4 * n[k], e->nbytes)) return 0;
    return 1;
}

/* One encoded matrix inside a blob of `blob` bytes: sizes consistent with its encoding, parts inside. */
static int matrix_ok(const cbf_matrix *x, uint64_t blob) {
    const cb_encoding *enc = cb_encoding_of(x->dtype);
    if (!enc || x->rows <= 0 || x->cols <= 0) return 0;
    if (x->data_off < 0 || x->data_bytes != cb_matrix_data_bytes(x->dtype, x->rows, x->cols)) return 0;
    if (x->scale_count != cb_matrix_scale_count(x->dtype, x->rows, x->cols)
        || cb_has_scale_array(enc) != (x->scale_off >= 0) || enc->zero_point != (x->zero_off >= 0))
        return 0;
    return part_ok(x->data_off, x->data_bytes, blob) && part_ok(x->scale_off, 4 * (int64_t)x->scale_count, blob)
           && part_ok(x->zero_off, 4, blob) && x->data_off % 4 == 0 && !(x->scale_off > 0 && x->scale_off % 4)
           && !(x->zero_off > 0 && x->zero_off % 4);
}

/* Whole-model entries (not used by this reader, validated like the Python reader does). */
static int dense_blob_ok(const cb_model *m, const cbf_entry *e) {
    if (e->dtype != CBF_U8 || e->ndim != 1 || e->shape[0] < 0 || (uint64_t)e->shape[0] != e->nbytes || e->offset % 4096)
        return 0;
    if (e->kind == CBF_MATRIX) {                       /* one matrix; the up/down descriptors stay zero */
        static const cbf_matrix zero;
        return matrix_ok(&e->mats[0], e->nbytes) && !memcmp(&e->mats[1], &zero, sizeof zero)
               && !memcmp(&e->mats[2], &zero, sizeof zero) && !e->bias_off[0] && !e->bias_off[1]
               && !e->bias_off[2];
    }
    const cbf_matrix *g = &e->mats[0], *u = &e->mats[1], *d = &e->mats[2];
    if (e->layer < 0 || e->layer >= m->info.n_layers || is_moe(m, e->layer)) return 0;
    for (int k = 0; k < 3; k++)
        if (!matrix_ok(&e->mats[k], e->nbytes)) return 0;
    return u->rows == g->rows && u->cols == g->cols && d->rows == g->cols && d->cols == g->rows   /* any encodings */
           && biases_ok(e, g->rows, g->cols);
}

static int blob_ok(const cb_model *m, const cbf_entry *e) {
    int32_t inter = e->kind == CBF_EXPERT ? m->info.inter : m->info.shared_inter, h = m->info.hidden;
    int32_t want[3][2] = {{inter, h}, {inter, h}, {h, inter}};
    if (e->offset % 4096 || (e->kind == CBF_EXPERT && (e->expert < 0 || e->expert >= m->info.n_experts)))
        return 0;
    for (int k = 0; k < 3; k++) {
        const cbf_matrix *x = &e->mats[k];
        if ((m->scheme != CBF_MIXED && x->dtype != m->scheme) || x->rows != want[k][0] || x->cols != want[k][1]
            || !matrix_ok(x, e->nbytes)) return 0;
    }
    return biases_ok(e, inter, h);
}

static int entry_ok(const cb_model *m, const cbf_entry *e, uint64_t data_end) {
    if (e->dtype > 9 || e->kind > CBF_DENSE_MLP || e->ndim > CBF_MAX_NDIM) return 0;
    if (e->offset < CBF_DATA_START || e->offset > data_end || e->nbytes > data_end - e->offset || e->offset % 64)
        return 0;
    if ((e->kind != CBF_EXPERT && e->expert != -1) || ((e->kind == CBF_TENSOR || e->kind == CBF_MATRIX) && e->layer != -1))
        return 0;
    if (e->kind == CBF_MATRIX || e->kind == CBF_DENSE_MLP) return dense_blob_ok(m, e);
    if (e->kind != CBF_TENSOR && !is_moe(m, e->layer)) return 0;
    if (e->kind == CBF_EXPERT || e->kind == CBF_SHARED) return blob_ok(m, e);
    uint64_t count = 1;
    for (uint32_t i = 0; i < e->ndim; i++) {   /* every product overflow-checked (issue 15) */
        if (e->shape[i] < 0 || __builtin_mul_overflow(count, (uint64_t)e->shape[i], &count)) return 0;
    }
    if (__builtin_mul_overflow(count, (uint64_t)dtype_size[e->dtype], &count) || count != e->nbytes) return 0;
    int32_t E = m->info.n_experts, h = m->info.hidden;
    if (e->kind == CBF_ROUTER) return e->dtype == CBF_F32 && e->ndim == 2 && e->shape[0] == E && e->shape[1] == h;
    if (e->kind == CBF_BIAS) return e->dtype == CBF_F32 && e->ndim == 1 && e->shape[0] == E;
    if (e->kind == CBF_SHARED_GATE) return e->dtype == CBF_F32 && e->ndim == 1 && e->shape[0] == h;
    return 1;
}

/* verify=1: scales, float expert weights and float tensors hold no NaN/Inf (the Python reader's rule). */
static int values_finite(const cb_model *m, const cbf_entry *e) {
    const uint8_t *p = m->map + e->offset;
    if (e->kind == CBF_EXPERT || e->kind == CBF_SHARED) {
        for (int k = 0; k < 3; k++) {
            const cbf_matrix *x = &e->mats[k];
            if (x->scale_off >= 0 && cb_count_nonfinite(p + x->scale_off, (size_t)x->scale_count, 0) != 0) return 0;
            if (x->dtype <= 2 && cb_count_nonfinite(p + x->data_off, (size_t)x->rows * (size_t)x->cols, x->dtype) != 0)
                return 0;
        }
        size_t nb[3] = {(size_t)e->mats[0].rows, (size_t)e->mats[0].rows, (size_t)e->mats[0].cols};
        for (int k = 0; k < 3; k++)
            if (e->bias_off[k] && cb_count_nonfinite(p + e->bias_off[k], nb[k], 0) != 0) return 0;
        return 1;
    }
    if (e->dtype > 2) return 1;                       /* ints, bool (float64: checked by Python only) */
    return cb_count_nonfinite(p, e->nbytes / (size_t)dtype_size[e->dtype], e->dtype) == 0;
}

/* Order for the duplicate scan: by name; MoE parts then by (kind, layer, expert). */
static int by_name(const void *a, const void *b) {
    return strcmp((*(const cbf_entry *const *)a)->name, (*(const cbf_entry *const *)b)->name);
}

static int by_slot(const void *a, const void *b) {
    const cbf_entry *x = *(const cbf_entry *const *)a, *y = *(const cbf_entry *const *)b;
    if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    return x->expert < y->expert ? -1 : x->expert > y->expert;
}

/* Two entries with one name (or one MoE slot) would make readers disagree: reject. O(n log n). */
static cb_status check_unique(cb_model *m) {
    uint64_t n = m->n_entries;
    if (n < 2) return CB_OK;
    const cbf_entry **v = malloc(n * sizeof *v);
    if (!v) return cb_fail(CB_E_NOMEM, "%s: cannot allocate the tensor table", m->path);
    for (uint64_t i = 0; i < n; i++) v[i] = &m->entries[i];
    qsort(v, n, sizeof *v, by_name);
    char what[200];
    cb_status s = CB_OK;
    for (uint64_t i = 1; i < n && s == CB_OK; i++)
        if (strcmp(v[i - 1]->name, v[i]->name) == 0)
            s = cb_fail(CB_E_FORMAT, "%s: duplicate tensor name '%s'", m->path, v[i]->name);
    uint64_t k = 0;
    for (uint64_t i = 0; i < n; i++)                  /* plain tensors and matrices are keyed by name only */
        if (m->entries[i].kind != CBF_TENSOR && m->entries[i].kind != CBF_MATRIX) v[k++] = &m->entries[i];
    qsort(v, k, sizeof *v, by_slot);
    for (uint64_t i = 1; i < k && s == CB_OK; i++)
        if (by_slot(&v[i - 1], &v[i]) == 0) {
            describe(v[i], what, sizeof what);
            s = cb_fail(CB_E_FORMAT, "%s: %s appears twice in the tensor table", m->path, what);
        }
    for (uint64_t i = 1, first = 0; i < k && s == CB_OK; i++) {   /* a layer's experts: expert 0's layout */
        if (v[i]->kind != CBF_EXPERT) continue;
        if (v[first]->kind != CBF_EXPERT || v[first]->layer != v[i]->layer) { first = i; continue; }
        if (v[i]->nbytes != v[first]->nbytes || memcmp(v[i]->mats, v[first]->mats, sizeof v[i]->mats) != 0) {
            describe(v[i], what, sizeof what);
            s = cb_fail(CB_E_FORMAT, "%s: %s is laid out unlike expert %d of its layer: a layer's experts share "
                        "one layout", m->path, what, v[first]->expert);
        }
    }
    free(v);
    return s;
}

/* A tensor named "model.layers.N.*" must have N < n_layers: the header and the table agree on the
 * model's depth (format/validate.py check_agreement does the same). -1 when the name has no layer. */
static int64_t named_layer(const char *name) {
    static const char pre[] = "model.layers.";
    if (strncmp(name, pre, sizeof pre - 1) != 0) return -1;
    const char *q = name + sizeof pre - 1;
    int64_t n = 0;
    int digits = 0;
    for (; *q >= '0' && *q <= '9' && digits < 12; q++, digits++) n = n * 10 + (*q - '0');
    return digits && *q == '.' ? n : -1;
}

/* ---- metadata cross-check: the integer `key` directly inside the root object's "source_config"
 * (the last one, as Python's json keeps the last duplicate). A tiny scanner over the JSON the
 * writer emits: strings with escapes skipped, depth tracked; no allocation. */
typedef struct { const uint8_t *p; size_t n, i; } json_cur;

static void skip_ws(json_cur *c) {
    while (c->i < c->n && (c->p[c->i] == ' ' || c->p[c->i] == '\n' || c->p[c->i] == '\t' || c->p[c->i] == '\r')) c->i++;
}

/* At an opening quote: advance past the string; its raw bytes are p[*start, *start + return). */
static size_t read_string(json_cur *c, size_t *start) {
    *start = ++c->i;
    while (c->i < c->n && c->p[c->i] != '"') c->i += c->p[c->i] == '\\' ? 2 : 1;
    if (c->i > c->n) c->i = c->n;
    size_t len = c->i - *start;
    if (c->i < c->n) c->i++;
    return len;
}

static int same(const json_cur *c, size_t start, size_t len, const char *want) {
    return len == strlen(want) && memcmp(c->p + start, want, len) == 0;
}

/* The value at c->i: 1 and *out if a plain integer literal, 0 if anything else. */
static int read_int(const json_cur *c, long long *out) {
    size_t v = c->i;
    int neg = v < c->n && c->p[v] == '-', digits = 0;
    long long x = 0;
    for (v += (size_t)neg; v < c->n && c->p[v] >= '0' && c->p[v] <= '9' && digits < 18; v++, digits++)
        x = x * 10 + (c->p[v] - '0');
    *out = neg ? -x : x;
    return digits > 0 && v < c->n && (c->p[v] == ',' || c->p[v] == '}' || c->p[v] <= ' ');
}

/* 1 found (*is_int: a plain integer literal, value in *out), 0 absent or null. */
static int meta_source_int(const uint8_t *p, size_t n, const char *key, long long *out, int *is_int) {
    json_cur c = {p, n, 0};
    int depth = 0, pending = 0, in_source = 0, found = 0, expect_key = 0;
    while (c.i < c.n) {
        uint8_t ch = c.p[c.i];
        if (ch != '"') {
            if (ch == '{' || ch == '[') {
                depth++;
                in_source = in_source || (pending && depth == 2 && ch == '{');
                if (in_source && depth == 2) found = 0;           /* a later source_config replaces */
                expect_key = ch == '{';
            } else if (ch == '}' || ch == ']') {
                if (depth == 2) in_source = 0;
                depth--;
            } else if (ch == ',') {
                expect_key = 1;
            }
            if (ch > ' ') pending = 0;
            c.i++;
            continue;
        }
        size_t start, len = read_string(&c, &start);
        int at_key = expect_key;
        expect_key = 0;
        pending = 0;
        skip_ws(&c);
        if (!at_key || c.i >= c.n || c.p[c.i] != ':') continue;
        c.i++;
        skip_ws(&c);
        if (depth == 1 && same(&c, start, len, "source_config")) {
            pending = 1;
        } else if (depth == 2 && in_source && same(&c, start, len, key)) {
            found = !(c.n - c.i >= 4 && memcmp(c.p + c.i, "null", 4) == 0);
            *is_int = read_int(&c, out);
        }
    }
    return found;
}

/* The metadata block's CRC, and its source_config agreeing with the header (validate.py check_agreement). */
cb_status cbf_check_meta(cb_model *m, const uint8_t *h) {
    uint64_t off = rd64(h + 40), n = rd64(h + 48);
    const uint8_t *meta = m->map + off;
    if (cb_crc32(meta, n) != rd32(h + 68)) return cb_fail(CB_E_FORMAT, "%s: metadata block is damaged (checksum mismatch)", m->path);
    static const char *keys[2] = {"num_hidden_layers", "hidden_size"};
    static const char *fields[2] = {"n_layers", "hidden"};
    int32_t want[2] = {m->info.n_layers, m->info.hidden};
    for (int k = 0; k < 2; k++) {
        long long v = 0;
        int is_int = 0;
        if (meta_source_int(meta, n, keys[k], &v, &is_int) && (!is_int || v != want[k]))
            return cb_fail(CB_E_FORMAT, "%s: metadata source_config.%s disagrees with the header and tensor table (%s=%d)",
                           m->path, keys[k], fields[k], want[k]);
    }
    return CB_OK;
}

cb_status cbf_parse_entries(cb_model *m, uint64_t table_off, uint64_t count, int32_t verify) {
    char what[200];
    m->entries = calloc(count ? count : 1, sizeof *m->entries);
    if (!m->entries) return cb_fail(CB_E_NOMEM, "%s: cannot allocate the tensor table", m->path);
    m->n_entries = count;
    for (uint64_t i = 0; i < count; i++) {
        cbf_entry *e = &m->entries[i];
        decode_entry(m->map + table_off + i * CBF_ENTRY_SIZE, e);
        describe(e, what, sizeof what);
        if (!entry_ok(m, e, table_off))
            return cb_fail(CB_E_FORMAT, "%s: %s: entry out of bounds or inconsistent", m->path, what);
        if (named_layer(e->name) >= m->info.n_layers)
            return cb_fail(CB_E_FORMAT, "%s: the header says %d layers, but the tensor table holds '%s'", m->path,
                           m->info.n_layers, e->name);
        if (verify && cb_crc32(m->map + e->offset, e->nbytes) != e->crc)
            return cb_fail(CB_E_FORMAT, "%s: %s is damaged (checksum mismatch)", m->path, what);
        if (verify && !values_finite(m, e))
            return cb_fail(CB_E_FORMAT, "%s: %s is invalid: non-finite weights or scales", m->path, what);
    }
    return check_unique(m);
}
