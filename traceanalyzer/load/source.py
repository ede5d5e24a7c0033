"""Bytes of a trace file, decompressed on the fly when it is gzip (detected by its magic
number, not its name). isal inflates about 3x faster than the stdlib; its streaming
decompressor keeps every byte produced before a cut-short stream ends, so a truncated .gz is
salvaged up to the cut instead of losing the last block."""

from __future__ import annotations

import io
import mmap
import os
import queue
import stat
import threading
from collections.abc import Callable
from typing import Any, BinaryIO

from traceanalyzer.errors import DecompressionLimitError, TraceReadError
from traceanalyzer.load.urls import is_url, local_path, open_url

try:  # isal is a hard dependency; the fallback only keeps a broken install usable.
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover
    import zlib as _zlib  # type: ignore[no-redef]

GZIP_MAGIC = b"\x1f\x8b"
READ_BLOCK = 4 << 20
# Compressed bytes inflated per step: a Kineto trace compresses 10-30x, so a step gives a few
# MB and a read of n bytes returns little more than n (4 MiB at once would give ~50 MB).
GZ_READ_BLOCK = 256 << 10
# Inflated bytes per call of the inflater: each is a new bytes object (the zlib API has no
# "inflate into"), copied into the caller's buffer and freed at once by the same thread, so
# the heap reuses one small block instead of growing with the chunk.
GZ_PIECE = 1 << 20
# A Kineto trace compresses 10-30x; 64 GiB of JSON is far past any real trace and still
# stops a decompression bomb before it fills memory.
DEFAULT_MAX_DECOMPRESSED = 64 << 30

ProgressFn = Callable[[int, int], None]


