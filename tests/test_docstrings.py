"""Docstrings on the public API, so the reference pages (mkdocstrings renders only what has a docstring)
never lose an entry quietly:

- every public (non-underscore) function and class defined in any llmbench module has one (a dataclass's
  generated ``Name(field: type, ...)`` does not count);
- every public method and property of the classes the API pages render (each ``::: name`` in docs/api/*.md,
  its ``members:`` where it lists them) has one, its own or the one it overrides.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
import re
from pathlib import Path

import llmbench

ROOT = Path(__file__).resolve().parents[1]


def _modules() -> list[str]:
    """llmbench and its public Python modules (not the C extension, not the CUDA library beside it)."""
    names = ["llmbench"]
    for m in pkgutil.walk_packages(llmbench.__path__, "llmbench."):
        spec = importlib.util.find_spec(m.name)
        if not any(p.startswith("_") for p in m.name.split(".")) and spec and (spec.origin or "").endswith(".py"):
            names.append(m.name)
    return names


def has_docstring(obj: object) -> bool:
    doc = getattr(obj, "__doc__", None)
    if not doc or not doc.strip():
        return False
    if inspect.isclass(obj) and doc.startswith(obj.__name__ + "("):   # what @dataclass writes for none
        return False
    return True


def _member_doc(cls: type, name: str) -> bool:
    """Whether ``cls.name`` has a docstring, its own or that of what it overrides in a base class."""
    for klass in cls.__mro__:
        if name in vars(klass):
            attr = vars(klass)[name]
            f = attr.fget if isinstance(attr, property) else getattr(attr, "__func__", attr)
            if has_docstring(f):
                return True
    return False


def _public_members(cls: type) -> list[str]:
    out = []
    for name, attr in vars(cls).items():
        if name.startswith("_"):
            continue
        f = attr.fget if isinstance(attr, property) else getattr(attr, "__func__", attr)
        if inspect.isfunction(f):
            out.append(name)
    return out


def undocumented_definitions() -> list[str]:
    missing = []
    for modname in _modules():
        mod = importlib.import_module(modname)
        for name, obj in vars(mod).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != modname:
                continue
            if (inspect.isfunction(obj) or inspect.isclass(obj)) and not has_docstring(obj):
                missing.append(f"{modname}.{name}")
    return missing


def rendered_objects() -> list[tuple[str, list[str] | None]]:
    """Each ``::: identifier`` of docs/api/*.md with its ``members:`` list (None: all public members)."""
    out = []
    for page in sorted((ROOT / "docs" / "api").glob("*.md")):
        text = page.read_text() + "\n"
        for m in re.finditer(r"^::: *(\S+)[ \t]*\n((?:    .*\n)*)", text, re.M):
            members = re.search(r"members: *\[([^\]]*)\]", m.group(2))
            out.append((m.group(1), [s.strip() for s in members.group(1).split(",")] if members else None))
    return out


def _resolve(identifier: str) -> object:
    parts = identifier.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            obj = getattr(obj, p)
        return obj
    raise ImportError(identifier)


def undocumented_rendered_members() -> list[str]:
    missing = []
    for identifier, members in rendered_objects():
        obj = _resolve(identifier)
        if inspect.ismodule(obj):
            names = members if members is not None else [
                n for n, v in vars(obj).items() if not n.startswith("_") and getattr(v, "__module__", None) == obj.__name__]
            classes = [(f"{identifier}.{n}", getattr(obj, n)) for n in names if inspect.isclass(getattr(obj, n))]
        else:
            classes = [(identifier, obj)] if inspect.isclass(obj) else []
        for qual, cls in classes:
            for name in _public_members(cls):
                if not _member_doc(cls, name):
                    missing.append(f"{qual}.{name}")
    return missing


def test_every_public_function_and_class_has_a_docstring():
    missing = undocumented_definitions()
    assert not missing, "public functions and classes without a docstring:\n  " + "\n  ".join(missing)


def test_every_member_the_api_pages_render_has_a_docstring():
    assert rendered_objects(), "docs/api/*.md render nothing"
    missing = undocumented_rendered_members()
    assert not missing, "methods and properties of documented classes without a docstring:\n  " + "\n  ".join(missing)


def test_the_checks_see_a_missing_docstring():
    """The detectors themselves: a bare function, a dataclass with only its generated signature, and an
    override that inherits its base's docstring."""
    from dataclasses import dataclass

    def bare(x):
        return x

    @dataclass
    class Rec:
        a: int

    class Base:
        """A base."""

        def run(self) -> None:
            """Run."""

        def stop(self) -> None:
            pass

    class Child(Base):
        def run(self) -> None:
            pass

    assert not has_docstring(bare) and not has_docstring(Rec) and has_docstring(Base)
    assert _member_doc(Child, "run") and not _member_doc(Child, "stop")
    assert sorted(_public_members(Child)) == ["run"]
