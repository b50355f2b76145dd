"""`colibri serve`: flags reach ServeConfig, and the security rules refuse before anything starts."""
import pytest

from colibri_dist.cli import build_parser, main
from colibri_dist.cli.serve import config_from_args
from colibri_dist.serve.config import ServeConfig, is_loopback


def test_non_loopback_host_without_a_key_is_refused(demo_model, capsys):
    assert main(["serve", demo_model, "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert "--host 0.0.0.0 is not a loopback address" in err and "--api-key" in err


def test_flags_become_the_config(demo_model):
    args = build_parser().parse_args(["serve", demo_model, "--port", "0", "--served-model-name", "a", "b",
                                      "--max-num-seqs", "8", "--max-waiting", "3", "--overload-status", "503",
                                      "--api-key", "k", "--host", "10.1.2.3"])
    cfg = config_from_args(args)
    assert (cfg.model_names, cfg.max_num_seqs, cfg.max_waiting, cfg.overload_status) == (("a", "b"), 8, 3, 503)
    assert cfg.host == "10.1.2.3" and cfg.api_key == "k"
    assert (cfg.tool_call_parser, cfg.reasoning_parser) == (None, None)
    cfg = config_from_args(build_parser().parse_args(["serve", demo_model, "--tool-call-parser", "glm45",
                                                      "--reasoning-parser", "deepseek_r1"]))
    assert (cfg.tool_call_parser, cfg.reasoning_parser) == ("glm45", "deepseek_r1")


@pytest.mark.parametrize("kw,match", [({"port": 70000}, "--port"), ({"max_num_seqs": 0}, "--max-num-seqs"),
                                      ({"overload_status": 500}, "--overload-status"), ({"api_key": " "}, "--api-key"),
                                      ({"workers": 2, "pool": "p"}, "exclude"), ({"runners": -1}, "--runners"),
                                      ({"runners": 2}, "--runners: runners 2 needs the Ray pool"),
                                      ({"tool_call_parser": "mistral"}, "--tool-call-parser must be one of"),
                                      ({"reasoning_parser": "r1"}, "--reasoning-parser must be one of")])
def test_bad_config_values_are_named(kw, match):
    from colibri_dist.errors import InvalidArgument
    with pytest.raises(InvalidArgument, match=match):
        ServeConfig(model="m.colibri", **kw)


def test_loopback_names():
    assert all(map(is_loopback, ["127.0.0.1", "127.9.9.9", "::1", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "10.0.0.1", "example.com", "::"]))


def test_a_missing_model_file_is_a_usage_error(tmp_path, capsys):
    assert main(["serve", str(tmp_path / "none.colibri")]) == 2
    assert "no such model file" in capsys.readouterr().err


def test_runners_without_workers_is_a_usage_error(demo_model, capsys):
    assert main(["serve", demo_model, "--runners", "2"]) == 2
    err = capsys.readouterr().err
    assert "--runners: runners 2 needs the Ray pool" in err and "--workers N" in err and "--pool NAME" in err
    args = build_parser().parse_args(["serve", demo_model, "--workers", "2", "--runners", "3"])
    assert (config_from_args(args).workers, config_from_args(args).runners) == (2, 3)


def test_the_api_key_comes_from_a_file_or_the_environment_and_must_be_printable_ascii(demo_model, tmp_path,
                                                                                     monkeypatch):
    """Issue 31 defect 9: a key on the command line is visible in /proc to every local account."""
    from colibri_dist.errors import InvalidArgument
    parse = build_parser().parse_args
    monkeypatch.delenv("COLIBRI_API_KEY", raising=False)
    assert config_from_args(parse(["serve", demo_model])).api_key is None
    monkeypatch.setenv("COLIBRI_API_KEY", "from-env")
    assert config_from_args(parse(["serve", demo_model])).api_key == "from-env"
    assert config_from_args(parse(["serve", demo_model, "--api-key", "flag"])).api_key == "flag"
    key = tmp_path / "key"
    key.write_text("from-file\nignored\n")
    assert config_from_args(parse(["serve", demo_model, "--api-key-file", str(key)])).api_key == "from-file"
    with pytest.raises(InvalidArgument, match="--api-key and --api-key-file exclude each other"):
        config_from_args(parse(["serve", demo_model, "--api-key", "x", "--api-key-file", str(key)]))
    with pytest.raises(InvalidArgument, match=r"--api-key-file .*nosuch: cannot read it"):
        config_from_args(parse(["serve", demo_model, "--api-key-file", str(tmp_path / "nosuch")]))
    with pytest.raises(InvalidArgument, match="printable ASCII without spaces.*character 3 is 'é'") as info:
        config_from_args(parse(["serve", demo_model, "--api-key", "clé-secrète"]))
    assert info.value.parameter == "api_key"
    assert main(["serve", demo_model, "--api-key", "clé"]) == 2                   # refused at start, one line
