"""Build the course as a static book from the committed notebooks, never running them.

    python book/build.py [--no-solutions] [--out DIR] [--working-tree] [--lang zh_CN]
                         # default out: build/book, or build/book-zh_CN (git-ignored)

In a git checkout a notebook that differs from the last commit (a lab session's autosaved run) is taken as
committed (git show HEAD:...), and the build says which; --working-tree builds from notebooks/ as it is.

Steps: fetch the pinned JavaScript the pages load (MathJax, the ipywidgets HTML manager) once, with npm,
into build/book-vendor/ (checked against pinned sha512 hashes); stage index.md, the numbered
notebooks (in file-name order, solutions dropped with --no-solutions, by commlib.exercises.learner_copies's rule) and
assets/ into build/book-src/; run Sphinx with MyST-NB (book/conf.py, execution off).

--lang zh_CN builds the Chinese edition from the same sources and the catalogs in locales/zh_CN/ (book/i18n.py),
staged into build/book-src-zh_CN/ with its preface and the cell that sets commlib's language; its code cells show
the outputs of the Chinese run committed in locales/zh_CN/outputs/ (book/outputs.py; `course.py notebooks --lang
zh_CN --execute` writes them) where that run holds the same code, else the English outputs with the checkers'
verdicts rendered in Chinese. Each edition links to the same page of the other, which lives beside it
(build/book and build/book-zh_CN).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
sys.path.insert(0, str(BOOK))  # book/editions.py, also when this module is imported as book.build
import editions  # noqa: E402
import outputs  # noqa: E402
WORK = ROOT / "build"  # staged sources (book-src/) and Sphinx's cache (book-doctrees/)
VENDOR = ROOT / "build" / "book-vendor"
DEFAULT_OUT = ROOT / "build" / "book"

# npm package -> (version, integrity as npm reports it, files kept: path prefixes or patterns inside the package,
# folder under static/)
PINNED = {
    "mathjax": (
        "3.2.2", "sha512-Bt+SSVU8eBG27zChVewOicYs7Xsdt40qm4+UpHyX7k0/O9NliPc+x77k1/FEsPsjKPZGJvtRZM1vO+geW0OhGw==",
        ("LICENSE", "es5/tex-chtml.js", "es5/input/tex/extensions/", "es5/output/chtml/", "es5/ui/", "es5/a11y/",
         "es5/sre/mathmaps/base.json", "es5/sre/mathmaps/en.json"), "mathjax"),
    "@jupyter-widgets/html-manager": (
        "1.0.15", "sha512-5thBIV6ymNgmPVOHvzx+gGy8ZSKmSazhtGw4/c4xJDVzRhG9PTeQsRjF3FUTopvFi//SABeNz1yp47bCrJ3CQA==",
        ("dist/embed.js", "dist/embed.js.LICENSE.txt", "dist/*.woff", "dist/*.woff2", "dist/*.ttf", "dist/*.eot",
         "dist/*.svg"), "html-manager"),
}


def _kept(name: str, patterns) -> bool:
    from fnmatch import fnmatch

    return any(name.startswith(p) if p.endswith("/") else fnmatch(name, p) for p in patterns)


def fetch_vendor(vendor: Path = VENDOR) -> Path:
    """The pinned npm packages' files the pages load, under vendor/static/ (fetched once; -> that folder)."""
    static, stamp = vendor / "static", vendor / "pinned.json"
    pins = json.dumps({k: v[:2] for k, v in PINNED.items()}, sort_keys=True)
    if stamp.exists() and stamp.read_text() == pins and static.is_dir():
        return static
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("the book's pages load MathJax and the ipywidgets HTML manager from the book itself; "
                           "fetching them once needs npm (Debian: apt-get install npm; or Node.js from nodejs.org)")
    vendor.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=vendor) as tmp:
        fresh = Path(tmp) / "static"  # filled, then moved into place: a concurrent build never sees half of it
        for name, (version, integrity, patterns, target) in PINNED.items():
            proc = subprocess.run([npm, "pack", f"{name}@{version}", "--pack-destination", tmp, "--json",
                                   "--silent"], capture_output=True, text=True, timeout=300)
            if proc.returncode != 0:
                raise RuntimeError(f"npm pack {name}@{version} failed:\n{proc.stderr[-2000:]}")
            tgz = Path(tmp) / json.loads(proc.stdout)[0]["filename"]
            data = tgz.read_bytes()
            got = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
            if got != integrity:
                raise RuntimeError(f"{name}@{version}: the tarball's hash {got} is not the pinned {integrity}")
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                for member in tar.getmembers():
                    inner = member.name.split("/", 1)[1]  # npm tarballs hold package/...
                    if member.isfile() and _kept(inner, patterns):
                        dest = fresh / target / inner.removeprefix("es5/").removeprefix("dist/")
                        dest.parent.mkdir(parents=True, exist_ok=True)
                        dest.write_bytes(tar.extractfile(member).read())
        shutil.rmtree(static, ignore_errors=True)  # files of other pins
        try:
            fresh.rename(static)
        except OSError:
            if not static.is_dir():
                raise  # else a concurrent build put the same (hash-checked) files there first
    stamp.write_text(pins)
    return static


