"""Any Python agent as a snapshot: the :class:`Snapshottable` mixin and a typed msgpack value encoding.

``state_dict()`` / ``load_state_dict()`` (PyTorch-style) capture the public attributes of an agent
(``_private`` ones are left out, ``__snapshot_fields__`` lists them explicitly); nested snapshottable
objects recurse. Values that plain msgpack cannot hold - tuples, sets, frozensets, datetimes, dates,
times, timedeltas, ``Decimal``, ``UUID``, paths, enums, dataclasses, pydantic-style models (anything with
``model_dump()`` / ``model_validate()``) - are written as small tagged maps (``{"$t": "tuple", "v": [...]}``)
so they come back as the same type; what two places share (and cycles) comes back shared. Nothing is pickled
unless a class opts in with ``__snapshot_pickle__ = True``, and pickled values are only loaded with
``trust_pickle=True``.

Classes named in a snapshot are never imported: they must already be imported (``sys.modules``) or
registered with :func:`register_type`. A value of an unsupported type raises :class:`UnsupportedValue`
naming the attribute path (``agent.memory['k'][2]``).
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import enum
import pickle
import re
import sys
import uuid
import weakref
from contextvars import ContextVar
from decimal import Decimal
from pathlib import PurePath, PurePosixPath, PureWindowsPath
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

from agentsnap_core.errors import AgentSnapError, UnsafeSnapshot
from agentsnap_core.format.encoding import pack, pack_value, utf8_ok

__all__ = [
    "ENVELOPE",
    "Snapshottable",
    "SupportsStateDict",
    "UnsupportedValue",
    "decode_value",
    "dump_state",
    "encode_value",
    "is_typed",
    "load_state",
    "register_type",
]

#: ``format`` of a state layer written by this module
ENVELOPE = "agentsnap-typed"
ENVELOPE_VERSION = 1
TAG = "$t"
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1
_TYPES: dict[str, type] = {}
#: the name each class is written under: its register_type name, or module:qualname once found by it
_NAMES: weakref.WeakKeyDictionary[type, str] = weakref.WeakKeyDictionary()
#: builtins stored as themselves or by a tag; a subclass of one (OrderedDict, Counter, numpy.float64...) is not one
_PLAIN: tuple[type, ...] = (dict, list, tuple, set, frozenset, str, bytes, bytearray, int, float, complex, dt.datetime,
                             dt.date, dt.time, dt.timedelta, Decimal, uuid.UUID)
T = TypeVar("T")
S = TypeVar("S", bound="Snapshottable")


class UnsupportedValue(AgentSnapError):
    """A value of a type the typed encoding cannot store; ``path`` names where it sits."""

    def __init__(self, path: str, value: object) -> None:
        self.path, self.type_name = path, f"{type(value).__module__}.{type(value).__qualname__}"
        base = next((b for b in _PLAIN if isinstance(value, b)), None)
        why = (f" (a subclass of {base.__name__}: it would come back as a plain {base.__name__}; store "
               f"{base.__name__}(value), or set __snapshot_pickle__ = True)") if base is not None else ""
        super().__init__(
            f"cannot snapshot {path}: values of type {self.type_name} are not supported{why} "
            "(plain data, tuples, sets, bytes, datetimes and time zones, Decimal, UUID, paths, regexes, enums, deque, defaultdict, "
            "OrderedDict, Counter, numpy arrays, dataclasses, pydantic models and Snapshottable objects are); make the attribute private (_name), list "
            "__snapshot_fields__, or give the class state_dict()/load_state_dict()"
        )


@runtime_checkable
class SupportsStateDict(Protocol):
    """What the core needs of an agent: PyTorch-style ``state_dict()`` / ``load_state_dict()``."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def register_type(cls: type[T], name: str | None = None) -> type[T]:
    """Allow ``cls`` to be rebuilt from snapshots even before its module is imported (usable as a decorator)."""
    key = name or _class_name(cls)
    _TYPES[key] = cls
    _NAMES[cls] = key
    return cls


