"""`colibri bench scale`: the real shapes' sizes, the checkpoint (a valid Hugging Face checkpoint that converts),
the routing summary, the memory limit, the bounds, and the whole bench on the toy shapes in one process
(the real sizes take 10-25 GB of disk and minutes: docs/PERFORMANCE.md has their runs)."""
import json
import os

import numpy as np
import pytest

from colibri_dist.bench.scale import checkpoint as ckpt
from colibri_dist.bench.scale import limits, routing, run, shapes, summary
from colibri_dist.format.quantize import bf16_bits_to_f32, f32_to_bf16_bits   # what the checkpoint writes with

ROUTING = {"skew": ckpt.DEFAULT_SKEW, "locality": ckpt.DEFAULT_LOCALITY}


def test_real_shapes_have_the_published_sizes():
    q = shapes.config("qwen3-30b-a3b", 48)
    params = shapes.nbytes(q) // 2                      # all bf16
    assert 30.4e9 < params < 30.6e9                     # Qwen3-30B-A3B: 30.5 B parameters
    assert shapes.nbytes(shapes.config("qwen3-30b-a3b", 8)) == 11_214_594_048
    d = shapes.config("deepseek-v3", 1)
    names = {n for n, _, _ in shapes.tensors(d)}
    assert "model.layers.0.mlp.experts.255.down_proj.weight" in names
    assert "model.layers.0.mlp.gate.e_score_correction_bias" in names
    assert shapes.kv_bytes_per_token(d) == (512 + 64) * 4
    assert shapes.kv_bytes_per_token(shapes.config("qwen3-30b-a3b", 8)) == 8 * 2 * 4 * 128 * 4
    with pytest.raises(ValueError, match="--shape"):
        shapes.config("llama-70b", 1)


def test_bf16_bits_round_to_nearest_even_and_weights_stay_in_range():
    torch = pytest.importorskip("torch")
    x = np.concatenate([[1.0, 1.00390625, 1.01171875, -2.5, 3.0e-3],                 # ties at 1+2^-8, 1+3*2^-8
                        np.random.default_rng(1).standard_normal(10_000)]).astype(np.float32)
    want = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(f32_to_bf16_bits(x), want)                                  # torch's rounding, bit for bit
    assert bf16_bits_to_f32(f32_to_bf16_bits(x))[:3].tolist() == [1.0, 1.0, 1.015625]
    w = bf16_bits_to_f32(ckpt.random_bf16(np.random.default_rng(0), 100_000))
    assert np.all(np.abs(w) < 0.03125) and np.all(np.abs(w) >= 2.0 ** -9)
    assert abs(np.mean(w > 0) - 0.5) < 0.01


