/* model.c — cb_model_*: open a .colibri container from C (docs/FORMAT.md).
 *
 * Role: lets C/C++ programs embed the engine without Python. The file is
 * mmapped read-only; the header and tensor table are decoded and checked by
 * model_parse.c; this file assembles per-layer cb_moe_layer views whose
 * pointers go straight into the mapping (valid until cb_model_close).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cb_internal.h"
#include "model_internal.h"

static cb_matrix to_matrix(const uint8_t *blob, const cbf_matrix *x) {
    cb_matrix mt;
    mt.data = blob + x->data_off;
    mt.scales = x->scale_off >= 0 ? (const float *)(blob + x->scale_off) : NULL;
    mt.zero = x->zero_off >= 0 ? (const int32_t *)(blob + x->zero_off) : NULL;
    mt.dtype = x->dtype;
    mt.rows = x->rows;
    mt.cols = x->cols;
    return mt;
}

static cb_expert to_expert(const cb_model *m, const cbf_entry *e) {
    const uint8_t *blob = m->map + e->offset;
    cb_expert ex;
    memset(&ex, 0, sizeof ex);
    ex.gate = to_matrix(blob, &e->mats[0]);
    ex.up = to_matrix(blob, &e->mats[1]);
    ex.down = to_matrix(blob, &e->mats[2]);
    if (e->bias_off[0]) {
        ex.gate_bias = (const float *)(blob + e->bias_off[0]);
        ex.up_bias = (const float *)(blob + e->bias_off[1]);
        ex.down_bias = (const float *)(blob + e->bias_off[2]);
    }
    if (e->kind == CBF_EXPERT) ex.act = m->act, ex.alpha = m->alpha, ex.limit = m->limit;
    return ex;
}

static void place_entry(cb_model *m, const cbf_entry *e) {
    cbf_layer *L = &m->layers[e->layer];
    const float *f = (const float *)(m->map + e->offset);
    switch (e->kind) {
    case CBF_ROUTER: L->router = f; break;
    case CBF_BIAS: L->bias = f; break;
    case CBF_SHARED_GATE: L->shared_gate = f; break;
    case CBF_SHARED: L->shared = to_expert(m, e); L->has_shared = 1; break;
    case CBF_EXPERT:
        L->experts[e->expert] = to_expert(m, e);
        L->expert_ptrs[e->expert] = &L->experts[e->expert];
        break;
    }
}

static cb_status check_layer(const cb_model *m, int32_t l) {
    const cbf_layer *L = &m->layers[l];
    if (!L->router) return cb_fail(CB_E_FORMAT, "%s: layer %d: router missing", m->path, l);
    for (int32_t e = 0; e < m->info.n_experts; e++)
        if (!L->expert_ptrs[e]) return cb_fail(CB_E_FORMAT, "%s: layer %d: expert %d missing", m->path, l, e);
    if (m->info.shared_inter > 0 && !L->has_shared)
        return cb_fail(CB_E_FORMAT, "%s: layer %d: shared expert missing", m->path, l);
    if (m->shared_gate && !L->shared_gate)
        return cb_fail(CB_E_FORMAT, "%s: layer %d: shared expert gate missing", m->path, l);
    return CB_OK;
}

cb_status cbf_build_layers(cb_model *m) {
    int32_t n = m->info.n_layers, E = m->info.n_experts;
    m->layers = calloc((size_t)n, sizeof *m->layers);
    if (!m->layers) return cb_fail(CB_E_NOMEM, "%s: out of memory", m->path);
    for (int32_t l = 0; l < n; l++) {
        if (!(m->moe_mask[l / 8] >> (l % 8) & 1)) continue;
        m->layers[l].is_moe = 1;
        m->layers[l].experts = calloc((size_t)E, sizeof(cb_expert));
        m->layers[l].expert_ptrs = calloc((size_t)E, sizeof(cb_expert *));
        if (!m->layers[l].experts || !m->layers[l].expert_ptrs)
            return cb_fail(CB_E_NOMEM, "%s: out of memory", m->path);
    }
    for (uint64_t i = 0; i < m->n_entries; i++)
        if (m->entries[i].kind != CBF_TENSOR) place_entry(m, &m->entries[i]);
    for (int32_t l = 0; l < n; l++) {
        if (!m->layers[l].is_moe) continue;
        cb_status s = check_layer(m, l);
        if (s != CB_OK) return s;
    }
    return CB_OK;
}

static cb_status open_into(cb_model *m, const char *path, int32_t verify) {
    uint8_t header[CBF_HEADER_SIZE];
    struct stat st;
    m->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);   /* a FIFO must not block the open */
    if (m->fd < 0) return cb_fail(CB_E_IO, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(m->fd, &st) != 0) return cb_fail(CB_E_IO, "%s: fstat: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return cb_fail(CB_E_IO, "%s: cannot open: not a regular file", path);
    m->size = (size_t)st.st_size;
    if (m->size < CBF_HEADER_SIZE)
        return cb_fail(CB_E_FORMAT, "%s: truncated: %zu bytes, smaller than the header", path, m->size);
    if (pread(m->fd, header, sizeof header, 0) != (ssize_t)sizeof header)
        return cb_fail(CB_E_IO, "%s: cannot read the header", path);
    uint64_t table_off, count;
    uint32_t table_crc;
    cb_status s = cbf_parse_header(m, header, &table_off, &count, &table_crc);
    if (s != CB_OK) return s;
    void *map = mmap(NULL, m->size, PROT_READ, MAP_SHARED, m->fd, 0);
    if (map == MAP_FAILED) return cb_fail(CB_E_IO, "%s: mmap: %s", path, strerror(errno));
    m->map = map;
    if (cb_crc32(m->map + table_off, count * CBF_ENTRY_SIZE) != table_crc)
        return cb_fail(CB_E_FORMAT, "%s: tensor table is damaged (checksum mismatch)", path);
    s = cbf_parse_entries(m, table_off, count, verify);
    if (s == CB_OK) s = cbf_check_meta(m, header);
    return s != CB_OK ? s : cbf_build_layers(m);
}