class Snapshottable:
    """Mixin giving any class ``state_dict()``, ``load_state_dict()`` and ``clone()``.

    Class attributes that tune it:
        __snapshot_fields__: attribute names to capture (default: every public instance attribute).
        __snapshot_version__: schema version stored with the state (see :mod:`agentsnap_core.format.migrations`).
        __snapshot_name__: name migrations are registered under (default: the class name).
        __snapshot_pickle__: True lets values of otherwise unsupported types be pickled (opt-in; loading
            them then needs ``trust_pickle=True``).
    """

    __snapshot_fields__: ClassVar[tuple[str, ...] | None] = None
    __snapshot_version__: ClassVar[str] = "1.0"
    __snapshot_name__: ClassVar[str | None] = None
    __snapshot_pickle__: ClassVar[bool] = False

    def state_dict(self) -> dict[str, Any]:
        """The captured attributes, by name (live values; nested snapshottable objects stay objects)."""
        fields = type(self).__snapshot_fields__
        if fields is not None:
            missing = [f for f in fields if not hasattr(self, f)]
            if missing:
                raise AgentSnapError(f"{type(self).__name__} has no attribute(s) {missing} listed in __snapshot_fields__")
            return {f: getattr(self, f) for f in fields}
        return {k: v for k, v in instance_attributes(self).items() if not k.startswith("_")}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Set the attributes from ``state``; nested snapshottable attributes load in place (the object this one holds
        takes the state of the one given; on a restore the decoder has done that already, consistently with every
        other reference to it, and this sets what it is given)."""
        if not isinstance(state, dict):
            raise AgentSnapError(f"{type(self).__name__}.load_state_dict needs a dict, not {type(state).__name__}")
        fields = type(self).__snapshot_fields__
        for key, value in state.items():
            if fields is not None and key not in fields:
                raise AgentSnapError(f"{type(self).__name__}: {key!r} is not one of __snapshot_fields__ {list(fields)}")
            current: Any = getattr(self, key, None)
            if is_typed(current) and type(value) is type(current) and value is not current and not _DECODING.get():
                current.load_state_dict(value.state_dict())
            else:
                setattr(self, key, value)

    def clone(self: S) -> S:
        """A copy made through the state round-trip; private attributes (clients, locks) are shared, not copied."""
        cls = type(self)
        twin = cls.__new__(cls)
        for key, value in instance_attributes(self).items():
            if key.startswith("_"):
                setattr(twin, key, value)
        _load_into(twin, _encode_state(self, cls.__name__), cls.__name__, snapshot_version(cls), trust_pickle=True)
        return twin


def instance_attributes(obj: object) -> dict[str, Any]:
    """``obj``'s instance attributes: those its ``__slots__`` hold (in the classes' order, base first), then its
    ``__dict__``. (``vars()`` alone misses slots: an agent class with ``__slots__`` saved nothing of them.)"""
    out: dict[str, Any] = {}
    for cls in reversed(type(obj).__mro__):
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name in ("__dict__", "__weakref__"):
                continue
            name = f"_{cls.__name__.lstrip('_')}{name}" if name.startswith("__") and not name.endswith("__") else name
            try:
                out[name] = getattr(obj, name)
            except AttributeError:  # (a slot never set)
                pass
    out.update(getattr(obj, "__dict__", {}))
    return out


def is_typed(obj: object) -> bool:
    """True for objects whose state goes through the typed encoding (the mixin, or a ``__snapshot_version__``)."""
    return isinstance(obj, Snapshottable) or (
        isinstance(obj, SupportsStateDict) and not isinstance(obj, type) and getattr(type(obj), "__snapshot_version__", None) is not None
    )


def snapshot_name(obj_or_cls: object) -> str:
    cls = obj_or_cls if isinstance(obj_or_cls, type) else type(obj_or_cls)
    return str(getattr(cls, "__snapshot_name__", None) or cls.__name__)


def snapshot_version(obj_or_cls: object) -> str:
    cls = obj_or_cls if isinstance(obj_or_cls, type) else type(obj_or_cls)
    return str(getattr(cls, "__snapshot_version__", None) or "1.0")


def _pickles(obj: object) -> bool:
    return bool(getattr(type(obj), "__snapshot_pickle__", False))


def _class_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _written_name(cls: type, path: str) -> str:
    """The name a snapshot holds for ``cls``: one a restore finds it by (:func:`_find_class`), else refused now.
    A class made inside a function (``make.<locals>.Local``) or replaced in its module since would save and then
    never restore, not even in this process."""
    name = _NAMES.get(cls)
    if name is not None:
        return name
    name = _class_name(cls)
    try:
        found: Any = _find_class(name, path)
    except AgentSnapError:
        found = None
    if found is not cls:
        raise AgentSnapError(
            f"cannot snapshot {path}: class {cls.__qualname__} cannot be found by its name {name!r} "
            f"({'it is defined inside a function' if '<locals>' in cls.__qualname__ else 'its module holds another object under that name'}), "
            "so a restore could not rebuild it; define it at module level, or name it with "
            "agentsnap_core.register_type(cls, 'name')")
    _NAMES[cls] = name
    return name


def is_typed_class(cls: Any) -> bool:
    """Whether ``cls`` writes its instances through the typed encoding (what an ``obj`` value may name)."""
    return isinstance(cls, type) and (issubclass(cls, Snapshottable) or getattr(cls, "__snapshot_version__", None) is not None)


def _plain_factory(cls: type) -> bool:
    """A defaultdict factory a restore may name: a builtin or collections type, a dataclass, a pydantic-style model
    or a typed class (a snapshot is data: it never gets an arbitrary class called, ``subprocess.Popen`` say)."""
    return (cls.__module__ in ("builtins", "collections", "decimal") or dataclasses.is_dataclass(cls)
            or is_typed_class(cls) or callable(getattr(cls, "model_construct", None)))


def _not_a(path: str, name: object, kind: str) -> AgentSnapError:
    return UnsafeSnapshot(path, f"it names {name!r}, which is not a {kind} (a snapshot names classes only as the "
                                "values it holds; a crafted one could otherwise have a restore call any class)")


def _find_class(name: object, path: str) -> type:
    if isinstance(name, str) and name in _TYPES:  # (register_type's name: any string)
        return _TYPES[name]
    if not isinstance(name, str) or ":" not in name:
        raise AgentSnapError(f"cannot restore {path}: bad class reference {name!r}")
    module_name, _, qual = name.partition(":")
    obj: Any = sys.modules.get(module_name)
    if obj is None:
        raise AgentSnapError(
            f"cannot restore {path}: class {qual} lives in module {module_name!r}, which is not imported; "
            "import it first (agentsnap never imports modules a snapshot names) or use agentsnap_core.register_type"
        )
    for part in qual.split("."):
        obj = getattr(obj, part, None)
    if not isinstance(obj, type):
        raise AgentSnapError(f"cannot restore {path}: {name} is not a class in the running program")
    return obj


# ---------------------------------------------------------------------------------------------- encoding
#: identity: the containers and objects whose identity a program can see (a list two attributes share, a sub-agent
#: that points back at its parent) are numbered in the order they are written; a second reference to one is written
#: as ``{"$t": "ref", "v": n}``. A value that shares nothing is written exactly as before (same bytes, so unchanged
#: state still dedups); the reader numbers what it builds in the same order.
_BUSY = object()  # (a dataclass or model being read back: made from its fields, so nothing can point at it yet)
#: the standard library's containers that come back as themselves (exact types; a subclass of one is refused)
_COLLECTIONS: dict[type, str] = {collections.deque: "deque", collections.defaultdict: "defaultdict",
                                 collections.OrderedDict: "odict", collections.Counter: "counter"}


def encode_value(value: Any, path: str = "value", *, allow_pickle: bool = False) -> Any:
    """``value`` as plain msgpack data (tagged maps for richer types); raises :class:`UnsupportedValue`.

    Shared references and reference cycles through lists, dicts, sets and Snapshottable objects come back as they
    were (see :func:`decode_value`); a cycle through a dataclass or a model is refused (they are rebuilt from their
    fields, so a field cannot hold the object itself)."""
    return _Encoder().value(value, path, allow_pickle)


class _Encoder:
    def __init__(self) -> None:
        # id -> number (ints only: a dict the garbage collector does not walk); keep[number] holds the object alive,
        # since a freed temporary's id (a state_dict() result) may come again
        self.memo: dict[int, int] = {}
        self.keep: list[Any] = []
        self.building: dict[int, str] = {}  # id -> path of a dataclass or model whose fields are being written

    def enter(self, value: Any, path: str, ready: bool = True) -> Any:
        """None for an object seen the first time (numbered now), else the reference to write instead."""
        key = id(value)
        seen = self.memo.setdefault(key, len(self.keep))  # (one lookup: numbered now unless seen before)
        if seen == len(self.keep):
            self.keep.append(value)
            if not ready:
                self.building[key] = path
            return None
        if key in self.building:
            raise AgentSnapError(
                f"cannot snapshot {path}: it is {self.building[key]} again, which contains it (a reference cycle "
                f"through {type(value).__name__}, which a restore rebuilds from its fields, so a field cannot hold the "
                "object itself); hold the back-reference in a Snapshottable object, a list or a dict, or make it "
                "private (_name)")
        return {TAG: "ref", "v": seen}

    def done(self, value: Any) -> None:
        del self.building[id(value)]

    def rewind(self, mark: int) -> None:
        """Forget the objects numbered from ``mark`` on (a set's items, written again in their sorted order)."""
        for key in [k for k, n in self.memo.items() if n >= mark]:
            del self.memo[key]
        del self.keep[mark:]

    def attrs(self, state: Any, path: str, allow_pickle: bool) -> Any:
        """A state dict, its entries named as attributes in error paths (``Agent.memory[2]``)."""
        if type(state) is dict and all(type(k) is str for k in state) and TAG not in state:
            return {k: self.value(v, f"{path}.{k}", allow_pickle) for k, v in state.items()}
        return self.value(state, path, allow_pickle)

    def value(self, value: Any, path: str, allow_pickle: bool) -> Any:  # noqa: C901, PLR0911, PLR0912 - one case per type
        # exact types: a subclass (OrderedDict, Counter, a str subclass...) would come back as the base type, silently
        kind = type(value)
        if value is None or kind in (bool, float):
            return value
        if kind is str:
            if utf8_ok(value):
                return value
            # lone surrogates (a file name or process output decoded with surrogateescape): msgpack strings are UTF-8
            return {TAG: "str", "v": value.encode("utf-8", "surrogatepass")}
        if isinstance(value, enum.Enum):
            doc: dict[str, Any] = {TAG: "enum", "cls": _written_name(kind, path), "name": value.name}
            if value.name is None or kind.__members__.get(value.name) is not value:  # a combined Flag (READ|WRITE), Flag(0)
                doc["value"] = self.value(value.value, path, allow_pickle)
            return doc
        if kind is int:
            if _INT_MIN <= value <= _INT_MAX:
                return value
            return {TAG: "int", "v": str(value)}
        if kind is bytes:
            return value
        if kind is bytearray:
            return self.enter(value, path) or {TAG: "bytearray", "v": bytes(value)}
        if kind is list:
            sub = self.value
            return self.enter(value, path) or [sub(v, f"{path}[{i}]", allow_pickle) for i, v in enumerate(value)]
        if kind is tuple or isinstance(value, tuple) and hasattr(kind, "_fields"):
            items = [self.value(v, f"{path}[{i}]", allow_pickle) for i, v in enumerate(value)]
            if kind is not tuple:  # a namedtuple
                return {TAG: "namedtuple", "cls": _written_name(kind, path), "v": items}
            return {TAG: "tuple", "v": items}
        if kind is dict:
            ref = self.enter(value, path)
            if ref is not None:
                return ref
            if all(type(k) is str and utf8_ok(k) for k in value) and TAG not in value:
                sub = self.value
                return {k: sub(v, f"{path}[{k!r}]", allow_pickle) for k, v in value.items()}
            return {TAG: "dict", "v": self.pairs(value, path, allow_pickle)}
        if kind in _COLLECTIONS:  # deque, defaultdict, OrderedDict, Counter: their own type back, never a plain one
            return self.enter(value, path) or self.collection(value, path, allow_pickle)
        if kind in (set, frozenset):
            return (self.enter(value, path) if kind is set else None) or self.items(value, path, allow_pickle)
        if kind is dt.datetime:
            return _with_zone({TAG: "datetime", "v": value.isoformat(), **({"fold": 1} if value.fold else {})}, value.tzinfo)
        if kind is dt.date:
            return {TAG: "date", "v": value.isoformat()}
        if kind is dt.time:
            return _with_zone({TAG: "time", "v": value.isoformat()}, value.tzinfo)
        if kind is dt.timedelta:
            return {TAG: "timedelta", "v": [value.days, value.seconds, value.microseconds]}
        if kind is Decimal:
            return {TAG: "decimal", "v": str(value)}
        if kind is uuid.UUID:
            return {TAG: "uuid", "v": value.hex}
        if isinstance(value, PurePath):
            flavour = "windows" if isinstance(value, PureWindowsPath) else "posix"
            tag = "purepath" if kind in (PurePosixPath, PureWindowsPath) else "path"
            return {TAG: tag, "flavour": flavour, "v": str(value)}
        if kind is complex:
            return {TAG: "complex", "v": [value.real, value.imag]}
        if kind is dt.timezone:  # (a fixed offset, and its name when one was given)
            off = value.utcoffset(None)
            doc = {TAG: "timezone", "v": [off.days, off.seconds, off.microseconds]}
            if value.tzname(None) != dt.timezone(off).tzname(None):
                doc["name"] = value.tzname(None)
            return doc
        if kind.__module__ == "zoneinfo" and isinstance(getattr(value, "key", None), str):
            return {TAG: "zone", "v": value.key}
        if kind is re.Pattern:
            return {TAG: "regex", "v": value.pattern, "flags": value.flags}
        if kind.__module__ == "numpy" and sys.modules.get("numpy") is not None:  # (never imported to look)
            return self.numpy(value, path)
        if is_typed(value):  # (made blank before its state is read back: its state may point at it)
            return self.enter(value, path) or {
                TAG: "obj",
                "cls": _written_name(type(value), path),
                "name": snapshot_name(value),
                "version": snapshot_version(value),
                "v": self.attrs(value.state_dict(), path, allow_pickle or _pickles(value)),
            }
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            ref = self.enter(value, path, False)
            if ref is not None:
                return ref
            fields = {f.name: self.value(getattr(value, f.name), f"{path}.{f.name}", allow_pickle) for f in dataclasses.fields(value)}
            self.done(value)
            return {TAG: "dataclass", "cls": _written_name(type(value), path), "v": fields}
        if callable(getattr(value, "model_dump", None)) and callable(getattr(type(value), "model_validate", None)):
            ref = self.enter(value, path, False)
            if ref is not None:
                return ref
            doc = self.model(value, path, allow_pickle)
            self.done(value)
            return doc
        if allow_pickle:
            try:
                return {TAG: "pickle", "v": pickle.dumps(value, protocol=5)}
            except Exception as exc:
                raise AgentSnapError(f"cannot snapshot {path}: pickling failed ({type(exc).__name__}: {exc})") from None
        raise UnsupportedValue(path, value)

    def numpy(self, value: Any, path: str) -> Any:
        """A numpy array (dtype, shape and the values' bytes, C order) or scalar (``np.float64(0.5)`` stays one)."""
        np = sys.modules["numpy"]
        if type(value) is np.ndarray or isinstance(value, np.generic):
            dtype: Any = value.dtype
            if dtype.hasobject or dtype.fields is not None:
                raise AgentSnapError(
                    f"cannot snapshot {path}: a numpy {'array' if type(value) is np.ndarray else 'value'} of dtype "
                    f"{dtype} (Python objects or named fields) has no plain bytes to store; convert it (.tolist()) or "
                    "set __snapshot_pickle__ = True")
            if type(value) is np.ndarray:
                return self.enter(value, path) or {TAG: "ndarray", "dtype": dtype.str, "shape": list(value.shape),
                                                   "v": np.ascontiguousarray(value).tobytes()}
            return {TAG: "npscalar", "dtype": dtype.str, "v": value.tobytes()}
        raise UnsupportedValue(path, value)  # (np.matrix, a masked array...: they would come back as plain arrays)

    def pairs(self, value: dict[Any, Any], path: str, allow_pickle: bool) -> list[list[Any]]:
        """A map's ``[key, value]`` pairs in its own order (as the decoder builds it again)."""
        return [[self.value(k, f"{path} key {k!r}", allow_pickle), self.value(v, f"{path}[{k!r}]", allow_pickle)]
                for k, v in value.items()]

    def collection(self, value: Any, path: str, allow_pickle: bool) -> dict[str, Any]:
        tag = _COLLECTIONS[type(value)]
        if tag == "deque":
            doc = {TAG: tag, "v": [self.value(v, f"{path}[{i}]", allow_pickle) for i, v in enumerate(value)]}
            if value.maxlen is not None:  # (a sliding window: it must go on dropping its oldest items)
                doc["maxlen"] = value.maxlen
            return doc
        doc = {TAG: tag}
        if tag == "defaultdict" and value.default_factory is not None:
            factory = value.default_factory
            if not (isinstance(factory, type) and _plain_factory(factory)):
                raise AgentSnapError(
                    f"cannot snapshot {path}: its default_factory {factory!r} is not a builtin or collections type, a "
                    "dataclass, a pydantic model or a Snapshottable class, so a restore could not make it again (it never "
                    "calls other callables a snapshot names); use one of those, or store dict(value)"[:400])
            doc["factory"] = _written_name(factory, f"{path}.default_factory")
        doc["v"] = self.pairs(value, path, allow_pickle)
        return doc

    def items(self, value: set[Any] | frozenset[Any], path: str, allow_pickle: bool) -> dict[str, Any]:
        """A set's items sorted by their bytes (one order for one set), numbered in that order as they are read."""
        mark = len(self.keep)
        items = [self.value(v, f"{path} item {v!r}", allow_pickle) for v in value]
        if len(self.keep) == mark:  # (nothing with an identity inside: the usual case)
            items.sort(key=pack)
        else:
            order = sorted(range(len(items)), key=lambda i: pack(items[i]))
            self.rewind(mark)
            members = list(value)
            items = [self.value(members[i], f"{path} item {members[i]!r}", allow_pickle) for i in order]
        return {TAG: "frozenset" if type(value) is frozenset else "set", "v": items}

    def model(self, value: Any, path: str, allow_pickle: bool) -> dict[str, Any]:
        held = _model_fields(value)
        if held is not None:  # pydantic 2: the fields as they are, read back without validation
            doc = {TAG: "model", "cls": _written_name(type(value), path),
                   "fields": {k: self.value(v, f"{path}.{k}", allow_pickle) for k, v in held.items()},
                   "set": sorted(getattr(value, "__pydantic_fields_set__", ()))}
            extra = getattr(value, "__pydantic_extra__", None)
            if extra:
                doc["extra"] = self.value(dict(extra), f"{path} (extra fields)", allow_pickle)
            return doc
        dumped = value.model_dump(mode="python")
        return {TAG: "model", "cls": _written_name(type(value), path), "v": self.value(dumped, path, allow_pickle)}


def shares_objects(doc: Any) -> bool:
    """Whether an encoded value (or a layer holding one) refers back to an object written earlier in it (a ``ref``:
    what two places share, or a cycle). Its references are numbered in the order the whole value was written, so it
    must never be put together from parts of two such values (a merge takes it whole)."""
    stack = [doc]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if item.get(TAG) == "ref":  # (a user's dict with a "$t" key is written as a tagged "dict")
                return True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _needs_init_vars(cls: Any) -> bool:
    """Whether ``cls.__init__`` takes an ``InitVar`` without a default (never stored: only ``__init__`` sees it)."""
    real = {f.name for f in dataclasses.fields(cls)}
    for f in getattr(cls, "__dataclass_fields__", {}).values():  # (fields, ClassVars and InitVars)
        if f.name in real or not f.init or f.default is not dataclasses.MISSING:
            continue
        hint = f.type
        if isinstance(hint, dataclasses.InitVar) or hint is dataclasses.InitVar or (
                isinstance(hint, str) and hint.replace("dataclasses.", "").startswith("InitVar")):
            return True
    return False


#: "no such field" in :func:`_decode_tagged`'s check of a constructed model
_MISSING = object()


def _model_fields(value: Any) -> dict[str, Any] | None:
    """A pydantic 2 model's field values by field name (what its ``__dict__`` holds), or None for another kind.

    Not ``model_dump()``: a dump leaves out fields marked ``exclude=True`` (their values came back as the defaults),
    adds ``@computed_field`` values (refused on the way back by ``extra="forbid"``), is keyed the way
    ``model_validate`` does not read when fields have aliases (the snapshot saved and could never be restored), and
    turns a submodel held in a field typed as its base class into a plain dict. Fields are encoded one by one, so
    nested models keep their own classes, and loaded with ``model_construct``: the state as it was, not validated
    again (validators that change values would change them a second time)."""
    cls = type(value)
    declared = cls.__dict__.get("__pydantic_fields__") or getattr(cls, "model_fields", None)
    attrs = getattr(value, "__dict__", None)
    if not (isinstance(declared, dict) and isinstance(attrs, dict) and callable(getattr(cls, "model_construct", None))
            and hasattr(value, "__pydantic_fields_set__") and set(attrs) <= set(declared)):
        return None
    return dict(attrs)


def _with_zone(doc: dict[str, Any], tz: dt.tzinfo | None) -> dict[str, Any]:
    key = getattr(tz, "key", None)  # zoneinfo.ZoneInfo: keep the zone, not only today's offset
    if isinstance(key, str):
        doc["tz"] = key
    return doc


def decode_value(data: Any, path: str = "value", *, trust_pickle: bool = False) -> Any:
    """The inverse of :func:`encode_value`; nested snapshottable objects get their migrations applied. A list, dict,
    set or object written once and referenced twice comes back as one object referenced twice."""
    token = _DECODING.set(True)
    try:
        dec = _Decoder(trust_pickle)
        out = dec.value(data, path)
        dec.finish()
        return out
    finally:
        _DECODING.reset(token)


#: set while a snapshot is read back: Snapshottable.load_state_dict then sets what it is given (the decoder has
#: already loaded in place each object it could, consistently with every other reference to it)
_DECODING: ContextVar[bool] = ContextVar("agentsnap_decoding", default=False)


class _Decoder:
    def __init__(self, trust_pickle: bool) -> None:
        self.trust_pickle = trust_pickle
        self.memo: dict[int, Any] = {}
        self.count = 0
        self.used: set[int] = set()  # ids of objects already loaded in place (each takes one saved object's state)
        self.pending: list[tuple[Any, Any]] = []  # (live object, its state): loaded once everything decoded
        self.fills: list[tuple[Any, Any]] = []  # (live container, the saved contents): refilled once decoded

    def finish(self) -> None:
        """Refill the containers and load the objects the program already holds (in place), now that the whole value
        has been read and migrated: a value that fails to decode halfway leaves them as they were, never
        half-restored."""
        for live, saved in self.fills:
            live.clear()
            if isinstance(live, dict):
                for k, x in saved.items():  # (a Counter's update() would add; an OrderedDict keeps this order)
                    live[k] = x
            elif isinstance(live, set):
                live.update(saved)
            else:  # list, deque
                live.extend(saved)
        self.fills.clear()
        for obj, state in self.pending:
            obj.load_state_dict(state)
        self.pending.clear()

    def filled(self, live: Any, saved: Any) -> Any:
        """``live``, to take ``saved``'s contents at :meth:`finish` (what refers to it meanwhile is ``live`` already)."""
        self.fills.append((live, saved))
        return live

    def live(self, target: Any, kind: type, fits: bool = True) -> bool:
        """Whether ``target`` (a container the program holds where the saved one sits) takes the saved contents in
        place: of exactly the saved type, and not already taking another saved container's."""
        if type(target) is not kind or not fits or id(target) in self.used:
            return False
        self.used.add(id(target))
        return True

    def reserve(self, obj: Any = _BUSY) -> int:
        n = self.count
        self.memo[n] = obj
        self.count += 1
        return n

    def value(self, data: Any, path: str, target: Any = None) -> Any:
        """``data`` decoded; ``target``: what the program holds there now (loaded in place when it fits, see
        :meth:`attrs`), else None."""
        if isinstance(data, list):
            live = self.live(target, list)
            out: list[Any] = []
            self.reserve(target if live else out)
            out.extend([self.value(v, f"{path}[{i}]") for i, v in enumerate(data)])
            return self.filled(target, out) if live else out
        if not isinstance(data, dict):
            return data
        if TAG not in data:
            live = self.live(target, dict)
            plain: dict[Any, Any] = {}
            self.reserve(target if live else plain)
            for k, x in data.items():
                plain[k] = self.value(x, f"{path}[{k!r}]", target.get(k) if live else None)
            return self.filled(target, plain) if live else plain
        tag, v = data[TAG], data.get("v")
        try:
            return self.tagged(tag, v, data, path, target)
        except AgentSnapError:
            raise
        except Exception as exc:
            raise AgentSnapError(f"cannot restore {path}: bad {tag!r} value ({type(exc).__name__}: {exc})") from None

    def attrs(self, v: Any, path: str, owner: Any, fill: bool = False) -> Any:
        """An object's saved state. Under a Snapshottable, what the program already holds is loaded in place: an
        attribute holding an object of the saved class (with its private attributes: clients, locks), and the
        lists, dicts, sets and deques the instance's own attributes hold (a dict's values by key), which others may
        hold too (a UI's ``view = agent.history``), when ``fill``: the owner is one the program holds, loaded once
        :meth:`finish` has put the saved contents in them, and no migration reads them before (a new object's
        ``load_state_dict`` runs at once, and a migration reads the saved contents). Never a class-level default
        (``history = []`` in the class body), which every instance shares."""
        if not (isinstance(v, dict) and TAG not in v):
            return self.value(v, path)
        in_place = isinstance(owner, Snapshottable)  # (an override of load_state_dict that calls super() included)
        own = instance_attributes(owner) if in_place and fill else {}
        state: dict[str, Any] = {}
        for k, x in v.items():
            target = getattr(owner, k, None) if in_place and isinstance(x, dict) and x.get(TAG) == "obj" else own.get(k)
            state[k] = self.value(x, f"{path}.{k}", target)
        return state

    def load(self, obj: Any, v: Any, data: dict[str, Any], cls: Any, path: str, live: bool) -> Any:
        """Load saved state ``v`` (class ``cls``, as ``data`` names its version) into ``obj``; a ``live`` one (that the
        program holds) at :meth:`finish`."""
        from agentsnap_core.format.migrations import _same_version, migrate

        version = str(data.get("version"))
        state = migrate(str(data.get("name") or cls.__name__), version,
                        self.attrs(v, path, obj, live and _same_version(version, snapshot_version(cls))), snapshot_version(cls),
                        path)
        if live:
            self.pending.append((obj, state))
        else:
            obj.load_state_dict(state)
        return obj

    def tagged(self, tag: Any, v: Any, data: dict[str, Any], path: str, target: Any) -> Any:  # noqa: C901, PLR0911, PLR0912
        sub = self.value
        if tag == "ref":
            found = self.memo.get(v, _BUSY) if type(v) is int else _BUSY
            if found is _BUSY:
                raise AgentSnapError(f"cannot restore {path}: it refers to object {v!r}, which the snapshot does not "
                                     "hold before it (a damaged snapshot)")
            return found
        if tag == "tuple":
            return tuple(sub(x, f"{path}[{i}]") for i, x in enumerate(v))
        if tag == "namedtuple":
            cls = _find_class(data.get("cls"), path)
            if not (issubclass(cls, tuple) and hasattr(cls, "_fields")):  # (never a call of any class it names)
                raise _not_a(path, data.get("cls"), "namedtuple")
            return cls(*(sub(x, f"{path}[{i}]") for i, x in enumerate(v)))
        if tag in ("dict", "odict", "counter", "defaultdict"):
            if tag == "defaultdict":
                factory = data.get("factory")
                made = None if factory is None else _find_class(factory, f"{path}.default_factory")
                if made is not None and not _plain_factory(made):
                    raise _not_a(f"{path}.default_factory", factory, "container or data class")
                out: Any = collections.defaultdict(made)
                live = self.live(target, collections.defaultdict, getattr(target, "default_factory", None) is made)
            else:
                out = {"dict": dict, "odict": collections.OrderedDict, "counter": collections.Counter}[tag]()
                live = self.live(target, type(out))
            self.reserve(target if live else out)
            for k, x in v:
                key = sub(k, f"{path} key")
                out[key] = sub(x, f"{path}[{key!r}]", target.get(key) if live else None)
            return self.filled(target, out) if live else out
        if tag == "deque":
            window: collections.deque[Any] = collections.deque(maxlen=data.get("maxlen"))
            live = self.live(target, collections.deque, getattr(target, "maxlen", None) == window.maxlen)
            self.reserve(target if live else window)
            window.extend([sub(x, f"{path}[{i}]") for i, x in enumerate(v)])
            return self.filled(target, window) if live else window
        if tag == "set":
            items: set[Any] = set()
            live = self.live(target, set)
            self.reserve(target if live else items)
            items.update(sub(x, f"{path} item") for x in v)
            return self.filled(target, items) if live else items
        if tag == "frozenset":
            return frozenset(sub(x, f"{path} item") for x in v)
        if tag == "int":
            return int(v)
        if tag == "str":
            return bytes(v).decode("utf-8", "surrogatepass")
        if tag == "bytearray":
            buf = bytearray(v)
            self.reserve(buf)
            return buf
        if tag in ("datetime", "time"):
            value = dt.datetime.fromisoformat(v) if tag == "datetime" else dt.time.fromisoformat(v)
            if isinstance(data.get("tz"), str):
                from zoneinfo import ZoneInfo

                value = value.replace(tzinfo=ZoneInfo(data["tz"]), fold=1 if data.get("fold") else 0)
            return value
        if tag == "date":
            return dt.date.fromisoformat(v)
        if tag == "timedelta":
            return dt.timedelta(days=v[0], seconds=v[1], microseconds=v[2])
        if tag == "decimal":
            return Decimal(v)
        if tag == "uuid":
            return uuid.UUID(hex=v)
        if tag in ("path", "purepath"):
            import os
            from pathlib import Path

            windows = data.get("flavour") == "windows"
            if tag == "path" and windows == (os.name == "nt"):
                return Path(v)  # a concrete path of this system's flavour
            return (PureWindowsPath if windows else PurePosixPath)(v)
        if tag == "complex":
            return complex(v[0], v[1])
        if tag == "timezone":
            off = dt.timedelta(days=v[0], seconds=v[1], microseconds=v[2])
            return dt.timezone(off, data["name"]) if "name" in data else dt.timezone(off)
        if tag == "zone":
            from zoneinfo import ZoneInfo

            return ZoneInfo(v)
        if tag == "regex":
            return re.compile(v, int(data.get("flags") or 0))
        if tag == "enum":
            cls = _find_class(data.get("cls"), path)
            if not issubclass(cls, enum.Enum):
                raise AgentSnapError(f"cannot restore {path}: {data.get('cls')} is not an Enum")
            if "value" in data:  # a value that is no single member (a combined Flag)
                return cls(sub(data["value"], path))
            return cls[data["name"]]
        if tag == "dataclass":
            n = self.reserve()
            cls = _find_class(data.get("cls"), path)
            if not dataclasses.is_dataclass(cls):
                raise AgentSnapError(f"cannot restore {path}: {data.get('cls')} is not a dataclass")
            values = {k: sub(x, f"{path}.{k}") for k, x in v.items()}
            fields = {f.name: f for f in dataclasses.fields(cls)}
            if _needs_init_vars(cls):  # (its __init__ cannot be called again: the fields alone, as they were)
                obj: Any = cls.__new__(cls)
            else:  # __init__ and __post_init__ run, so what they make besides the fields is there again...
                obj = cls(**{k: x for k, x in values.items() if k in fields and fields[k].init})
            for k, x in values.items():  # ...and every field is then set as it was saved: a __post_init__ that
                if k in fields:  # changes a field (prepends, normalises) does not change it a second time
                    object.__setattr__(obj, k, x)
            self.memo[n] = obj
            return obj
        if tag == "model":
            n = self.reserve()
            self.memo[n] = obj = self.model(v, data, path)
            return obj
        if tag == "obj":
            n = self.reserve()
            cls = _find_class(data.get("cls"), path)
            if not (is_typed_class(cls) and callable(getattr(cls, "load_state_dict", None))):
                raise _not_a(path, data.get("cls"), "Snapshottable class (or one with __snapshot_version__)")
            if type(target) is cls and id(target) not in self.used:  # loaded in place (see attrs)
                obj = target
            else:  # (blank first: what its state holds may point back at it)
                obj = _blank(cls)
            self.used.add(id(obj))
            self.memo[n] = obj
            return self.load(obj, v, data, cls, path, live=obj is target)
        if tag in ("ndarray", "npscalar"):
            import numpy as np  # (a library the snapshot's own values need, never a module the snapshot names)

            flat = np.frombuffer(v, dtype=np.dtype(data.get("dtype")))
            if tag == "npscalar":
                return flat[0]
            array = flat.reshape(data.get("shape")).copy()  # (a copy: frombuffer's view is read-only)
            self.reserve(array)
            return array
        if tag == "pickle":
            if not self.trust_pickle:
                raise UnsafeSnapshot(
                    path, "it holds pickled data and loading pickle runs code; pass trust_pickle=True only for a store you wrote yourself"
                )
            return pickle.loads(v)  # noqa: S301 - opt-in, trusted store only
        raise AgentSnapError(f"cannot restore {path}: unknown value tag {tag!r} (written by a newer agentsnap?)")

    def model(self, v: Any, data: dict[str, Any], path: str) -> Any:
        cls = _find_class(data.get("cls"), path)
        if isinstance(data.get("fields"), dict):  # (written by _model_fields)
            construct = getattr(cls, "model_construct", None)
            if not callable(construct):
                raise AgentSnapError(f"cannot restore {path}: {data.get('cls')} has no model_construct()")
            values = {k: self.value(x, f"{path}.{k}") for k, x in data["fields"].items()}
            extra = self.value(data["extra"], f"{path} (extra fields)") if data.get("extra") else {}
            obj = construct(_fields_set=set(data.get("set") or ()), **{**extra, **values})
            missing = {k for k in values if obj.__dict__.get(k, _MISSING) is not values[k]}
            if missing:  # (a field whose name is another field's alias: set as it was saved)
                for k in missing:
                    obj.__dict__[k] = values[k]
            return obj
        validate = getattr(cls, "model_validate", None)
        if not callable(validate):
            raise AgentSnapError(f"cannot restore {path}: {data.get('cls')} has no model_validate()")
        return validate(self.value(v, path))


def _blank(cls: Any) -> Any:
    """An instance to load state into: ``cls()`` when it takes no arguments, else an uninitialised one."""
    try:
        return cls()
    except TypeError:
        return cls.__new__(cls)


# ---------------------------------------------------------------------------------------------- layers
def dump_state(obj: Any) -> dict[str, Any]:
    """The state layer of a typed object: an envelope with its class name, schema version and encoded state."""
    name = snapshot_name(obj)
    return {"format": ENVELOPE, "v": ENVELOPE_VERSION, "class": name, "version": snapshot_version(obj),
            "state": _encode_state(obj, name)}


def _encode_state(obj: Any, name: str) -> Any:
    """``obj.state_dict()`` encoded, its entries named as ``name.attr`` in errors; ``obj`` itself is object 0 (what
    its state holds may point back at the agent)."""
    enc = _Encoder()
    enc.enter(obj, name)
    try:
        return enc.attrs(obj.state_dict(), name, _pickles(obj))
    except RecursionError:  # (data nested thousands deep: never a bare RecursionError)
        raise AgentSnapError(f"cannot snapshot {name}: its state nests deeper than can be encoded; flatten it or "
                             "make that attribute private (_name)") from None


def _load_into(obj: Any, encoded: Any, name: str, version: str, *, trust_pickle: bool) -> None:
    """Load an encoded state (from :func:`_encode_state`) into ``obj`` (object 0), migrating it from ``version``."""
    from agentsnap_core.format.migrations import _same_version, migrate

    dec = _Decoder(trust_pickle)
    dec.reserve(obj)
    dec.used.add(id(obj))
    token = _DECODING.set(True)
    try:
        fill = _same_version(version, snapshot_version(obj))  # (then finish() has filled them before load_state_dict)
        state = migrate(name, version, dec.attrs(encoded, name, obj, fill), snapshot_version(obj), name)
        dec.finish()
        obj.load_state_dict(state)
    finally:
        _DECODING.reset(token)


def load_state(obj: Any, layer: Any, *, trust_pickle: bool = False) -> None:
    """Load a state layer written by :func:`dump_state` into ``obj``, migrating it to ``obj``'s version first."""
    if not (isinstance(layer, dict) and layer.get("format") == ENVELOPE):
        if isinstance(layer, dict):  # a plain state_dict layer (written before the object was typed)
            obj.load_state_dict(layer)
            return
        raise AgentSnapError(f"cannot restore {type(obj).__name__}: the state layer is not a state dict")
    if layer.get("v") != ENVELOPE_VERSION:
        from agentsnap_core.errors import UnsupportedFormat

        raise UnsupportedFormat("typed state layer", layer.get("v"), ENVELOPE_VERSION)
    name = str(layer.get("class"))
    if name != snapshot_name(obj):
        raise AgentSnapError(f"the snapshot holds a {name} agent; it cannot be loaded into a {snapshot_name(obj)}")
    _load_into(obj, layer.get("state"), name, str(layer.get("version")), trust_pickle=trust_pickle)


def typed_trace(obj: Any) -> list[dict[str, Any]]:
    """A typed agent's ``messages`` for the trace layer when they are plain data (the state holds them anyway)."""
    messages = getattr(obj, "messages", None)
    if isinstance(messages, list) and all(isinstance(m, dict) for m in messages):
        try:
            pack_value(messages)  # (plain data? the check only: the trace layer packs them in their own order)
        except AgentSnapError:
            return []
        return [dict(m) for m in messages]
    return []
