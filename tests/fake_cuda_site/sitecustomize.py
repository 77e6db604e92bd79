"""Test-only. With this folder on PYTHONPATH and COMMLIB_FAKE_CUDA=<number of GPUs> in the environment, every
Python process installs tests/fake_cuda.py at startup: a Cluster's zygote does, so the ranks it forks have the
fake too. tests/test_gpu_path.py and `tools/gpu_check.sh --dry-run` set both; nothing else does."""

import os

if os.environ.get("COMMLIB_FAKE_CUDA"):
    import importlib.util
    import sys

    _path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fake_cuda.py")
    _spec = importlib.util.spec_from_file_location("tests.fake_cuda", _path)
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["tests.fake_cuda"] = _module  # the name the tests import it by: cloudpickle refers to it so
    _spec.loader.exec_module(_module)
    _module.install(gpus=int(os.environ["COMMLIB_FAKE_CUDA"]))