def _write_if_changed(path: Path, data: bytes) -> None:
    """Unchanged sources keep their mtime, so that Sphinx rereads only what changed."""
    if not (path.exists() and path.read_bytes() == data):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _git(root: Path, *args: str) -> subprocess.CompletedProcess | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done if done.returncode == 0 else None


def notebook_sources(root: Path = ROOT, working_tree: bool = False) -> tuple[dict[Path, bytes], str]:
    """The numbered notebooks' bytes the book is built from, and one line saying which. In a git checkout, a
    notebook that differs from the last commit (JupyterLab autosaves a learner's run into notebooks/) is taken
    as committed, unless working_tree; a notebook git does not track, or a folder that is no checkout, as it is."""
    notebooks = sorted((root / "notebooks").glob("[0-9]*.ipynb"))
    data = {p: p.read_bytes() for p in notebooks}
    if working_tree:
        return data, "built from the notebooks as they are in notebooks/ (--working-tree)"
    changed = _git(root, "diff", "--name-only", "-z", "HEAD", "--", "notebooks")
    if changed is None:
        return data, "built from the notebooks as they are (not a git checkout, or git is missing)"
    names = sorted(n for n in changed.stdout.decode(errors="replace").split("\0") if n)
    used = []
    for path in notebooks:
        rel = path.relative_to(root).as_posix()
        if rel in names and (committed := _git(root, "show", f"HEAD:{rel}")) is not None:
            data[path] = committed.stdout
            used.append(path.name)
    if not used:
        return data, "built from the committed notebooks (notebooks/ has no changes to them)"
    return data, (f"built from the committed notebooks: {', '.join(used)} differ from the last commit (a lab "
                  f"session saves its runs there) and are taken as committed; --working-tree builds yours")


def stage(src: Path, solutions: bool = True, working_tree: bool = False, lang: str | None = None
          ) -> tuple[list[str], str]:
    """Lay out the book's sources in src/: index.md, notebooks/NN_*.ipynb, assets/, and with lang its catalogs
    (locales/<lang>/LC_MESSAGES/) and preface; -> the chapters' names, and notebook_sources' line saying which
    notebooks."""
    from commlib.exercises import learner_copies as teaching

    sources, said = notebook_sources(ROOT, working_tree)
    notebooks = list(sources)
    if not notebooks:
        raise RuntimeError("no numbered notebooks in notebooks/")
    index = (BOOK / "index.md").read_text(encoding="utf-8")
    wanted = {src / "index.md": (editions.with_preface(index, lang) if lang else index).encode()}
    for i, path in enumerate(notebooks):
        data = sources[path]
        if not solutions or lang:
            nb = json.loads(data)
            if lang:  # commlib speaks lang: the outputs of the edition's own run, where it ran this code
                nb = editions.with_language_cell(nb, lang)
                ran = outputs.with_outputs(nb, path.stem, lang)  # locales/<lang>/outputs/
                nb = ran if ran is not None else editions.with_verdicts_in(nb, lang)  # else the verdicts in lang
            nb = teaching.drop_solutions(nb) if not solutions else nb
            nb = editions.with_preface_cell(nb, lang) if lang and i == 0 else nb
            data = (json.dumps(nb, indent=1, ensure_ascii=False) + "\n").encode()
        wanted[src / "notebooks" / path.name] = data
    if lang:
        for po in editions.book_catalogs(lang):
            wanted[src / "locales" / lang / po.relative_to(editions.LOCALES / lang)] = po.read_bytes()
    for path in sorted((ROOT / "assets").glob("*")):
        if path.is_file() and path.suffix != ".py":
            wanted[src / "assets" / path.name] = path.read_bytes()
    for old in [p for p in src.rglob("*") if p.is_file() and p not in wanted] if src.exists() else []:
        old.unlink()  # a renamed or removed notebook leaves no stale chapter
    for path, data in wanted.items():
        _write_if_changed(path, data)
    return [p.stem for p in notebooks], said


