"""Decode tok/s of one sequence (and of 8) on a 4-layer demo MoE through LLMEngine.step, 2 threads: the A/B of
issue 30 item 4 (3590f90 vs the validation boundary), run alternately with PYTHONPATH pointing at each build;
the model: jobs/demos/llm.write_checkpoint(layers=4, n_experts=8) converted with defaults."""
import sys, time, json
import colibri_dist as cd
from colibri_dist.generate import SamplingParams
m = sys.argv[2]                      # the .colibri model
out = {}
with cd.LLM(m, threads=2) as llm:
    for n in (1, 8):
        eng = llm.new_engine()
        for i in range(n):
            eng.add_request(f"r{i}", [5 + i, 6, 7, 8], SamplingParams(max_tokens=200, temperature=0, ignore_eos=True))
        for _ in range(3):
            eng.step()
        t0, steps = time.perf_counter(), 0
        while eng.has_unfinished():
            eng.step(); steps += 1
        dt = time.perf_counter() - t0
        out[n] = steps * n / dt
print(json.dumps({"code": sys.argv[1], "tok_s_1": round(out[1], 1), "tok_s_8": round(out[8], 1)}))
