"""Opt-in `routing.policy: balanced`: a token bucket on the experts themselves.

Role in the data flow: replaces the exact `route` step (x -> idx, w) when a
config asks for it. Each expert keeps a ring buffer of the gate mass of its last
`window` assignments; walking a token's candidates best-first, an expert whose
bucket is above `threshold` x the mean bucket is skipped and the next-best
candidate takes the slot (if too few remain, skipped ones fill in, best first).
Weights follow the family gating over the experts actually chosen, per the gating kind's row of
format/gating_spec.KINDS (scores, renormalisation, groups + correction bias, scaling).

THIS CHANGES OUTPUTS (unlike the pool's replica balancer). Its cost against
exact routing is measured by `measure_cosine` and recorded in docs/POOL.md.
Scores are computed here in numpy (float64), so even with a threshold that never
triggers the weights match the exact kernel only to float rounding.
"""
import numpy as np

from ..errors import InvalidArgument
from ..format.gating_spec import BY_NAME, GATING_NAMES

POLICIES = ("exact", "balanced")


def _gating_kind(gating):
    """The GatingKind row (format/gating_spec.KINDS) of a GatingSpec, a kind name or a header code."""
    kind = getattr(gating, "kind", gating)
    row = BY_NAME.get(GATING_NAMES.get(kind, kind) if isinstance(kind, int) else kind)
    if row is None:
        raise InvalidArgument(f"routing.policy balanced: unknown gating kind {kind!r}")
    return row


def gate_scores(x, router, gating, bias=None):
    """(selection scores, weight scores), both float64 [n, E], for the family gating."""
    logits = np.asarray(x, np.float64) @ np.asarray(router, np.float64).T
    kind = _gating_kind(gating)
    if kind.bias == "logits" and bias is not None:      # the router's linear bias (gpt-oss)
        logits = logits + np.asarray(bias, np.float64)[None, :]
    if kind.scores == "softmax":
        z = np.exp(logits - logits.max(axis=1, keepdims=True))
        s = z / z.sum(axis=1, keepdims=True)
    else:
        s = 1.0 / (1.0 + np.exp(-logits))
    if not kind.grouped:
        return s, s
    sel = s + (0.0 if bias is None else np.asarray(bias, np.float64)[None, :])
    return _group_limit(sel, int(gating.n_group), int(gating.topk_group)), s


