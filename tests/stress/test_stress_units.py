"""Stress harness pieces that need no Ray or store: schedule, workload, accounting, RSS, report, config."""
import json
import os

import numpy as np
import pytest

from colibri_dist.errors import ConfigError
from colibri_dist.stress import accounting, report, rss, schedule, settings, workload


# ------------------------------------------------------------------ schedule

def test_schedule_orders_and_repeats_events_within_horizon():
    specs = [schedule.FaultSpec("kill_worker", 5, 10), schedule.FaultSpec("enospc", 2, 0, 3)]
    sched = schedule.FaultSchedule(specs, horizon_s=30)
    assert [(e.at_s, e.kind) for e in sched.events] == [
        (2, "enospc"), (5, "kill_worker"), (15, "kill_worker"), (25, "kill_worker")]
    assert sched.planned() == {"enospc": 1, "kill_worker": 3}
    assert sched.events[0].duration_s == 3
    assert [e.kind for e in sched.due(4.9)] == ["enospc"]
    assert sched.due(4.9) == []
    assert [e.at_s for e in sched.due(100)] == [5, 15, 25]
    assert sched.remaining() == 0


def test_schedule_rejects_unknown_kind():
    with pytest.raises(ValueError, match="unknown stress event kind"):
        schedule.specs_from_events([("melt_cpu", settings.EventSpec())])


# ------------------------------------------------------------------ workload

def _table(n_exp=16, h=32, layers=(0, 1), seed=1):
    rng = np.random.default_rng(seed)
    routers = {l: rng.standard_normal((n_exp, h)).astype(np.float32) for l in layers}
    return lambda: {l: (np.arange(n_exp), routers[l]) for l in layers}


def test_workload_ids_unique_across_streams_and_batches():
    table = _table()
    streams = [workload.JobStream(s, table, batch_tokens=8, seed=3) for s in range(3)]
    seen = set()
    for _ in range(5):
        for st in streams:
            b = st.next_batch()
            ids = b.token_ids.tolist()
            assert not seen & set(ids)
            seen |= set(ids)
            assert b.inputs[0].dtype == np.float32 and b.inputs[0].shape == (8, 32)
    assert len(seen) == 3 * 5 * 8


def test_workload_is_skewed_and_hot_set_shifts():
    st = workload.JobStream(0, _table(n_exp=32), batch_tokens=256, zipf_s=1.3, shift_every=4, seed=5)
    epoch0 = [st.next_batch() for _ in range(4)]
    epoch1 = [st.next_batch() for _ in range(4)]
    counts = np.bincount(np.concatenate([b.targets[0] for b in epoch0]), minlength=32)
    top4_share = np.sort(counts)[::-1][:4].sum() / counts.sum()
    assert top4_share > 0.4            # uniform would be 4/32 = 0.125
    assert workload.hot_set(epoch0, 0) != workload.hot_set(epoch1, 0)


def test_workload_follows_live_expert_table():
    rng = np.random.default_rng(0)
    router = rng.standard_normal((10, 16)).astype(np.float32)
    live = {"ids": np.arange(10)}
    st = workload.JobStream(0, lambda: {0: (live["ids"], router)}, batch_tokens=64, seed=0)
    st.next_batch()
    live["ids"] = np.array([2, 3, 9])
    assert set(st.next_batch().targets[0].tolist()) <= {2, 3, 9}


def test_workload_same_seed_same_batches():
    a = workload.JobStream(1, _table(), 16, seed=9).next_batch()
    b = workload.JobStream(1, _table(), 16, seed=9).next_batch()
    assert np.array_equal(a.inputs[1], b.inputs[1]) and np.array_equal(a.token_ids, b.token_ids)


# ------------------------------------------------------------------ accounting

def _ref(n=6, h=4, seed=0):
    return np.random.default_rng(seed).standard_normal((n, h)).astype(np.float32)


def test_ledger_clean_batch():
    led = accounting.TokenLedger()
    ref = _ref()
    led.submit(range(6))
    assert led.check(range(6), [ref.copy(), ref.copy()], [ref, ref]) == (0, 0, 0)
    assert (led.tokens, led.mismatches, led.lost, led.duplicated, led.rows_checked) == (6, 0, 0, 0, 12)
    assert led.close() == 0