class ByteSource:
    """A readable stream of the trace's JSON bytes. Use as a context manager."""

    def __init__(
        self,
        path: str | os.PathLike[str] | BinaryIO,
        *,
        max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
        progress: ProgressFn | None = None,
        serial_only: bool = False,
    ) -> None:
        # The path as given (a Path's `.name` would be its basename); a file object's name.
        self.name = str(getattr(path, "name", path)) if hasattr(path, "read") else os.fsdecode(path)
        self.max_decompressed = max_decompressed
        self.progress = progress
        self.truncated: str | None = None  # why the stream ended early, if it did
        self.decompressed_bytes = 0
        self._owns = not hasattr(path, "read")
        # A path this source can be opened again from (None for a file object given to us).
        self.path: str | None = os.fsdecode(path) if self._owns else None
        self.serial_only = serial_only  # set on a re-read after the parallel path gave up
        self.regular = False  # a local regular file (set by `_open`): read ahead by the kernel
        self.in_memory = isinstance(path, io.BytesIO)  # bytes at hand: nothing to fetch ahead
        self._fh: BinaryIO = self._open(path) if self._owns else path  # type: ignore[assignment]
        self.total_size = self._size()
        self.raw_read = 0
        head = self._fh.read(2)
        self.raw_read += len(head)
        self.compressed = head == GZIP_MAGIC
        self._inflater = _zlib.decompressobj(31) if self.compressed else None
        self._pending = b"" if self.compressed else head  # plain bytes read but not returned
        self._tail: bytes | memoryview = head if self.compressed else b""  # compressed, not inflated
        self._raw: bytearray | None = None  # the reused buffer of compressed bytes
        self._limited = False  # the last piece filled its limit: more output may be pending
        self._eof = False

    def _open(self, path: str | os.PathLike[str]) -> BinaryIO:
        if is_url(path):  # fsspec: a file:// URL is a local path; others are read through their filesystem
            local = local_path(str(path))
            if local is None:
                fh, self._url_size = open_url(str(path))
                return fh
            path = local
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise TraceReadError(str(path), "no such file") from None
        except PermissionError:
            raise TraceReadError(str(path), "permission denied") from None
        if stat.S_ISDIR(st.st_mode):
            try:
                names = [
                    n for n in os.listdir(path) if n.endswith((".json", ".json.gz", ".trace.json", ".pt.trace.json.gz"))
                ]
            except OSError:
                names = []
            if not names:
                raise TraceReadError(str(path), "is a directory with no trace files (*.json, *.json.gz) in it")
            raise TraceReadError(str(path), f"is a directory ({len(names)} trace files in it): give one trace file")
        if not stat.S_ISREG(st.st_mode) and not stat.S_ISFIFO(st.st_mode) and not stat.S_ISCHR(st.st_mode):
            raise TraceReadError(str(path), "is not a regular file")
        self.regular = stat.S_ISREG(st.st_mode)
        try:
            return open(path, "rb")
        except PermissionError:
            raise TraceReadError(str(path), "permission denied") from None
        except OSError as exc:
            raise TraceReadError(str(path), f"cannot open: {exc.strerror or exc}") from None

    def _size(self) -> int:
        if getattr(self, "_url_size", 0):
            return self._url_size
        try:
            return os.fstat(self._fh.fileno()).st_size
        except (OSError, AttributeError, ValueError):
            return 0

    def readinto(self, out: bytearray | memoryview) -> int:
        """Fill `out` with the next decompressed bytes; the count (less than len(out) only at
        the end, 0 after it). Nothing is allocated per call for a plain file (the file reads
        into `out`); gzip is inflated in pieces of at most `GZ_PIECE` bytes copied into it."""
        out = memoryview(out).cast("B")
        got = 0
        if self._pending:
            got = len(self._pending)
            out[:got] = self._pending
            self._pending = b""
        got = self._fill_gz(out, got) if self.compressed else self._fill_plain(out, got)
        self.decompressed_bytes += got
        if self.compressed and self.decompressed_bytes > self.max_decompressed:
            raise DecompressionLimitError(
                self.name,
                f"decompresses to more than {self.max_decompressed:,} bytes "
                "(raise --max-decompressed if this trace is genuine)",
            )
        return got

    def read(self, n: int = READ_BLOCK) -> bytes:
        """Up to n decompressed bytes (n unless at the end); b"" at the end."""
        buf = bytearray(n)
        k = self.readinto(buf)
        # One copy out, and `buf` never resized: a view of it may outlive `readinto` (a frame a
        # sampling profiler holds keeps its locals: Dask's, on a worker thread), and resizing an
        # exported bytearray raises BufferError.
        return memoryview(buf)[:k].tobytes()

    def _fill_plain(self, out: memoryview, got: int) -> int:
        readinto = getattr(self._fh, "readinto", None)
        while got < len(out) and not self._eof:
            try:
                if readinto is not None:
                    k = readinto(out[got:])
                else:  # a file object without readinto (some fsspec ones)
                    raw = self._fh.read(len(out) - got)
                    k = len(raw)
                    out[got : got + k] = raw
            except OSError as exc:
                raise TraceReadError(self.name, f"read failed: {exc.strerror or exc}") from None
            if not k:
                self._eof = True
                break
            self.raw_read += k
            got += k
            if self.progress is not None:
                self.progress(self.raw_read, self.total_size)
        if self.regular and not self._eof:
            self._read_ahead(len(out))
        return got

    def _read_ahead(self, n: int) -> None:
        """Ask the kernel to read the next n bytes of the file in the background (a no-op when
        they are cached): the caller decodes what it has meanwhile, with no reading thread."""
        try:
            os.posix_fadvise(self._fh.fileno(), self.raw_read, n, os.POSIX_FADV_WILLNEED)
        except (AttributeError, OSError, ValueError):  # not Linux, or not a file descriptor
            self.regular = False

    def _next_raw(self) -> memoryview | None:
        """The next compressed block, read into the reused `_raw` buffer; None at the end."""
        if self._raw is None:
            self._raw = bytearray(GZ_READ_BLOCK)
        try:
            if hasattr(self._fh, "readinto"):
                k = self._fh.readinto(self._raw)
            else:
                data = self._fh.read(GZ_READ_BLOCK)
                k = len(data)
                self._raw[:k] = data
        except OSError as exc:
            raise TraceReadError(self.name, f"read failed: {exc.strerror or exc}") from None
        if not k:
            return None
        self.raw_read += k
        if self.progress is not None:
            self.progress(self.raw_read, self.total_size)
        return memoryview(self._raw)[:k]

    def _fill_gz(self, out: memoryview, got: int) -> int:
        """Inflate into out[got:] until it is full or the stream ends. `_tail` holds compressed
        bytes given to the inflater but not yet inflated (its output reached the space left)."""
        while got < len(out) and not self._eof:
            data = self._tail
            # After a piece that filled its limit the inflater may hold output (isal buffers
            # some): ask again, with no new input, before reading more.
            if not data and not self._limited:
                data = self._next_raw()
                if data is None:
                    self._eof = True
                    if not self._inflater.eof and (self.decompressed_bytes + got or self.raw_read > 2):
                        self.truncated = "gzip stream ends before its end marker"
                    break
            limit = min(len(out) - got, GZ_PIECE)
            try:
                piece = self._inflater.decompress(data, limit)
            except _zlib.error as exc:
                if self.decompressed_bytes + got == 0:
                    raise TraceReadError(self.name, f"not a valid gzip file ({exc})") from None
                self.truncated = f"gzip stream corrupt after {self.decompressed_bytes + got} bytes ({exc})"
                self._eof = True
                break
            k = len(piece)
            self._limited = k == limit
            out[got : got + k] = piece
            got += k
            del piece
            if self._inflater.eof:
                self._tail = self._inflater.unused_data
                if self._tail:  # concatenated gzip members
                    self._inflater = _zlib.decompressobj(31)
            else:
                self._tail = self._inflater.unconsumed_tail
        return got

    def gzip_trailer_size(self) -> int | None:
        """ISIZE from a gzip file's trailer (the inflated size mod 4 GiB), or None."""
        try:
            pos = self._fh.tell()
            self._fh.seek(-4, os.SEEK_END)
            isize = int.from_bytes(self._fh.read(4), "little")
            self._fh.seek(pos)
        except (AttributeError, OSError, ValueError):
            return None
        return isize

    def close(self) -> None:
        """Close the file if this source opened it."""
        if self._owns:
            self._fh.close()

    def __enter__(self) -> ByteSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Block:
    """A reused buffer of `size` bytes in its own anonymous mapping: never on the malloc heap,
    so that freeing it (`close`) gives the memory back to the system whichever thread filled it."""

    def __init__(self, size: int) -> None:
        self.map = mmap.mmap(-1, max(size, 1))
        self.view = memoryview(self.map)
        self.size = size
        self.n = 0  # bytes filled

    def close(self) -> None:
        """Unmap it (left to the garbage collector while a view of it is still alive)."""
        try:
            self.view.release()
            self.map.close()
        except BufferError:  # a decoded value still holds a view of it: unmapped when it goes
            pass


