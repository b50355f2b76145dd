"""Expert store: RAM cache over the mmap'd container and an SSD offload tier.

ExpertStore (expert_store.py) is the entry point; policies, buffers, spill,
source, segments (hot-add), stats and handle are its parts.
"""
from .expert_store import ExpertStore
from .handle import ExpertHandle
from .policies import POLICIES, make_policy
from .segments import Segments, segments_dir
from .source import FlakySource, ModelSource, SlowSource

__all__ = ["ExpertStore", "ExpertHandle", "POLICIES", "make_policy", "Segments", "segments_dir",
           "ModelSource", "SlowSource", "FlakySource"]
