"""torch.load without code execution, the same under torch 1.13 and 2.x (tools/fairseq-import and
tools/fairseq-export).

A pickle can name any global, and unpickling calls it: a crafted checkpoint can run code. torch
2.6+'s weights_only mode refuses fairseq's own classes, and torch 1.13's refuses floats. Here
fairseq's and omegaconf's classes become stand-ins that only keep their state, the few globals a
checkpoint's data needs are resolved, and anything else (os.system, builtins.eval, ...) is refused.
"""
import pickle
import types

import torch

import checkpoint_zip  # tools/checkpoint_zip.py


class StandIn:
    """Any pickled fairseq (or omegaconf) object: keeps its state as attributes."""

    def __init__(self, *args, **kwargs):
        self._args = args

    def __setstate__(self, state):
        if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):
            state = {**(state[0] or {}), **state[1]}
        if isinstance(state, dict):
            self.__dict__.update(state)
        else:
            self.__dict__["_state"] = state


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickles data, never code (the module's docstring says how)."""
    ALLOWED = {("collections", "OrderedDict"), ("argparse", "Namespace"), ("torch._utils", "_rebuild_tensor_v2"),
               ("torch._utils", "_rebuild_parameter"), ("torch", "Size")}
    STAND_INS = {}

    def find_class(self, module, name):
        if module.split(".")[0] in ("fairseq", "omegaconf"):
            key = (module, name)
            if key not in self.STAND_INS:
                self.STAND_INS[key] = type(name, (StandIn,), {"__module__": module})
            return self.STAND_INS[key]
        if (module, name) in self.ALLOWED or (module == "torch" and name.endswith("Storage")):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load the global {module}.{name} (this tool only reads data)")


# torch.load's pickle_module: the restricted unpickler in place of pickle's.
_module = types.SimpleNamespace(
    __name__="restricted_pickle", Unpickler=RestrictedUnpickler, UnpicklingError=pickle.UnpicklingError,
    load=lambda f, **kwargs: RestrictedUnpickler(f, **kwargs).load())


def load(path):
    """The checkpoint at `path`, its tensors on the CPU; raises checkpoint_zip.Damaged when its
    bytes changed (the CRCs and digest are checked first), pickle.UnpicklingError for a global it
    will not resolve."""
    checkpoint_zip.verify(path)
    if int(torch.__version__.split(".")[0]) >= 2:
        return torch.load(path, map_location="cpu", pickle_module=_module, weights_only=False)
    # torch 1.13's load replaces any pickle_module by its module global `pickle` unless
    # weights_only is set: swap that global for the load.
    saved = torch.serialization.pickle
    torch.serialization.pickle = _module
    try:
        return torch.load(path, map_location="cpu")
    finally:
        torch.serialization.pickle = saved
