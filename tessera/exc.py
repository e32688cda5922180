"""Every error Tessera shows to users.

Each class carries a message template that says what is wrong in kernel terms and what to do
instead; the location (file, line, source excerpt with a caret) is attached when the error is
raised from user code. Errors pickle, so autotune workers can report them.
"""
from __future__ import annotations

import warnings

from tessera.location import SourceLocation


class TesseraError(Exception):
    """Base of every user-facing Tessera error.

    >>> raise TesseraError("bad thing", hint="do the good thing")  # doctest: +SKIP
    """

    template: str = "{detail}"

    def __init__(self, detail: str = "", *, hint: str | None = None,
                 location: SourceLocation | None = None, **fields: object) -> None:
        self.detail = detail
        self.hint = hint
        self.location = location
        self.fields = fields
        super().__init__(detail)

    def __reduce__(self):  # keep the location and hint across pickling
        return (_rebuild_error, (type(self), self.detail, self.hint, self.location, self.fields))

    @property
    def message(self) -> str:
        return self.template.format(detail=self.detail, **self.fields)

    def with_location(self, location: SourceLocation | None) -> TesseraError:
        if self.location is None and location is not None:
            self.location = location
        return self

    def __str__(self) -> str:
        parts = [self.message]
        if self.location is not None:
            parts.append(self.location.render())
        if self.hint:
            parts.append(f"hint: {self.hint}")
        return "\n".join(parts)


def _rebuild_error(cls: type, detail: str, hint: str | None, location: SourceLocation | None,
                   fields: dict) -> TesseraError:
    return cls(detail, hint=hint, location=location, **fields)


class NotInKernelError(TesseraError):
    """A `tessera.language` function was called outside a `@tessera.kernel` function."""
    template = "hl.{detail} can only be called inside a @tessera.kernel function"


class NotInTileLoopError(TesseraError):
    """A device-only operation was used on the host part of a kernel."""
    template = "hl.{detail} is a device operation and must be called inside an hl.tile / hl.grid loop"


class KernelArgumentError(TesseraError, TypeError):
    """A kernel was called with arguments that do not fit its signature (a TypeError too, as
    Python's own call would raise)."""


class DeviceMismatchError(TesseraError):
    """Tensors passed to one kernel call live on different devices."""


class ConfigError(TesseraError):
    """A Config does not fit the kernel (wrong key, wrong number of block sizes, bad value)."""


InvalidConfig = ConfigError  # Helion's name for it


class SettingValueError(ConfigError, ValueError):
    """An environment variable Tessera reads holds a value it cannot take (also a ValueError,
    what Helion raises for its own settings' variables)."""


class ShapeMismatchError(TesseraError):
    """Two sizes that must agree do not (broadcasting, indexing, stores)."""


class DtypeError(TesseraError):
    """An operation received a dtype it cannot handle."""


class AccumulatorDtypeError(DtypeError, TypeError):
    """A product's accumulator cannot hold its values exactly (hl.dot of int8 into a float
    accumulator); also a TypeError, as Helion raises it."""


class TypeInferenceError(TesseraError):
    """What torch itself refuses while a kernel's shapes are worked out (Helion's name for it):
    the index errors below are of this kind."""


class IndexingError(TypeInferenceError):
    """An index expression that Tessera cannot lower, or that is out of range."""


class NotSubscriptableError(IndexingError, TypeError):
    """A scalar argument indexed in a tile loop (`s[0]`); a TypeError too, as Python's own is, so
    code that tries indexing and falls back (sympy does) still does."""


class AtomicOnDeviceTensor(IndexingError):
    """An hl.atomic_* on a tile value (registers made in the tile loop) instead of a tensor in memory
    (Helion's name)."""


class TorchOperationError(TesseraError):
    """A torch operation in a tile body failed in eager mode for a reason no other class names
    (an integer division by zero in the data, ...): torch's message, at the user's line."""


class UnsupportedSyntaxError(TesseraError):
    """Python syntax that cannot appear inside a tile loop (break, return, ...)."""


class UnsupportedOperationError(TesseraError):
    """An operation that has no lowering in the chosen mode."""


class UnsupportedMethodError(UnsupportedOperationError, AttributeError):
    """A Tensor method with no primitive, looked up on a tile value (`v.frac()`); an AttributeError
    too, so `hasattr(v, name)` stays False instead of raising."""


class RefEagerModeCodePrintError(TesseraError):
    """print_output_code with ref_mode=RefMode.EAGER: eager mode generates no code to print."""


class InvalidJaggedTileUsage(TesseraError):
    """hl.jagged_tile where it has no meaning: as the outermost loop, over a scalar bound, or its
    tile used without the enclosing tiles its ends are over (Helion's name)."""