def check_out(out) -> Path:
    """The output folder, created if needed; RuntimeError in one line naming --out if it cannot be one."""
    out = Path(out).expanduser().absolute()
    if out.exists() and not out.is_dir():
        raise RuntimeError(f"--out {out}: is a file; the book needs a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RuntimeError(f"--out {out}: cannot create that folder ({e.strerror or e})") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise RuntimeError(f"--out {out}: cannot write into that folder")
    return out


def build(out: Path | None = None, solutions: bool = True, work: Path = WORK, strict: bool = False,
          working_tree: bool = False, lang: str | None = None) -> Path:
    """Build the book into out/ (-> out/index.html); strict: Sphinx's warnings are errors (the tests build so).
    Raises RuntimeError with Sphinx's output if it fails. Sphinx writes into work/book-html/ (MyST-NB puts its
    jupyter_execute/ beside the folder it builds, so beside that one, not beside out), then out/ gets a copy.
    Prints which notebooks it was built from (notebook_sources). lang: an edition of book/editions.LANGS, into
    build/book-<lang> by default."""
    suffix = f"-{editions.check_lang(lang)}" if lang else ""
    out = check_out(out or Path(f"{DEFAULT_OUT}{suffix}"))
    fetch_vendor()
    src = Path(work) / f"book-src{suffix}"
    _, said = stage(src, solutions, working_tree, lang)
    print(f"book: {said}", flush=True)
    html = Path(work).absolute() / f"book-html{suffix}" / "html"
    language = ["-D", f"language={lang}"] if lang else []
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-c", str(BOOK), "-d", str(Path(work) / f"book-doctrees{suffix}"),
           *language, "--keep-going", "-T", "-q", *(["-W"] if strict else []), str(src), str(html)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"sphinx-build failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    if proc.stderr.strip():
        print(proc.stderr, file=sys.stderr, end="")  # Sphinx's warnings
    if out.resolve() != html.resolve():
        shutil.copytree(html, out, dirs_exist_ok=True)
    return out / "index.html"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-solutions", action="store_true",
                    help="leave out the cells tagged 'solution' (as learner copies do)")
    ap.add_argument("--out", type=Path, default=None,
                    help=f"output folder (default {DEFAULT_OUT.relative_to(ROOT)}, or ...-<lang> with --lang)")
    ap.add_argument("--lang", choices=editions.LANGS, default=None,
                    help="build the edition in that language, from the catalogs in locales/ (book/i18n.py)")
    ap.add_argument("--working-tree", action="store_true",
                    help="build from notebooks/ as it is, with changes not committed (a lab session's runs)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        index = build(args.out, solutions=not args.no_solutions, working_tree=args.working_tree, lang=args.lang)
    except RuntimeError as e:
        print(f"book: {e}", file=sys.stderr)
        return 1
    print(f"book built in {time.perf_counter() - t0:.1f} s ({'without' if args.no_solutions else 'with'} solutions): "
          f"{index}\npublish the folder {index.parent} as it is (any static web server; see the README)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
