"""`colibri numa plan`: JSON and table output, usage errors."""
import json
import os

from colibri_dist.cli import main

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "sysfs")


def test_plan_json_for_a_fixture(capsys):
    rc = main(["numa", "plan", "--sysfs-root", os.path.join(FIXTURES, "four-node-snc"),
               "--workers-per-node", "2", "--mem-policy", "interleave", "--json"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert len(d["nodes"]) == 4 and len(d["distances"]) == 4 and len(d["workers"]) == 8
    assert {"id", "cpus", "mem_bytes"} <= set(d["nodes"][0])
    assert {"node", "cpus", "mem_policy"} <= set(d["workers"][0])
    assert all(w["mem_nodes"] == [0, 1, 2, 3] for w in d["workers"])


def test_plan_table_names_every_worker(capsys):
    assert main(["numa", "plan", "--sysfs-root", os.path.join(FIXTURES, "two-socket-smt")]) == 0
    out = capsys.readouterr().out
    assert "offline CPUs 31" in out
    assert "0-7,16-23" in out and "8-15,24-30" in out
    assert "mem policy" in out and "distances" in out


def test_plan_on_this_machine(capsys):
    assert main(["numa", "plan", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["workers"]


def test_bad_root_and_too_many_workers_exit_2(capsys, tmp_path):
    assert main(["numa", "plan", "--sysfs-root", str(tmp_path / "nope")]) == 2
    assert "no devices/system" in capsys.readouterr().err
    assert main(["numa", "plan", "--sysfs-root", os.path.join(FIXTURES, "memory-only-node"),
                 "--workers-per-node", "4"]) == 2
    assert "node 1 has 3 online CPUs" in capsys.readouterr().err