class InvalidAPIUsage(TesseraError):
    """An hl function called with arguments of the wrong kind (Helion's name for it)."""


class DeviceValueOnHostError(TesseraError):
    """A value computed inside a tile loop was read by host code after the loop."""


class DynamicAllocationError(TesseraError):
    """A register allocation (hl.zeros/hl.full) sized by a value only known at run time."""


ShapeSpecializingAllocation = DynamicAllocationError  # Helion's name for it


class RecompileLimitError(TesseraError):
    """A kernel compiled more variants than its max_variants setting allows."""


class InternalError(TesseraError):
    """Something failed inside Tessera or its backend rather than in the kernel (Helion's name)."""


class InvalidMemorySemantic(InvalidAPIUsage, InternalError):
    """An atomic's `sem=` is not a memory ordering; also an InternalError, the class Helion raises."""


class DevicePrintError(InvalidAPIUsage, InternalError):
    """A `print(...)` in a tile body that has no device print form (no string prefix first, or a
    host value to print); also an InternalError, the class Helion raises for these."""


class BackendCompileError(InternalError):
    """Triton rejected generated code: a Tessera bug, reported with the generated source path."""
    template = "internal error: Triton failed to compile the generated kernel: {detail}"


class InlineAsmError(TesseraError):
    """The GPU's assembler refused a kernel holding `hl.inline_asm_elementwise` PTX (e.g. instructions
    of a newer GPU): the user's assembly, not a Tessera bug."""
    template = "{detail}"


class OutOfResourcesError(TesseraError):
    """The kernel under this Config needs more shared memory or registers per program than the GPU
    has: the Config's tiles (or tensors read whole with `:`) are too big, not a Tessera bug."""
    template = "the kernel needs more of the GPU than it has under this Config: {detail}"


class AutotuneError(TesseraError):
    """Every autotuning candidate failed."""


# -- Helion's names for specific mistakes: each a subclass of the Tessera class that describes it,
# raised where Tessera detects that mistake (tests written for Helion catch them by these names)

ShapeMismatch = ShapeMismatchError  # Helion's name for the same mistake


class RankMismatch(IndexingError):
    """A tensor indexed with more (or fewer) indices than it has dimensions."""


class DuplicateStoreIndicesError(IndexingError):
    """A store whose lanes write different values to one element (on the GPU which lane wins is
    undefined); eager mode, the reference, refuses it."""


class GraphModuleUnsupportedOps(UnsupportedOperationError):
    """A torch.fx.GraphModule argument whose graph reads module state (call_module / get_attr
    nodes: submodules, parameters, buffers): a tile loop runs pure computation graphs only."""


class DataDependentOutputShapeNotSupported(UnsupportedOperationError, IndexingError):
    """An operation whose result shape depends on tensor data (boolean-mask indexing, nonzero);
    an IndexingError too, as a boolean mask used as an index is one."""


class UnsupportedSplitOperation(UnsupportedOperationError):
    """torch.chunk/split/unbind/tensor_split on a tile value (use hl.split)."""


class NotAllowedOnDevice(UnsupportedSyntaxError):
    """A statement that cannot run inside a tile loop (`return`, ...)."""


class StatementNotSupported(UnsupportedSyntaxError):
    """A statement a kernel function cannot contain (e.g. a nested `def`)."""


class InvalidDeviceForLoop(UnsupportedSyntaxError):
    """A `for` loop inside a tile loop over something other than hl.tile/hl.grid/range/a tuple."""


class CannotModifyHostVariableOnDevice(DeviceValueOnHostError):
    """A tile loop rebinds a variable of the host code (`out = ...` instead of `out[tile] = ...`)."""


class CannotReadDeviceVariableOnHost(DeviceValueOnHostError):
    """Host code reads a variable that only a tile loop assigns."""


class DeviceTensorSubscriptAssignmentNotAllowed(UnsupportedOperationError):
    """Item assignment into a tile value (`v[0] = 1`): tile values are immutable registers."""


class DecoratorAfterHelionKernelDecorator(UnsupportedSyntaxError):
    """A decorator between the kernel decorator and the function (or a wrapper function given as
    the kernel): the kernel compiles the function's own body, so the decorator would be skipped."""


class FailedToUnpackTile(TesseraError):
    """A tile loop target unpacks a different number of tiles than the loop makes."""


class InvalidTileRange(TesseraError):
    """hl.tile(begin, end) with begin > end, both known while compiling."""


class TileOfTile(TesseraError):
    """hl.tile(t) of a tile `t`: tile loops take sizes or ranges."""


