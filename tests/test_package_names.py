"""Every package of commlib: no attribute of a package shadows one of its submodules (issue 44 item 4).

`from commlib.compression import quantize` must give the module commlib/compression/quantize.py if there is
one; a function of that name bound in the package's __init__ would hide it, and `quantize.QuantState` would
then be an AttributeError. A function and a module of one name are therefore never both in one package.
"""

import importlib
import pkgutil

import commlib


def packages(root):
    """root and every package under it, imported."""
    out = [root]
    for info in pkgutil.walk_packages(root.__path__, root.__name__ + "."):
        if info.ispkg:
            out.append(importlib.import_module(info.name))
    return out


def shadowed(pkg) -> tuple[int, list[str]]:
    """(submodules of pkg, those whose name in pkg is bound to something else, as 'pkg.name is a <type>')."""
    names = [info.name for info in pkgutil.iter_modules(pkg.__path__) if not info.name.startswith("__")]
    out = []
    for name in names:
        sub = importlib.import_module(f"{pkg.__name__}.{name}")
        if getattr(pkg, name) is not sub:
            out.append(f"{pkg.__name__}.{name} is a {type(getattr(pkg, name)).__name__}")
    return len(names), out


def test_no_package_attribute_shadows_a_submodule_of_the_same_name():
    found = [shadowed(pkg) for pkg in packages(commlib)]
    assert sum(n for n, _ in found) > 50, "the walk missed the packages"
    bad = [x for _, names in found for x in names]
    assert bad == [], "package attributes that hide the submodule of their name: " + "; ".join(bad)


def test_the_check_names_a_function_bound_over_its_module(monkeypatch):
    from commlib import cost

    monkeypatch.setattr(cost, "model", lambda: None)
    assert shadowed(cost)[1] == ["commlib.cost.model is a function"]