cb_status cb_model_open(const char *path, int32_t verify, cb_model **out) {
    if (!out) return cb_fail(CB_E_INVALID, "cb_model_open: out is NULL");
    *out = NULL;
    if (!path) return cb_fail(CB_E_INVALID, "cb_model_open: path is NULL");
    cb_model *m = calloc(1, sizeof *m);
    if (!m) return cb_fail(CB_E_NOMEM, "%s: out of memory", path);
    m->fd = -1;
    snprintf(m->path, sizeof m->path, "%s", path);
    cb_status s = open_into(m, path, verify);
    if (s != CB_OK) {
        cb_model_close(m);
        return s;
    }
    *out = m;
    return CB_OK;
}

void cb_model_close(cb_model *m) {
    if (!m) return;
    if (m->layers) {
        for (int32_t l = 0; l < m->info.n_layers; l++) {
            free(m->layers[l].experts);
            free((void *)m->layers[l].expert_ptrs);
        }
        free(m->layers);
    }
    free(m->entries);
    if (m->map) munmap((void *)m->map, m->size);
    if (m->fd >= 0) close(m->fd);
    free(m);
}

const char *cb_model_last_error(const cb_model *m) { return m ? m->last_error : cb_last_error(); }

static cb_status model_fail(cb_model *m, cb_status s) {
    snprintf(m->last_error, sizeof m->last_error, "%s", cb_last_error());
    return s;
}

cb_status cb_model_get_info(const cb_model *m, cb_model_info *out) {
    if (!m || !out) return cb_fail(CB_E_INVALID, "cb_model_get_info: NULL argument");
    *out = m->info;
    return CB_OK;
}

cb_status cb_model_moe_layer(cb_model *m, int32_t layer, cb_moe_layer *out) {
    if (!m || !out) return cb_fail(CB_E_INVALID, "cb_model_moe_layer: NULL argument");
    if (layer < 0 || layer >= m->info.n_layers || !m->layers[layer].is_moe)
        return model_fail(m, cb_fail(CB_E_INVALID, "%s: layer %d is not a MoE layer", m->path, layer));
    const cbf_layer *L = &m->layers[layer];
    out->hidden = m->info.hidden;
    out->gating = m->info.gating;
    out->router = L->router;
    out->bias = L->bias;
    out->experts = (const cb_expert *const *)L->expert_ptrs;
    out->n_shared = L->has_shared;
    out->shared = L->has_shared ? &L->shared : NULL;
    out->shared_gate = L->shared_gate;
    return CB_OK;
}

cb_status cb_model_tensor_f32(cb_model *m, const char *name, const float **data, int64_t *shape, int32_t *ndim) {
    if (!m || !name || !data || !shape || !ndim) return cb_fail(CB_E_INVALID, "cb_model_tensor_f32: NULL argument");
    for (uint64_t i = 0; i < m->n_entries; i++) {
        const cbf_entry *e = &m->entries[i];
        if (strncmp(e->name, name, sizeof e->name) != 0) continue;
        if (e->kind == CBF_EXPERT || e->kind == CBF_SHARED || e->dtype != CBF_F32)
            return model_fail(m, cb_fail(CB_E_UNSUPPORTED, "%s: tensor %s is not float32", m->path, name));
        *data = (const float *)(m->map + e->offset);
        for (uint32_t d = 0; d < e->ndim; d++) shape[d] = e->shape[d];
        *ndim = (int32_t)e->ndim;
        return CB_OK;
    }
    return model_fail(m, cb_fail(CB_E_INVALID, "%s: no tensor named %s", m->path, name));
}