class NestedKernelCallsNotSupported(TesseraError):
    """A kernel called inside another kernel's tile loop."""


class DotBatchDimensionMismatch(ShapeMismatchError):
    """hl.dot/torch.bmm operands whose batch dimensions differ."""


class BreakpointInDeviceLoopRequiresInterpret(UnsupportedOperationError):
    """breakpoint() inside a tile loop of a kernel compiled for the GPU (eager and interpret stop)."""


class ControlFlowTensorMismatch(ShapeMismatchError):
    """The branches of an `if` give one variable tensors of different ranks, shapes or dtypes."""


class BaseWarning(UserWarning):
    """A warning a kernel's `ignore_warnings=[...]` setting can silence (Helion's class names)."""


class TesseraWarning(BaseWarning):
    """The kernel runs, but likely not as its author meant; shown at the user's line."""


def warn(detail: str, *, location: SourceLocation | None, hint: str, category: type[BaseWarning] | None = None) -> None:
    """Issue a warning (a `TesseraWarning` unless `category` names one of Helion's classes below)
    rendered like an error (location with a caret, hint), attributed to the user's file and line so
    Python's once-per-line filter applies to that line. A Helion class's text starts as Helion's
    report does, `WARNING[ClassName]: `, which tools (and Helion's tests) look for."""
    category = category or TesseraWarning
    if category is not TesseraWarning:
        detail = f"WARNING[{category.__name__}]: {detail}"
    text = "\n".join([detail, *([location.render()] if location is not None else []), f"hint: {hint}"])
    if location is None:
        warnings.warn(text, category, stacklevel=2)
    else:
        warnings.warn_explicit(text, category, location.filename, location.lineno, registry=_warned)


_warned: dict = {}  # the registry Python's warning filters use for "once per line" (warn_explicit's)


# -- warnings: the classes Helion's `ignore_warnings=[...]` names, at the same place ------------

class TensorOperationInWrapper(BaseWarning):
    """A torch operation on a tensor runs in the host code, outside every tile loop."""


class TensorOperationsInHostCall(TensorOperationInWrapper):
    """Helion's older name of TensorOperationInWrapper."""


class WrongDevice(BaseWarning):
    """A tensor is on a device other than the kernel's."""


class BlockSizeIgnoredInInterpretMode(BaseWarning):
    """Block sizes do not matter in eager mode."""


class TiledKMatmulAccumulationWarning(BaseWarning):
    """A matmul over a tiled K is accumulated in a low precision."""


class ProcessGroupNameNotFound(BaseWarning):
    """A distributed kernel found no process group (one-GPU Tessera never warns this)."""


class NoAOTHeuristicWarning(BaseWarning):
    """No ahead-of-time heuristic exists for this call."""


_PASSING_FRAMES = frozenset({("factories.py", "__torch_function__"), ("control.py", "torch_call_helper")})


def python_error_at_user_line(error: TypeError, filename: str, lines: range | None = None) -> TesseraError | None:
    """A TypeError raised by Python itself at a kernel line inside a tile loop (`s[0]` of a scalar
    argument) as a located error, or None when the innermost frame is not the kernel's code in
    `filename` (within `lines` when given)."""
    traceback = error.__traceback__
    if traceback is None:
        return None
    frames = []
    while traceback is not None:
        frames.append(traceback)
        traceback = traceback.tb_next
    # torch's argument parser raises (`torch.atan2(0.5, v)`) in the Tessera frame that passed the
    # user's call on to torch: the user's line is the frame before it
    while len(frames) > 1 and (frames[-1].tb_frame.f_code.co_filename.rsplit("/", 1)[-1],
                               frames[-1].tb_frame.f_code.co_name) in _PASSING_FRAMES:
        frames.pop()
    traceback = frames[-1]
    frame = traceback.tb_frame
    if frame.f_code.co_filename != filename or (lines is not None and traceback.tb_lineno not in lines):
        return None
    # the trace's stand-ins for a scalar argument and a tile value are no names of the user's
    message = str(error).replace("'HostScalar' object", "a scalar argument").replace("'TileValue' object", "a tile value")
    if "subscriptable" in message:
        return NotSubscriptableError(f"{message} (Python raised this inside a tile loop)",
                                     location=SourceLocation.from_frame(frame),
                                     hint="only tensors and tiles are indexed in a tile loop; a scalar argument is "
                                          "one number: pass a tensor to index, or use the scalar as it is")
    return UnsupportedOperationError(f"{message} (Python raised this inside a tile loop)",
                                     location=SourceLocation.from_frame(frame),
                                     hint="PyTorch takes no arguments of these types here (eager PyTorch raises the "
                                          "same): pass tile values or tensors where it asks for a Tensor")
