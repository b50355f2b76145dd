"""Where a container's companions live on disk.

Role in the data flow: the converter (which must never let a new model inherit an old
model's hot-added experts) and the store's hot-add segments (store/segments.py) agree
on one name: `<model>.experts/` beside `<model>`.
"""
import os


def hot_add_dir(model_path):
    return os.fspath(model_path) + ".experts"
