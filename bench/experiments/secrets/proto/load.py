import importlib.util, sys
from pathlib import Path
def load(name="redact_hpc"):
    if name in sys.modules: return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).parent / f"{name}.py")
    m = importlib.util.module_from_spec(spec); sys.modules[name] = m; spec.loader.exec_module(m)
    return m