class Prefetch:
    """`source` read ahead on a thread: the next block is read (and inflated: isal releases the
    GIL) while the caller decodes the current one. Reading allocates nothing per block: the
    thread fills one of `ahead + 1` reused `Block`s and the caller's `readinto` copies it out
    and hands it back. Errors of the reading are raised by `readinto`/`read`; every other
    attribute is the source's (read them after the end). Use as a context manager, so that the
    thread stops when the caller stops early and the blocks are unmapped."""

    def __init__(self, source: ByteSource, block: int = READ_BLOCK, ahead: int = 1) -> None:
        self._source = source
        self._block = block
        self._free: queue.Queue = queue.Queue()
        self._blocks = [Block(block) for _ in range(ahead + 1)]
        for b in self._blocks:
            self._free.put(b)
        self._filled: queue.Queue = queue.Queue()  # never holds more than the blocks
        self._current: Block | None = None
        self._offset = 0  # bytes of the current block already copied out
        self._stop = threading.Event()
        self._done = False
        self._thread = threading.Thread(target=self._run, name="traceanalyzer-read", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    block = self._free.get(timeout=0.05)
                except queue.Empty:
                    continue
                block.n = self._source.readinto(block.view)
                self._filled.put(block)
                if not block.n:
                    return
        except BaseException as exc:  # handed to the reader, raised there
            self._filled.put(exc)

    def _next(self) -> Block | None:
        """The block being copied out (the next one read ahead when none is); None at the end."""
        if self._current is None and not self._done:
            item = self._filled.get()
            if isinstance(item, BaseException):
                self._done = True
                raise item
            if not item.n:
                self._done = True
                self._free.put(item)
                return None
            self._current, self._offset = item, 0
        return self._current

    def _consumed(self, k: int) -> None:
        assert self._current is not None
        self._offset += k
        if self._offset >= self._current.n:
            self._free.put(self._current)
            self._current = None

    def readinto(self, out: bytearray | memoryview) -> int:
        """Copy the next bytes read ahead into `out` (at most one block's worth); 0 at the end."""
        block = self._next()
        if block is None:
            return 0
        k = min(len(out), block.n - self._offset)
        memoryview(out).cast("B")[:k] = block.view[self._offset : self._offset + k]
        self._consumed(k)
        return k

    def read(self, n: int = READ_BLOCK) -> bytes:
        """At most n bytes of the block read ahead (fewer at its end), as bytes; b"" at the end."""
        block = self._next()
        if block is None:
            return b""
        data = bytes(block.view[self._offset : min(block.n, self._offset + n)])
        self._consumed(len(data))
        return data

    def close(self) -> None:
        """Stop the reading thread, wait for it and unmap the blocks."""
        self._stop.set()
        while self._thread.is_alive():
            try:  # a block it is waiting to hand over
                item = self._filled.get(timeout=0.05)
                if isinstance(item, Block):
                    self._free.put(item)
            except queue.Empty:
                pass
        self._thread.join()
        self._current = None
        for b in self._blocks:
            b.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source, name)

    def __enter__(self) -> Prefetch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