def test_checkpoint_is_reproducible_sharded_and_loads_in_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = shapes.config("qwen3-tiny", 2)
    a = ckpt.build(str(tmp_path / "a"), cfg, ROUTING, shard_bytes=200_000, log=lambda m: None)
    b = ckpt.build(str(tmp_path / "b"), cfg, ROUTING, shard_bytes=10 << 20, log=lambda m: None)
    index = json.load(open(os.path.join(a, "model.safetensors.index.json")))
    assert len(set(index["weight_map"].values())) > 3 and sorted(os.listdir(b)) == [".complete", "config.json", "model-00001-of-00001.safetensors", "model.safetensors.index.json"]
    from safetensors import safe_open
    name = "model.layers.1.mlp.experts.7.up_proj.weight"
    with safe_open(os.path.join(a, index["weight_map"][name]), "pt") as fa, \
            safe_open(os.path.join(b, "model-00001-of-00001.safetensors"), "pt") as fb:
        assert (fa.get_tensor(name) == fb.get_tensor(name)).all()        # seeded per tensor, not per shard
    model, info = transformers.AutoModelForCausalLM.from_pretrained(a, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert model.config.num_experts == 32 and model.config.num_hidden_layers == 2
    mtime = os.path.getmtime(os.path.join(a, "config.json"))
    ckpt.build(a, cfg, ROUTING, shard_bytes=200_000, log=lambda m: None)        # complete: kept
    assert os.path.getmtime(os.path.join(a, "config.json")) == mtime


def test_routing_summary_counts_reuse_popularity_and_use():
    picks = {0: [np.array([0, 1]), np.array([1, 2]), np.array([1, 2])],      # reuse 1/2 then 2/2
             1: [np.array([3, 4]), np.array([5, 6]), np.array([7, 0])]}       # reuse 0
    s = routing.summarize(picks, n_experts=10, top_k=2)
    assert s["reuse_by_layer"] == [0.75, 0.0] and s["reuse"] == 0.375 and s["reuse_chance"] == 0.2
    assert s["top10_share"] == pytest.approx((3 / 6 + 1 / 6) / 2)            # 1 expert = the top 10% of 10
    assert s["used_fraction"] == pytest.approx((3 / 10 + 6 / 10) / 2) and s["tokens"] == 3


def test_memory_limit_reports_an_oom_kill_and_what_the_process_read(tmp_path):
    why = limits.available()
    if why:
        pytest.skip(why)
    with limits.MemoryLimit(64 << 20, name=f"colibri-test-{os.getpid()}") as lim:
        r = lim.run(["python", "-c", "a = bytearray(256 << 20); a[::4096] = b'x' * len(a[::4096])"])
        assert r["rc"] == -9 and r["oom_kills"] == 1 and r["peak"] <= 64 << 20
        ok = lim.run(["python", "-c", "print(7)"])
        assert ok["rc"] == 0 and ok["stdout"] == "7\n" and ok["oom_kills"] == 0
    assert not os.path.exists(lim.dir)
    path = tmp_path / "blob"
    path.write_bytes(os.urandom(8 << 20))
    limits.drop_cache(str(path))
    r = limits.run_counted(["python", "-c", f"open({str(path)!r}, 'rb').read()"])
    assert r["rc"] == 0 and r["read_bytes"] >= 8 << 20                    # from storage, after the drop


def test_bound_is_the_disk_or_the_in_ram_speed_whichever_is_lower():
    class P:
        expert_bytes_per_token = 100e6
    e = {"resident_hit_rate": 0.75, "decode_tok_s": 10.0, "read_bytes_per_token": 50e6}
    summary._bound(e, P, ram_tok_s=60.0, disk=1e9)             # must read 25 MB: disk allows 40 tok/s
    assert e["must_read_per_token"] == 25e6 and e["bound_tok_s"] == 40.0
    assert e["of_bound"] == 0.25 and e["read_over_must"] == 2.0
    summary._bound(e, P, ram_tok_s=30.0, disk=1e9)
    assert e["bound_tok_s"] == 30.0


def test_resident_hit_rate_does_not_count_prefetched_loads_as_hits():
    class P:
        expert_bytes = 1000
    d = {"decode_gets": 100, "decode_store": {"bytes_loaded": 40_000, "prefetch_issued": 30, "prefetch_used": 25}}
    assert summary._resident_hit(d, P) == 1 - 35 / 100          # 40 loads, 5 of them prefetched and never used
    assert summary._resident_hit({"decode_gets": 0}, P) is None


@pytest.mark.parametrize("argv,flag", [(["--limits", "1.5"], "--limits"), (["--rounds", "0"], "--rounds"),
                                       (["--parallel", "1,x"], "--parallel"), (["--shape", "gpt"], "--shape"),
                                       (["--pool-fraction", "1.5"], "--pool-fraction"),
                                       (["--pool-parallel", "0"], "--pool-parallel"),
                                       (["--pool-workers", "-1"], "--pool-workers")])
def test_bad_arguments_exit_2_naming_the_flag(capsys, argv, flag):
    with pytest.raises(SystemExit) as exc:
        run.parse_args(argv)
    assert exc.value.code == 2 and flag in capsys.readouterr().err


@pytest.mark.parametrize("shape", ["qwen3-tiny", "deepseek-v3-tiny"])
def test_whole_bench_on_a_toy_shape_writes_its_tables_and_cleans_up(tmp_path, shape):
    work = tmp_path / "work"
    out = tmp_path / "scale.json"
    argv = ["--shape", shape, "--rounds", "2", "--prompt", "32", "--gen", "4", "--parallel", "1,2",
            "--limits", "", "--pool-workers", "0", "--bw-mib", "64", "--work", str(work), "--json", str(out),
            "--markdown", str(tmp_path / "scale.md"),
            "--plot", str(tmp_path / "scale.png")]
    assert run.main(argv) == 0
    rep = json.load(open(out))
    s = rep["summary"]
    ours = s["in_ram"]["colibri q4_k_m"]
    assert ours["prefill_tok_s"] > 0 and all(v > 0 for v in ours["decode_tok_s"].values())
    assert len(ours["decode1_rounds"]) == 2 and rep["rounds"][1]["in_ram"]["colibri q4_k_m"]["rc"] == 0
    assert 0 <= s["routing"]["reuse"] <= 1 and s["routing"]["tokens"] == 64
    assert rep["files"]["colibri"]["bytes"] > 0 and rep["bytes_per_token"]["colibri"] > 0
    assert "colibri q4_k_m" in open(tmp_path / "scale.md").read()
    prof = s["step_profile"]
    fused = shape == "qwen3-tiny"                                   # DeepSeek's MLA layers run op by op
    assert sorted(prof) == (["fused", "op_by_op"] if fused else ["op_by_op"])
    assert all(0 <= p["python_share"] < 1 and p["ms_per_step"] > 0 for p in prof.values())
    if fused:                                                       # one native call per layer, not ~12
        assert prof["fused"]["calls_per_step"] < prof["op_by_op"]["calls_per_step"] / 3
    assert "Decode step of 1 sequence, the C core's calls timed" in open(tmp_path / "scale.md").read()
    assert open(tmp_path / "scale.png", "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    assert not os.listdir(work)                                     # the scratch folder is gone


def test_step_profile_times_native_calls_and_puts_the_real_lib_back():
    from colibri_dist.bench.scale import step_profile
    from colibri_dist.native import _lib, layer_ops, model_ops
    real = _lib.lib
    with step_profile._timed_native() as timed:
        assert model_ops.lib is timed and layer_ops.lib is timed
        assert timed.cb_simd_level() == real.cb_simd_level() and "cb_simd_level" in timed.seconds
        assert timed.CB_OK == real.CB_OK                        # constants pass through untimed
    assert _lib.lib is real and model_ops.lib is real and layer_ops.lib is real
