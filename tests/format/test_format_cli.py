"""`colibri convert / inspect / verify` end to end (in process, through cli.main)."""
import json
import shutil

import colibri_dist as cd
from colibri_dist import families
from colibri_dist.cli import main


def test_convert_inspect_verify(tiny_dir, tmp_path, capsys):
    src, _ = tiny_dir("qwen2_moe")
    dst = tmp_path / "q.colibri"
    assert main(["convert", str(src), str(dst), "--experts", "int8-g32", "--no-progress"]) == 0
    assert "2 MoE layers x 8 experts" in capsys.readouterr().out

    assert main(["inspect", str(dst), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["family"] == "qwen2_moe" and info["scheme"] == "int8-g32"
    assert info["moe_layers"] == [0, 1] and info["experts_total"] == 16 and info["shared_inter"] == 24
    assert info["bytes_by_dtype"]["expert:int8-g32"] > 0 and info["bytes_by_dtype"]["float32"] > 0

    assert main(["inspect", str(dst)]) == 0
    text = capsys.readouterr().out
    assert "family qwen2_moe" in text and "softmax_topk" in text and "MoE 0-1" in text

    assert main(["verify", str(dst), "--no-progress"]) == 0
    assert "OK" in capsys.readouterr().out


def test_verify_exit_1_names_layer_and_expert(converted, tmp_path, capsys):
    path, _ = converted("olmoe", "f32")
    bad = tmp_path / "bad.colibri"
    shutil.copy(path, bad)
    with cd.open_model(bad) as model:
        offset, nbytes, _ = model.expert_location(1, 6)
    with open(bad, "r+b") as fh:
        fh.seek(offset + nbytes - 1)
        last = fh.read(1)
        fh.seek(offset + nbytes - 1)
        fh.write(bytes([last[0] ^ 0x01]))
    assert main(["verify", str(bad), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "layer 1 expert 6" in err and str(bad) in err


def test_convert_unsupported_architecture_exit_1(tiny_dir, tmp_path, capsys):
    src, _ = tiny_dir("mixtral")
    bad = tmp_path / "src"
    shutil.copytree(src, bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["model_type"] = "gpt2"
    (bad / "config.json").write_text(json.dumps(cfg))
    assert main(["convert", str(bad), str(tmp_path / "x.colibri")]) == 1
    err = capsys.readouterr().err
    assert "model_type='gpt2'" in err and "supported: deepseek_v3, glm4_moe, gpt_oss, mixtral, olmoe, qwen2_moe" in err
    assert err.rstrip().endswith(", ".join(sorted(families.FAMILIES)))    # every registered family, in order


class _Tty:
    """A stderr stand-in that claims to be a terminal and records what is written."""

    def __init__(self):
        self.text = []

    def isatty(self):
        return True

    def write(self, s):
        self.text.append(s)
        return len(s)

    def flush(self):
        pass


def test_progress_bar_only_on_a_terminal(converted, monkeypatch, capsys):
    import sys
    path, _ = converted("mixtral", "f32")
    with cd.open_model(path) as model:
        model.verify()                                 # stderr is not a tty under pytest: silent
        assert capsys.readouterr().err == ""
        fake = _Tty()
        monkeypatch.setattr(sys, "stderr", fake)
        model.verify()
        assert "verify" in "".join(fake.text)
