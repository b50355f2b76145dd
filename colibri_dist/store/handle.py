"""What ExpertStore.get returns: the blob, its layout and (lazily) the native view.

Role in the data flow: a kernel call holds a handle while it reads the weights;
the entry stays pinned (never evicted, freed or overwritten) until release().
"""


class ExpertHandle:
    __slots__ = ("layer", "expert", "blob", "layout", "tier", "_entry", "_release", "_view")

    def __init__(self, layer, expert, blob, layout, tier, entry=None, release=None):
        self.layer = layer
        self.expert = expert
        self.blob = blob            # uint8 [layout.nbytes]
        self.layout = layout
        self.tier = tier            # "ram", "mmap" or "bypass" (loaded, not cached: no room)
        self._entry = entry
        self._release = release
        self._view = None

    @property
    def view(self):
        """native.ExpertView over the blob, built on first use (shared by the entry)."""
        if self._view is None:
            entry = self._entry
            if entry is not None and entry.view is not None:
                self._view = entry.view
            else:
                from .. import native
                self._view = native.expert_view(self.blob, self.layout)
                if entry is not None:
                    entry.view = self._view
        return self._view

    def release(self):
        release, self._release = self._release, None
        self._view = None
        if release is not None:
            release(self)
        self.blob = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __del__(self):
        # A handle dropped without release() must not pin its entry forever.
        try:
            self.release()
        except Exception:
            pass
