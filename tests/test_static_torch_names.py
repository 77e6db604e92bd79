"""Every torch name that commlib/, benchmarks/, tools/ and examples/ (and the GPU tests) use exists in the installed torch (issue 35).

Most CUDA-only lines never run on a CPU machine, so a renamed torch call there (`torch.cuda.Span` for
`torch.cuda.Event`) would only show on the first GPU. This test reads the source instead: every name bound
by `import torch...` / `from torch... import ...` and every attribute chain read from one
(`torch.cuda.Event`, `dist.ReduceOp.SUM`, `F.scaled_dot_product_attention`) must resolve by getattr (or as
a submodule import) in the installed torch. Chains that are assigned to (a compatibility shim setting a
name) are not reads and are skipped.
"""

import ast
import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ("commlib", "benchmarks", "tools", "examples")
ALSO = ("tests/test_gpu.py", "tests/fake_cuda.py")  # they run on GPUs (or stand in for them): CI runs little of them


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Local name -> dotted torch path, from every import in the file (function-level ones included)."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "torch" or a.name.startswith("torch."):
                    # `import torch.distributed` binds `torch`; `import torch.distributed as dist` binds `dist`
                    names[a.asname or "torch"] = a.name if a.asname else "torch"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and (node.module == "torch" or node.module.startswith("torch.")):
            for a in node.names:
                if a.name != "*":
                    names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _chain(node: ast.Attribute) -> list[str] | None:
    """a.b.c -> ["a", "b", "c"]; None when the chain does not start at a plain name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id] + parts[::-1]


def _resolve(dotted: str) -> bool:
    """True if torch has this dotted name, as an attribute or as an importable submodule."""
    parts = dotted.split(".")
    obj = importlib.import_module(parts[0])
    for i, name in enumerate(parts[1:], start=1):
        if hasattr(obj, name):
            obj = getattr(obj, name)
            continue
        try:
            obj = importlib.import_module(".".join(parts[:i + 1]))
        except ImportError:
            return False
    return True


def missing_torch_names(source: str, filename: str = "<source>") -> list[str]:
    """'file:line dotted.name' for every torch name read in `source` that the installed torch lacks."""
    tree = ast.parse(source, filename)
    aliases = _aliases(tree)
    stores = {id(t) for node in ast.walk(tree) for t in getattr(node, "targets", [getattr(node, "target", None)])
              if isinstance(t, ast.Attribute)}
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}  # only the longest chain
    wanted = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner and id(node) not in stores:
            parts = _chain(node)
            if parts and parts[0] in aliases:
                wanted.setdefault(".".join([aliases[parts[0]]] + parts[1:]), node.lineno)
    wanted.update({path: 0 for path in aliases.values() if path not in wanted})  # the imports themselves
    return [f"{filename}:{line} {name}" for name, line in sorted(wanted.items()) if not _resolve(name)]


def test_every_torch_name_in_the_code_exists_in_the_installed_torch():
    files = sorted(f for d in CHECKED for f in (ROOT / d).rglob("*.py")) + [ROOT / f for f in ALSO]
    assert len(files) > 50, "the walk found the package, benchmarks and tools"
    missing = [m for f in files for m in missing_torch_names(f.read_text(), str(f.relative_to(ROOT)))]
    assert missing == [], "torch has no such name (renamed or misspelt?):\n" + "\n".join(missing)


def test_the_check_catches_a_renamed_cuda_event_and_a_misspelt_collective():
    source = ("import torch\nimport torch.distributed as dist\nfrom torch.profiler import ProfilerActivity\n"
              "def mark(s):\n    e = torch.cuda.Span(enable_timing=True)\n    e.record(s)\n"
              "    dist.all_reduce_single(e)\n    torch.cuda.Event(enable_timing=True).record()\n"
              "    dist.ReduceOp.SUM, ProfilerActivity.CUDA, torch.distributed.all_gather_single\n"
              "    dist.not_a_name = 1  # assigned, not read\n")
    assert missing_torch_names(source) == ["<source>:5 torch.cuda.Span",
                                           "<source>:7 torch.distributed.all_reduce_single"]