def _group_limit(sel, n_group, topk_group):
    """DeepSeek-V3 group-limited selection: keep the topk_group groups by sum of their top-2 scores."""
    if n_group <= 1:
        return sel
    n, n_exp = sel.shape
    grouped = sel.reshape(n, n_group, n_exp // n_group)
    group_score = np.sort(grouped, axis=2)[:, :, -2:].sum(axis=2)
    keep = np.argsort(-group_score, axis=1, kind="stable")[:, :topk_group]
    mask = np.zeros((n, n_group), dtype=bool)
    np.put_along_axis(mask, keep, True, axis=1)
    return np.where(np.repeat(mask, n_exp // n_group, axis=1), sel, -np.inf)


def _final_weights(chosen_scores, gating):
    kind = _gating_kind(gating)
    w = np.asarray(chosen_scores, np.float64)
    if kind.renorm == "always":
        w = w / w.sum()
    elif kind.renorm == "norm_topk_prob" and getattr(gating, "norm_topk_prob", True):
        w = w / (w.sum() + 1e-20)
    if kind.scaled:
        w = w * float(getattr(gating, "routed_scaling_factor", 1.0))
    return w


class BalancedRouting:
    """Token-bucket expert selection over a stream of tokens (state carries across calls)."""

    def __init__(self, window=64, threshold=1.8):
        if int(window) < 1 or not float(threshold) > 0:
            raise InvalidArgument(f"routing.policy balanced: need window >= 1 and threshold > 0, "
                                  f"got {window}, {threshold}")
        self.window, self.threshold = int(window), float(threshold)
        self.rings = {}  # layer -> (values[E, window], pos[E])
        self.replaced = 0

    def _ring(self, layer, n_experts):
        vals, pos = self.rings.get(layer, (None, None))
        if vals is None or vals.shape[0] != n_experts:
            old = vals
            vals, pos = np.zeros((n_experts, self.window)), np.zeros(n_experts, dtype=np.int64)
            if old is not None:  # hot-added experts start with an empty bucket
                keep = min(len(old), n_experts)
                vals[:keep] = old[:keep]
            self.rings[layer] = (vals, pos)
        return vals, pos

    def route(self, layer, x, router, gating, bias=None):
        """(idx int32[n,k], w float32[n,k]) with over-budget experts replaced by the next best."""
        sel, score = gate_scores(x, router, gating, bias)
        n, n_exp = sel.shape
        k = int(gating.top_k)
        vals, pos = self._ring(layer, n_exp)
        sums = vals.sum(axis=1)
        idx = np.zeros((n, k), np.int32)
        w = np.zeros((n, k), np.float32)
        for t in range(n):
            order = [int(e) for e in np.argsort(-sel[t], kind="stable") if np.isfinite(sel[t, e])]
            cap = self.threshold * sums.mean()
            picked = [e for e in order if sums[e] <= cap or cap == 0.0][:k]
            if len(picked) < k:
                picked += [e for e in order if e not in picked][:k - len(picked)]
            self.replaced += sum(1 for e in picked if e not in order[:k])
            wt = _final_weights(score[t, picked], gating)
            idx[t], w[t] = picked, wt
            for e, m in zip(picked, wt):
                sums[e] += m - vals[e, pos[e]]
                vals[e, pos[e]] = m
                pos[e] = (pos[e] + 1) % self.window
        return idx, w


def cosine(a, b):
    """Mean per-token cosine similarity between two [n, h] outputs."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    num = (a * b).sum(axis=1)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return float(np.mean(num / np.maximum(den, 1e-30)))


def route_balanced(policy, engine, layer, x):
    """Balanced routing over the engine's current table (hot-added experts included): (idx, w)."""
    t = engine.table(layer)
    idx, w = policy.route(layer, x, t.router, t.gating, t.bias)
    return t.ids[idx].astype(np.int32), w


def forward_with_routing(engine, layer, x, idx, w):
    """The layer output for a given routing, with the MoeExecutor's own kernels (expert, shared, combine)."""
    from .. import native
    n, k = idx.shape
    slot_out = np.empty((n, k, x.shape[1]), np.float32)
    for e in np.unique(idx):
        tokens, slots = np.nonzero(idx == e)
        slot_out[tokens, slots] = engine.expert_forward(layer, int(e), x, tokens.astype(np.int32))
    return native.combine(w, slot_out, engine.shared_forward(layer, x))


def measure_cosine(engine, layer, batches, window=64, threshold=1.8):
    """Exact vs balanced on a stream of batches: mean cosine, worst token, replaced share, load imbalance."""
    policy = BalancedRouting(window, threshold)
    cos, worst, slots = [], 1.0, 0
    load_exact, load_bal = {}, {}
    for x in batches:
        y_exact = engine.moe_forward(layer, x)
        idx_e, _ = engine.route(layer, x)
        idx_b, w_b = route_balanced(policy, engine, layer, x)
        y_bal = forward_with_routing(engine, layer, x, idx_b, w_b)
        a, b = y_exact.astype(np.float64), y_bal.astype(np.float64)
        per_token = (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-30)
        cos.append(per_token)
        worst = min(worst, float(per_token.min()))
        slots += idx_b.size
        for table, idx in ((load_exact, idx_e), (load_bal, idx_b)):
            for e, c in zip(*np.unique(idx, return_counts=True)):
                table[int(e)] = table.get(int(e), 0) + int(c)
    imbalance = lambda t: max(t.values()) / (sum(t.values()) / len(t))
    return {"mean_cosine": float(np.concatenate(cos).mean()), "min_cosine": worst,
            "replaced_share": policy.replaced / max(1, slots),
            "expert_imbalance_exact": imbalance(load_exact), "expert_imbalance_balanced": imbalance(load_bal)}
