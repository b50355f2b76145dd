"""The converter's destination: never merge a new model with an old one's hot-added experts.

Role in the data flow: convert() asks check_destination(dst, force) before writing. Without
force an existing DST or DST.experts/ is refused (naming both). With force the old hot-add
directory is renamed aside just before the new file is renamed into place (writer hook),
and deleted after: at no moment does the new model sit beside the old model's experts.
"""
import os
import shutil

from ..errors import InvalidArgument
from .paths import hot_add_dir


class Replaced:
    def __init__(self, dst):
        self.experts = hot_add_dir(dst)
        self.aside = None

    def move_aside(self):
        if os.path.lexists(self.experts):
            self.aside = f"{self.experts}.replaced-{os.getpid()}"
            os.rename(self.experts, self.aside)

    def discard(self):
        if self.aside:
            shutil.rmtree(self.aside, ignore_errors=True)
            self.aside = None


def check_destination(dst, force):
    experts = hot_add_dir(dst)
    found = [p for p in (dst, experts) if os.path.lexists(p)]
    if found and not force:
        what = " and ".join(found) + (" already exist" if len(found) > 1 else " already exists")
        raise InvalidArgument(f"{what}; converting would replace the model"
                              f"{' and drop its hot-added experts' if os.path.lexists(experts) else ''}. "
                              f"Pass --force (force=True) to replace, or choose another path")
    if os.path.isdir(dst):
        raise InvalidArgument(f"{dst}: is a directory; give a file path for the .colibri container")
    return Replaced(dst)