def test_ledger_counts_a_row_replaced_by_another_token_as_lost_and_duplicated():
    led = accounting.TokenLedger()
    ref = _ref()
    y = ref.copy()
    y[4] = ref[1]                       # token 4's slot holds token 1's result
    led.submit(range(6))
    assert led.check(range(6), [y], [ref]) == (1, 1, 1)


def test_ledger_one_bit_flip_is_a_mismatch_and_a_loss():
    ref = _ref()
    y = ref.copy()
    y.view(np.uint32)[2, 3] ^= 1
    assert accounting.compare_rows(y, ref) == (1, {2}, 0)


def test_ledger_same_token_lost_in_two_layers_counts_once():
    led = accounting.TokenLedger()
    ref = _ref()
    y = ref.copy()
    y[0] = 0
    led.submit(range(6))
    assert led.check(range(6), [y, y], [ref, ref]) == (2, 1, 0)


def test_ledger_wrong_shape_loses_all_and_failed_batch_loses_all():
    led = accounting.TokenLedger()
    ref = _ref()
    led.submit(range(6))
    assert led.check(range(6), [ref[:5]], [ref]) == (6, 6, 0)
    led.submit(range(10, 13))
    led.fail(range(10, 13), RuntimeError("worker died"))
    assert led.lost == 9 and led.tokens == 6 and "worker died" in led.errors[0][1]


def test_ledger_double_completion_and_unanswered_tokens():
    led = accounting.TokenLedger()
    ref = _ref(2)
    led.submit([7, 8])
    led.check([7, 8], [ref], [ref])
    led.check([7, 8], [ref], [ref])
    assert led.duplicated == 2
    led.submit([9])
    assert led.close() == 1 and led.lost == 1
    with pytest.raises(ValueError, match="submitted twice"):
        led.submit([7])


def test_ledger_nan_rows_compare_as_mismatch():
    ref = _ref()
    y = ref.copy()
    y[1, 0] = np.nan
    assert accounting.compare_rows(y, ref)[0] == 1


# ------------------------------------------------------------------ rss

def test_read_rss_of_this_process_and_of_a_missing_pid(tmp_path):
    me = rss.read_rss(os.getpid())
    assert me["VmRSS"] > 1024 * 1024
    assert rss.read_rss(2 ** 31 - 5) is None


def test_rss_sampler_tracks_baseline_peak_and_restarts(tmp_path):
    def write(pid, kb):
        d = tmp_path / str(pid)
        d.mkdir(exist_ok=True)
        (d / "status").write_text(f"Name:\tx\nVmRSS:\t{kb} kB\nRssAnon:\t{kb // 2} kB\n")
    pids = {"w0": 100}
    sampler = rss.RssSampler(lambda: dict(pids), proc_root=str(tmp_path))
    write(100, 1000); sampler.sample_once()
    write(100, 3000); sampler.sample_once()
    write(200, 500); pids["w0"] = 200; sampler.sample_once()      # restarted worker
    write(200, 900); sampler.sample_once()
    s = sampler.summary(budget=4096 * 1024)["w0"]
    assert s["pids"] == [100, 200]
    assert s["peak_bytes"] == 3000 * 1024 and s["peak_growth_bytes"] == 2000 * 1024
    assert s["baseline_bytes"] == 1000 * 1024 and s["samples"] == 4


# ------------------------------------------------------------------ report

class _Rec:
    def __init__(self, kind, ok):
        self.kind, self.recovered = kind, ok

    def as_dict(self):
        return {"kind": self.kind, "recovered": self.recovered}


def _report(ledger, faults=(), rss_summary=None, batches=3):
    rss_summary = rss_summary or {"w0": {"peak_bytes": 10, "peak_growth_bytes": 5, "budget_bytes": 4}}
    return report.build_report(
        ledger=ledger, batches=batches, elapsed_s=2.0, faults=list(faults), planned={}, rss=rss_summary,
        rss_slack_bytes=0, cache_stats={"gets": 4, "hits": 3, "misses": 1, "ram": {"hits": 3, "misses": 1},
                     "ssd": {"hits": 0, "misses": 1}, "mmap": {"hits": 1, "misses": 0}, "spill_bytes": 77},
        budget=4, run_info={})


