"""Shared test set-up: keep every Ray on loopback and offline; a dead Ray fails only its module."""
import os

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# a Ray that dies fails its module with a message, never the session (and start-ups are retried)
pytest_plugins = ["colibri_dist.testing.pytest_ray"]


def pytest_report_header(config):
    """One header line: the SIMD levels this CPU/OS runs and the ones the level-parametrized tests skip."""
    try:
        from colibri_dist.native import simd_levels, simd_name
    except ImportError as exc:          # C core not built: say so instead of failing collection here
        return f"colibri simd: native core unavailable ({exc})"
    levels = simd_levels()
    run = [n for n, m in levels.items() if m is None]
    skip = [f"{n} (lacks {m})" for n, m in levels.items() if m is not None]
    return f"colibri simd: default {simd_name()}; levels run: {', '.join(run)}; skipped: {', '.join(skip) or 'none'}"