def test_report_passes_clean_run_and_derives_rates(tmp_path):
    led = accounting.TokenLedger()
    led.submit(range(6)); led.check(range(6), [_ref()], [_ref()])
    rep = _report(led, [_Rec("kill_worker", True), _Rec("kill_worker", True)])
    assert rep["passed"] and rep["exit_code"] == 0
    assert rep["tokens"] == 6 and rep["tokens_per_s"] == 3.0
    assert rep["faults_injected"] == {"kill_worker": 2} == rep["faults_recovered"]
    assert rep["hit_rates"] == {"ram": 0.75, "ssd": 0.0, "mmap": 1.0, "overall": 0.75}
    assert rep["spill_bytes"] == 77
    assert rep["rss_peak_bytes"] == {"w0": 10} and rep["rss_held"] is False
    path = report.write_report(rep, str(tmp_path / "out"))
    assert json.load(open(path))["tokens"] == 6
    assert not os.path.exists(path + ".tmp")


@pytest.mark.parametrize("damage", ["mismatch", "lost", "dup", "fault", "idle"])
def test_report_fails_on_any_damage(damage):
    led = accounting.TokenLedger()
    faults = [_Rec("enospc", damage != "fault")]
    ref = _ref()
    y = ref.copy()
    led.submit(range(6))
    if damage == "mismatch":
        y.view(np.uint32)[0, 0] ^= 1
    if damage == "dup":
        led.check(range(6), [ref], [ref])
    led.check(range(6), [y], [ref])
    if damage == "lost":
        led.submit([99])
        led.close()
    rep = _report(led, faults, batches=0 if damage == "idle" else 3)
    assert rep["exit_code"] == 1 and rep["passed"] is False


def test_sum_stats_nested():
    total = report.sum_stats([{"hits": {"ram": 1}, "spill_bytes": 2, "ok": True},
                              {"hits": {"ram": 2, "ssd": 1}, "spill_bytes": 3}])
    assert total == {"hits": {"ram": 3, "ssd": 1}, "spill_bytes": 5}


# ------------------------------------------------------------------ config

def test_packaged_default_config_loads_and_stays_under_ten_percent():
    cfg = settings.load_stress_config()
    assert cfg.stress.cache_fraction <= 0.10
    assert cfg.pool.workers >= 1
    kinds = {k for k, _ in settings.enabled_events(cfg.stress)}
    assert {"corrupt_spill", "enospc", "slow_source", "kill_worker", "truncate_segment",
            "hot_add", "hot_remove"} <= kinds


def test_repo_and_packaged_default_configs_are_identical():
    here = os.path.dirname(os.path.abspath(__file__))
    repo = open(os.path.join(here, "..", "..", "configs", "offload-stress.yaml")).read()
    assert open(settings.default_config_path()).read() == repo


@pytest.mark.parametrize("text, needle", [
    ("stress:\n  streams: 0\n", "stress.yaml:2:12: stress.streams: expected a positive integer"),
    ("stress:\n  faults:\n    melt: {}\n", "stress.yaml:3:5: stress.faults.melt: unknown key"),
    ("stress:\n  cache_fraction: 2\n", "stress.cache_fraction: expected a number in (0, 1]"),
    ("stress:\n  faults:\n    remove_node: {first_s: 3}\n", "needs stress.cluster.nodes >= pool.workers + 2 = 4"),
    ("stress:\n  hot_add: {every_s: -1}\n", "stress.hot_add.every_s: expected seconds >= 0"),
    ("pool:\n  workers: 0\n", "pool.workers: the stress run drives a Ray pool"),
    ("stres: {}\n", "stress.yaml:1:1: stres: unknown key"),
])
def test_config_errors_name_file_line_and_key(tmp_path, text, needle):
    path = tmp_path / "stress.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        settings.load_stress_config(str(path))
    assert needle in str(exc.value)


def test_cli_config_error_exits_2_with_location(tmp_path, capsys):
    from colibri_dist.cli import main
    bad = tmp_path / "bad.yaml"
    bad.write_text("stress:\n  batch_tokens: many\n")
    assert main(["stress", str(bad), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml:2:17: stress.batch_tokens: expected an integer" in err
    assert not (tmp_path / "out").exists()


def test_cli_rejects_non_positive_duration(tmp_path, capsys):
    from colibri_dist.cli import main
    assert main(["stress", "--duration", "0", "--out", str(tmp_path / "out")]) == 2
    assert "--duration" in capsys.readouterr().err
